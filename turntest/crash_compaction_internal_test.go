package turntest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
)

// history builds a session's events from a compact description: one string per event,
// "R" for an event of request R, "R:cp F-T" for request R's checkpoint folding F to T. Seqs
// count from 1.
func history(t *testing.T, desc ...string) []session.Event {
	t.Helper()
	var out []session.Event
	for i, d := range desc {
		id, cp, isCP := strings.Cut(d, ":cp ")
		e := session.Event{Seq: int64(i + 1), RequestID: id, Author: "user", Text: d}
		if isCP {
			var from, through int64
			_, err := fmt.Sscanf(cp, "%d-%d", &from, &through)
			require.NoError(t, err)
			data, err := json.Marshal(session.CheckpointData{From: from, Through: through, Policy: "p1-test", Tokens: 3})
			require.NoError(t, err)
			e.Author, e.Data = session.AuthorCheckpoint, data
		}
		out = append(out, e)
	}
	return out
}

// The store checks of compaction find each way checkpoints can be wrong: doubled in a turn,
// not first in their turn, a gap or an overlap in the chain, a range that cuts a turn, an
// unreadable checkpoint; a good chain has none.
func TestCheckCheckpoints(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		desc []string
		want string // a problem's words, "" for none
	}{
		{"good", []string{"a", "a", "b", "b", "c:cp 1-4", "c", "c", "d:cp 5-7", "d", "d"}, ""},
		{"none", []string{"a", "a", "b", "b"}, ""},
		{"doubled in a turn", []string{"a", "a", "b:cp 1-2", "b:cp 3-3", "b"}, "more than one checkpoint"},
		{"not first in its turn", []string{"a", "a", "b", "b:cp 1-2", "b"}, "not the first event"},
		{"a gap", []string{"a", "a", "b", "b", "c:cp 1-2", "c", "d:cp 5-6", "d"}, "should fold from 3"},
		{"not from 1", []string{"a", "a", "b", "b", "c:cp 3-4", "c"}, "should fold from 1"},
		{"an overlap", []string{"a", "a", "b", "b", "c:cp 1-4", "c", "d:cp 4-6", "d"}, "should fold from 5"},
		{"a turn cut", []string{"a", "a", "a", "b", "b:cp 1-2", "b"}, "in the middle of request a's turn"},
		{"unreadable", []string{"a", "a", "b:cp 2-1", "b"}, "covers seqs 2 to 1"},
	} {
		problems := checkCheckpoints(history(t, tc.desc...))
		if tc.want == "" {
			require.Empty(t, problems, tc.name)
			continue
		}
		require.NotEmpty(t, problems, tc.name)
		require.Contains(t, strings.Join(problems, "\n"), tc.want, tc.name)
	}
}

// The harness reports a summarizer called for a compaction step whose record had landed,
// and a model call that did not see every event after the summary's range, or saw another
// summary.
func TestStepLogCatchesCompactionProblems(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rep := &CrashReport{SummarizerCalls: map[string]map[int]int{}}
	l := &stepLog{ids: map[string]string{"k": "r-1"}, landed: map[string]map[int]bool{}, compacted: map[string]compactionRun{}, rep: rep}
	in := turn.SummaryInput{Request: turn.Request{ID: "r-1"}, Step: turn.Step{Ordinal: 1, Name: turn.CompactStep}}
	l.summarizing("k", in)
	require.Empty(t, l.problems, "in flight: it may run again")
	l.land("k", 1)
	l.summarizing("k", in)
	require.Len(t, l.problems, 1)
	require.Contains(t, l.problems[0], "a finished compaction was paid for twice")
	require.Equal(t, map[int]int{1: 2}, rep.SummarizerCalls["r-1"])

	// A session: a's turn (1, 2), b's with a checkpoint of a's (3) and its own (4, 5).
	store := session.NewMemoryStore()
	key := session.Key{App: "app", User: "u", Conversation: "c"}
	_, err := store.Create(ctx, key, nil)
	require.NoError(t, err)
	cp, err := session.NewCheckpointEvent(session.Checkpoint{Summary: "the summary", CheckpointData: session.CheckpointData{From: 1, Through: 2, Policy: "p"}})
	require.NoError(t, err)
	for v, turnOf := range []session.Turn{
		{RequestID: "a", Events: []session.Event{{Author: "user", Text: "1"}, {Author: "assistant", Text: "2"}}},
		{RequestID: "b", Events: []session.Event{cp, {Author: "user", Text: "4"}, {Author: "assistant", Text: "5"}}},
	} {
		_, err := store.Append(ctx, key, int64(v), turnOf)
		require.NoError(t, err)
	}
	sess, err := store.Get(ctx, key, 10)
	require.NoError(t, err)
	events := sess.Events
	see := func(summary string, seen ...session.Event) []string {
		l := &stepLog{compacted: map[string]compactionRun{}, rep: rep}
		l.checkView(ctx, store, key, turn.Input{Request: turn.Request{ID: "c"}, Summary: summary, Session: session.Session{Events: seen}})
		return l.problems
	}
	require.Empty(t, see("the summary", events[3], events[4]))
	require.Contains(t, strings.Join(see("the summary", events[4]), "\n"), "the model saw seqs [5]; the events after the summary's range (seqs 1 to 2) are [4 5]")
	require.Contains(t, strings.Join(see("the summary", events[2], events[3], events[4]), "\n"), "saw seqs [3 4 5]")
	require.Contains(t, strings.Join(see("", events[3], events[4]), "\n"), "the model saw the summary \"\", the latest is \"the summary\"")
}
