package turntest

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
)

// The crash harness's checks of compaction (turn.Runner.ContextBudget): a compaction is the
// turn's journal step turn.CompactStep, whose summary the Runner stores as a checkpoint event
// first in the turn's own append.

// compactionRun is a request's compaction as its summarizer wrote it.
type compactionRun struct {
	data    session.CheckpointData // From, Through, Policy, PreviousPolicy (Tokens 0)
	summary string
}

// crashSummarizer is the summarizer of a Runner in a process that may die: it counts its
// calls per request and step, reports a call for a compaction step whose record had landed
// (a finished compaction that ran again), and keeps what it wrote.
type crashSummarizer struct {
	s     turn.Summarizer
	sw    *crashSwitch
	steps *stepLog
	key   func(turn.Request) string // the inbox key, as the Runner makes it
}

func (s crashSummarizer) Summarize(ctx context.Context, in turn.SummaryInput) (string, error) {
	if s.sw.isDead() {
		return "", errCrashed
	}
	s.steps.summarizing(s.key(in.Request), in)
	out, err := s.s.Summarize(ctx, in)
	if err == nil {
		s.steps.summarized(in, out)
	}
	return out, err
}

// summarizing counts a call of the summarizer for in's step of the request under key, and
// reports it when the step's record had landed.
func (l *stepLog) summarizing(key string, in turn.SummaryInput) {
	l.mu.Lock()
	defer l.mu.Unlock()
	id := in.Request.ID
	if l.rep.SummarizerCalls[id] == nil {
		l.rep.SummarizerCalls[id] = map[int]int{}
	}
	l.rep.SummarizerCalls[id][in.Step.Ordinal]++
	if l.landed[key][in.Step.Ordinal] {
		l.problems = append(l.problems, fmt.Sprintf("request %s: the summarizer ran again for compaction step %d after its record landed in the journal: a finished compaction was paid for twice", id, in.Step.Ordinal))
	}
}

// summarized keeps the summary the summarizer wrote for in's request.
func (l *stepLog) summarized(in turn.SummaryInput, summary string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.compacted[in.Request.ID] = compactionRun{data: in.Checkpoint, summary: summary}
}

// checkView checks what a model call of the turn of in (session key) sees: the summary of
// the latest checkpoint (this turn's compaction's, when it compacted) and every event after
// the range it covers, checkpoints left out; none left uncovered, none shown twice. It reads
// the history from sessions, where this turn is not stored yet.
func (l *stepLog) checkView(ctx context.Context, sessions session.Store, key session.Key, in turn.Input) {
	sess, err := sessions.Get(ctx, key, math.MaxInt32)
	if err != nil {
		return // a new session: Get found none before the Runner created it
	}
	var through int64
	var summary string
	cp, idx, err := session.LatestCheckpoint(sess.Events)
	if err == nil && idx >= 0 {
		through, summary = cp.Through, cp.Summary
	}
	l.mu.Lock()
	if c, ok := l.compacted[in.Request.ID]; ok {
		through, summary = c.data.Through, c.summary
	}
	l.mu.Unlock()
	var want, got []int64
	for _, e := range sess.Events {
		if e.Seq > through && e.Author != session.AuthorCheckpoint {
			want = append(want, e.Seq)
		}
	}
	for _, e := range in.Session.Events {
		got = append(got, e.Seq)
	}
	var problems []string
	if !slices.Equal(want, got) {
		problems = append(problems, fmt.Sprintf("request %s: the model saw seqs %v; the events after the summary's range (seqs 1 to %d) are %v", in.Request.ID, got, through, want))
	}
	if in.Summary != summary {
		problems = append(problems, fmt.Sprintf("request %s: the model saw the summary %.60q, the latest is %.60q", in.Request.ID, in.Summary, summary))
	}
	l.mu.Lock()
	l.problems = append(l.problems, problems...)
	l.mu.Unlock()
}

// checkCompactions checks what the compactions of reqs left in the sessions: each request
// whose summarizer wrote a summary has that compaction's checkpoint first in its stored turn
// (none lost), and every session's checkpoints hold checkCheckpoints' rules.
func checkCompactions(ctx context.Context, sessions session.Store, reqs []turn.Request, cfg CrashConfig, steps *stepLog) []string {
	r := runnerOf(cfg)
	var problems []string
	steps.mu.Lock()
	compacted := maps.Clone(steps.compacted)
	steps.mu.Unlock()
	for _, req := range reqs {
		c, ok := compacted[req.ID]
		if !ok {
			continue
		}
		events, err := sessions.FindTurn(ctx, r.Key(req), req.ID)
		if err != nil {
			continue // checkStored reports it
		}
		got, isCP, err := session.CheckpointOf(events[0])
		switch {
		case !isCP || err != nil:
			problems = append(problems, fmt.Sprintf("request %s: compacted seqs %d to %d, and its stored turn starts with no checkpoint (%s event; %v): the checkpoint was lost",
				req.ID, c.data.From, c.data.Through, events[0].Author, err))
		case got.From != c.data.From || got.Through != c.data.Through || got.Policy != c.data.Policy || got.Summary != c.summary:
			problems = append(problems, fmt.Sprintf("request %s: compacted seqs %d to %d (policy %s), and its stored checkpoint covers %d to %d (policy %s) with another summary",
				req.ID, c.data.From, c.data.Through, c.data.Policy, got.From, got.Through, got.Policy))
		}
	}
	for _, key := range sessionKeys(r, reqs) {
		sess, err := sessions.Get(ctx, key, math.MaxInt32)
		if err != nil {
			continue
		}
		for _, p := range checkCheckpoints(sess.Events) {
			problems = append(problems, fmt.Sprintf("session %s: %s", key, p))
		}
	}
	return problems
}

// checkCheckpoints checks the checkpoints of a whole history (oldest first): each reads; a
// turn holds at most one, first among its events (none doubled); each folds from the
// previous one's Through plus one, the first from seq 1, so that together they cover seqs 1
// to the latest's Through once each (no event uncovered, none folded twice); each covers
// whole turns (its Through is a turn's last event).
func checkCheckpoints(events []session.Event) []string {
	var problems []string
	perTurn := map[string]int{}
	bySeq := make(map[int64]session.Event, len(events))
	for _, e := range events {
		bySeq[e.Seq] = e
	}
	var prev int64 // the previous checkpoint's Through
	for i, e := range events {
		c, ok, err := session.CheckpointOf(e)
		switch {
		case !ok:
			continue
		case err != nil:
			problems = append(problems, err.Error())
			continue
		}
		if perTurn[e.RequestID]++; perTurn[e.RequestID] == 2 {
			problems = append(problems, fmt.Sprintf("the turn of request %s holds more than one checkpoint (the second at seq %d): doubled", e.RequestID, e.Seq))
		}
		if i > 0 && events[i-1].RequestID == e.RequestID {
			problems = append(problems, fmt.Sprintf("the checkpoint at seq %d is not the first event of request %s's turn", e.Seq, e.RequestID))
		}
		if c.From != prev+1 {
			problems = append(problems, fmt.Sprintf("the checkpoint at seq %d folds seqs %d to %d, and the one before covers through %d: it should fold from %d (events uncovered or folded twice)",
				e.Seq, c.From, c.Through, prev, prev+1))
		}
		if last, next := bySeq[c.Through], bySeq[c.Through+1]; last.RequestID == next.RequestID {
			problems = append(problems, fmt.Sprintf("the checkpoint at seq %d covers through seq %d, in the middle of request %s's turn", e.Seq, c.Through, last.RequestID))
		}
		prev = max(prev, c.Through)
	}
	return problems
}
