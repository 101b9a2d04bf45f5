package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
	"github.com/turnstile-go/turnstile/internal/sqltest"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/session/sqlsession"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turntest"
)

// session show lists a session's checkpoints and what each covers (seqs, the range it
// folded, policy, previous policy, tokens), in text and JSON, reading back past --recent
// until it has --checkpoints of them; a session that never compacted says so. The
// checkpoints are a turn.Runner's own, on SQLite and PostgreSQL: seven turns with
// HistoryLimit 2 compact at turns 3 and 5, and turn 6, under a changed summarization
// instruction, compacts again at once and records the previous policy.
func TestSessionShowCheckpoints(t *testing.T) {
	t.Parallel()
	for _, d := range databases(t) {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := d.open(t)
			prefix := sqltest.Prefix(t, db, d.dialect == sqlinbox.PostgreSQL)
			dbf := []string{"--db=" + d.dsn, "--table-prefix=" + prefix}
			ok(t, append([]string{"migrate"}, dbf...)...)
			sessions, err := sqlsession.New(db, sqlsession.Dialect(d.dialect), sqlsession.Options{TablePrefix: prefix, Concurrency: -1})
			require.NoError(t, err)
			ib, err := sqlinbox.New(db, d.dialect, sqlinbox.Options{TablePrefix: prefix, Concurrency: -1})
			require.NoError(t, err)
			model := turn.ModelFunc(func(_ context.Context, in turn.Input) (turn.Output, error) {
				return turn.Output{Events: []session.Event{{Author: "assistant", Text: "re " + in.Request.Text}}}, nil
			})
			summarize := turn.SummarizerFunc(func(_ context.Context, in turn.SummaryInput) (string, error) {
				return fmt.Sprintf("summary\nof seqs %d to %d", in.Checkpoint.From, in.Checkpoint.Through), nil
			})
			r := &turn.Runner{Model: model, Sessions: sessions, Inbox: ib, HistoryLimit: 2, Summarizer: summarize}
			v2 := *r
			v2.SummaryInstruction = "Summarize, version 2."
			require.NotEqual(t, r.CompactionPolicy(), v2.CompactionPolicy())
			var reqs []turn.Request
			for i := range 7 {
				req := turntest.NewRequest("c-1", "u-1", fmt.Sprintf("message %d", i+1))
				runner := r
				if i >= 5 {
					runner = &v2
				}
				_, err := runner.Run(ctx, req)
				require.NoError(t, err, "turn %d", i+1)
				reqs = append(reqs, req)
			}
			// An untouched session of its own: no compaction.
			_, err = r.Run(ctx, turntest.NewRequest("c-2", "u-2", "hello"))
			require.NoError(t, err)

			// Seqs: turns 1 and 2 are 1-4; turn 3 stores its checkpoint (1-4) at 5, then 6-7;
			// turn 4 is 8-9; turn 5's checkpoint (5-9) is 10, then 11-12; turn 6's (10-12,
			// the new policy) is 13, then 14-15; turn 7 is 16-17.
			p1, p2 := r.CompactionPolicy(), v2.CompactionPolicy()
			want := []checkpointJSON{
				{Seq: 5, RequestID: reqs[2].ID, CheckpointData: session.CheckpointData{From: 1, Through: 4, Policy: p1}, Summary: "summary\nof seqs 1 to 4"},
				{Seq: 10, RequestID: reqs[4].ID, CheckpointData: session.CheckpointData{From: 5, Through: 9, Policy: p1}, Summary: "summary\nof seqs 5 to 9"},
				{Seq: 13, RequestID: reqs[5].ID, CheckpointData: session.CheckpointData{From: 10, Through: 12, Policy: p2, PreviousPolicy: p1}, Summary: "summary\nof seqs 10 to 12"},
			}
			show := func(args ...string) sessionJSON {
				t.Helper()
				var s sessionJSON
				out := ok(t, append(append([]string{"session", "show", "--json", "--conversation=c-1"}, args...), dbf...)...)
				require.NoError(t, json.Unmarshal([]byte(out), &s), out)
				for i := range s.Checkpoints { // checked here, then left out of the comparisons
					require.Positive(t, s.Checkpoints[i].Tokens, "a checkpoint's tokens")
					require.False(t, s.Checkpoints[i].Time.IsZero(), "a checkpoint's time")
					s.Checkpoints[i].Tokens, s.Checkpoints[i].Time = 0, time.Time{}
				}
				return s
			}

			// Three recent events (15 to 17) hold no checkpoint: it reads back for all three.
			s := show("--recent=3")
			require.EqualValues(t, 17, s.EventCount)
			require.Len(t, s.Events, 3)
			require.EqualValues(t, 12, s.CoveredThrough, "the model sees the latest summary and seqs 13 on")
			require.EqualValues(t, 1, s.CheckpointsFrom, "the whole history read")
			require.Equal(t, want, s.Checkpoints)
			// --checkpoints 1: the latest only.
			s = show("--recent=3", "--checkpoints=1")
			require.Equal(t, want[2:], s.Checkpoints)
			require.LessOrEqual(t, s.CheckpointsFrom, int64(13))
			require.EqualValues(t, 12, s.CoveredThrough)
			// The checkpoint events themselves are events of their turns.
			s = show("--recent=5")
			require.Equal(t, session.AuthorCheckpoint, s.Events[0].Author, "seq 13, the first event of turn 6")
			require.EqualValues(t, 13, s.Events[0].Seq)
			require.Equal(t, reqs[5].ID, s.Events[0].RequestID)

			out := ok(t, append([]string{"session", "show", "--conversation=c-1", "--recent=3"}, dbf...)...)
			require.Contains(t, out, "checkpoints: 3 listed, of the history from seq 1 on; the latest covers seqs 1 to 12: the model sees its summary and the events after seq 12")
			require.Contains(t, out, "COVERS")
			for _, line := range []struct{ seq, covers, folded, policy, summary string }{
				{"5", "1-4", "1-4", p1, "summary of seqs 1 to 4"},
				{"10", "1-9", "5-9", p1, "summary of seqs 5 to 9"},
				{"13", "1-12", "10-12", p2 + " (was " + p1 + ")", "summary of seqs 10 to 12"},
			} {
				require.Regexp(t, `(?m)^`+line.seq+` +\S+ +\S+ +`+line.covers+` +`+line.folded+` +`+regexp.QuoteMeta(line.policy)+` +\d+ +`+line.summary+`$`, out)
			}
			out = ok(t, append([]string{"session", "show", "--conversation=c-2"}, dbf...)...)
			require.Contains(t, out, "checkpoints: none (no compaction yet)")
			var none sessionJSON
			require.NoError(t, json.Unmarshal([]byte(ok(t, append([]string{"session", "show", "--json", "--conversation=c-2"}, dbf...)...)), &none))
			require.Empty(t, none.Checkpoints)
			require.NotNil(t, none.Checkpoints, "an empty list, not null")
			require.Zero(t, none.CoveredThrough)
			out = ok(t, append([]string{"session", "show", "--conversation=c-1", "--checkpoints=0"}, dbf...)...)
			require.NotContains(t, out, "checkpoints:")
		})
	}
}
