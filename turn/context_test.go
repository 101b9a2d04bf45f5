package turn_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
)

// factSummarizer keeps the lines of the previous summary and of the folded events that start
// with "FACT:", as a scripted summarizer: the tests check the pipeline, not a model's skill.
type factSummarizer struct {
	calls atomic.Int64
	fail  func(call int64) error
	long  bool // return a summary over any budget
}

func (s *factSummarizer) Summarize(_ context.Context, in turn.SummaryInput) (string, error) {
	n := s.calls.Add(1)
	if s.fail != nil {
		if err := s.fail(n); err != nil {
			return "", err
		}
	}
	if s.long {
		return strings.Repeat("very long summary ", in.MaxTokens), nil
	}
	return keepFacts(in.Previous, in.Events), nil
}

// keepFacts returns the distinct "FACT:" lines of the previous summary and the events, in order.
func keepFacts(previous string, events []session.Event) string {
	var lines []string
	seen := map[string]bool{}
	add := func(text string) {
		for _, l := range strings.Split(text, "\n") {
			if strings.HasPrefix(l, "FACT:") && !seen[l] {
				seen[l] = true
				lines = append(lines, l)
			}
		}
	}
	add(previous)
	for _, e := range events {
		add(e.Text)
	}
	return "summary\n" + strings.Join(lines, "\n")
}

// viewModel records what each turn's model saw: the summary and the events.
type viewModel struct {
	mu     sync.Mutex
	inputs []turn.Input
}

func (m *viewModel) Respond(_ context.Context, in turn.Input) (turn.Output, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.inputs = append(m.inputs, in)
	return turn.Output{Events: []session.Event{{Text: "answer to " + in.Request.Text}}}, nil
}

// compactionSetup returns a Runner with a tiny budget over memory stores.
func compactionSetup(budget, history int) (*turn.Runner, *viewModel, *factSummarizer, *session.MemoryStore, *inbox.MemoryInbox) {
	m, s := &viewModel{}, &factSummarizer{}
	sessions, ib := session.NewMemoryStore(), inbox.NewMemoryInbox()
	r := &turn.Runner{Model: m, Sessions: sessions, Inbox: ib, TurnTimeout: 10 * time.Second,
		ContextBudget: budget, HistoryLimit: history, Summarizer: s}
	return r, m, s, sessions, ib
}

// seen returns the texts a model input holds: its summary and its events.
func seen(in turn.Input) string {
	var b strings.Builder
	b.WriteString(in.Summary)
	for _, e := range in.Session.Events {
		b.WriteString("\n" + e.Text)
	}
	return b.String()
}

func TestCompactionKeepsEveryEventInView(t *testing.T) {
	t.Parallel()
	r, m, s, sessions, _ := compactionSetup(400, 10)
	ctx := context.Background()
	var reqs []turn.Request
	for i := 1; i <= 60; i++ {
		text := fmt.Sprintf("message %d", i)
		if i <= 3 {
			text += fmt.Sprintf("\nFACT: fact %d", i)
		}
		req := newRequest("conv-compact", "u-1", text)
		reqs = append(reqs, req)
		_, err := r.Run(ctx, req)
		require.NoError(t, err)
	}
	require.Positive(t, s.calls.Load(), "the budget forces compactions")
	require.Less(t, s.calls.Load(), int64(30), "compaction is amortized: it folds down to a quarter of the budget")
	budget := turn.EstimateTokens
	for i, in := range m.inputs {
		// Every earlier message is either summarized or in view: each of the first three
		// facts, and the previous message itself.
		require.LessOrEqual(t, len(in.Session.Events), 10, "turn %d", i+1)
		n := budget(in.Summary) + budget(in.Request.Text)
		for _, e := range in.Session.Events {
			n += budget(e.Text) + 4
		}
		require.LessOrEqual(t, n, 200, "turn %d: the Runner's part stays within half the budget", i+1)
		for f := 1; f <= min(i, 3); f++ {
			require.Contains(t, seen(in), fmt.Sprintf("FACT: fact %d", f), "turn %d", i+1)
		}
		if i > 0 {
			require.Contains(t, seen(in), fmt.Sprintf("message %d", i), "turn %d sees the turn before", i+1)
		}
	}
	// Every checkpoint covers from where the previous one ended, and nothing is deleted.
	key := r.Key(reqs[0])
	sess, err := sessions.Get(ctx, key, 1000)
	require.NoError(t, err)
	var through int64
	checkpoints := 0
	for _, e := range sess.Events {
		c, ok, err := session.CheckpointOf(e)
		require.NoError(t, err)
		if !ok {
			continue
		}
		checkpoints++
		require.Equal(t, through+1, c.From)
		require.Greater(t, c.Through, through)
		require.Less(t, c.Through, e.Seq)
		require.Equal(t, r.CompactionPolicy(), c.Policy)
		through = c.Through
	}
	require.Equal(t, int(s.calls.Load()), checkpoints)
	require.Equal(t, int64(120+checkpoints), sess.EventCount, "every event stays in the store")
	for _, req := range reqs {
		events, err := sessions.FindTurn(ctx, key, req.ID)
		require.NoError(t, err)
		require.Equal(t, "answer to "+req.Text, events[len(events)-1].Text)
	}
}

// TestCompactionIsAJournaledStep: a turn that compacted and then failed runs again with the
// recorded summary, and stores one checkpoint.
func TestCompactionIsAJournaledStep(t *testing.T) {
	t.Parallel()
	r, _, s, sessions, _ := compactionSetup(400, 4)
	ctx := context.Background()
	for i := range 3 {
		_, err := r.Run(ctx, newRequest("conv-journal", "u-1", fmt.Sprintf("m%d", i)))
		require.NoError(t, err)
	}
	require.Zero(t, s.calls.Load())
	var fail atomic.Bool
	fail.Store(true)
	r.Model = turn.ModelFunc(func(_ context.Context, in turn.Input) (turn.Output, error) {
		if fail.Load() {
			return turn.Output{}, errors.New("model down")
		}
		return turn.Output{Events: []session.Event{{Text: "ok"}}}, nil
	})
	req := newRequest("conv-journal", "u-1", "the fourth")
	_, err := r.Run(ctx, req)
	require.Error(t, err)
	require.Equal(t, int64(1), s.calls.Load(), "the compaction ran before the model failed")
	fail.Store(false)
	_, err = r.Run(ctx, req)
	require.NoError(t, err)
	require.Equal(t, int64(1), s.calls.Load(), "the recorded compaction is not paid for again")
	events, err := sessions.FindTurn(ctx, r.Key(req), req.ID)
	require.NoError(t, err)
	require.Equal(t, session.AuthorCheckpoint, events[0].Author)
	c, ok, err := session.CheckpointOf(events[0])
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, int64(1), c.From)
}

func TestCompactionSadPaths(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("RequestOverBudget", func(t *testing.T) {
		t.Parallel()
		r, m, _, _, _ := compactionSetup(400, 10)
		_, err := r.Run(ctx, newRequest("conv-big", "u-1", strings.Repeat("x", 600)))
		var dl *turn.DeadLetterError
		require.ErrorAs(t, err, &dl)
		require.ErrorIs(t, err, turn.ErrOverBudget)
		require.Contains(t, dl.Reason, "attachments")
		require.Empty(t, m.inputs, "the model is not called")
	})
	// A message of about 50 tokens and its answer: the third turn's input passes half the
	// budget of 400 and still fits three quarters (compaction is tried, and a failure goes
	// on without it); the fourth's does not (a failure fails the attempt).
	long := func(i int) string { return fmt.Sprintf("m%d %s", i, strings.Repeat("x", 140)) }
	t.Run("SummaryOverBudget", func(t *testing.T) {
		t.Parallel()
		r, m, s, sessions, _ := compactionSetup(400, 50)
		s.long = true
		var err error
		var req turn.Request
		for i := 0; i < 8 && err == nil; i++ {
			req = newRequest("conv-long", "u-1", long(i))
			_, err = r.Run(ctx, req)
		}
		require.ErrorIs(t, err, turn.ErrSummaryTooLong)
		require.Equal(t, turn.KindAttempt, turn.Classify(err), "a failed attempt: a summarizer may do better next time")
		require.Len(t, m.inputs, 3, "the third turn went on without its failed compaction, the fourth could not")
		require.Equal(t, int64(2), s.calls.Load())
		_, err = sessions.FindTurn(ctx, r.Key(req), req.ID)
		require.ErrorIs(t, err, session.ErrNotFound, "nothing is stored, nothing truncated")
	})
	t.Run("SummarizerError", func(t *testing.T) {
		t.Parallel()
		r, m, s, _, _ := compactionSetup(400, 50)
		s.fail = func(int64) error { return turn.RetryAfter(time.Second, errors.New("rate limited")) }
		var err error
		for i := 0; i < 8 && err == nil; i++ {
			_, err = r.Run(ctx, newRequest("conv-sumerr", "u-1", long(i)))
		}
		require.Equal(t, turn.KindRateLimited, turn.Classify(err), "the summarizer's kind is kept")
		require.Len(t, m.inputs, 3)
	})
	t.Run("SummarizerPanics", func(t *testing.T) {
		t.Parallel()
		r, _, _, _, _ := compactionSetup(400, 50)
		r.Summarizer = turn.SummarizerFunc(func(context.Context, turn.SummaryInput) (string, error) { panic("summarizer bug") })
		var err error
		for i := 0; i < 8 && err == nil; i++ {
			_, err = r.Run(ctx, newRequest("conv-panic", "u-1", long(i)))
		}
		var pe *turn.PanicError
		require.ErrorAs(t, err, &pe)
		require.Contains(t, err.Error(), "summarizer")
	})
	t.Run("StateOverAQuarter", func(t *testing.T) {
		t.Parallel()
		r, _, _, sessions, _ := compactionSetup(400, 50)
		r.Model = turn.ModelFunc(func(context.Context, turn.Input) (turn.Output, error) {
			return turn.Output{Events: []session.Event{{Text: "ok"}}, State: []byte(`"` + strings.Repeat("s", 400) + `"`)}, nil
		})
		req := newRequest("conv-state", "u-1", "remember all this")
		_, err := r.Run(ctx, req)
		var dl *turn.DeadLetterError
		require.ErrorAs(t, err, &dl, "the turn that writes the state is refused, not every turn after it")
		require.ErrorIs(t, err, turn.ErrOverBudget)
		_, err = sessions.FindTurn(ctx, r.Key(req), req.ID)
		require.ErrorIs(t, err, session.ErrNotFound)
	})
	t.Run("BudgetTooSmall", func(t *testing.T) {
		t.Parallel()
		r, _, _, _, _ := compactionSetup(8, 0)
		require.ErrorContains(t, r.Validate(), "ContextBudget 8")
	})
	t.Run("NegativeBudget", func(t *testing.T) {
		t.Parallel()
		r, _, _, _, _ := compactionSetup(-1, 0)
		require.Error(t, r.Validate())
	})
}

// TestCompactionPolicyChange: a checkpoint written under another instruction is not extended
// silently: the next turn compacts at once and records the old policy.
func TestCompactionPolicyChange(t *testing.T) {
	t.Parallel()
	r, _, s, sessions, _ := compactionSetup(400, 4)
	ctx := context.Background()
	var req turn.Request
	for i := range 4 {
		req = newRequest("conv-policy", "u-1", fmt.Sprintf("m%d", i))
		_, err := r.Run(ctx, req)
		require.NoError(t, err)
	}
	require.Equal(t, int64(1), s.calls.Load())
	old := r.CompactionPolicy()
	r.SummaryInstruction = "Summarize in French."
	require.NotEqual(t, old, r.CompactionPolicy())
	req = newRequest("conv-policy", "u-1", "after the change")
	_, err := r.Run(ctx, req)
	require.NoError(t, err)
	require.Equal(t, int64(2), s.calls.Load(), "the new policy compacts at once")
	events, err := sessions.FindTurn(ctx, r.Key(req), req.ID)
	require.NoError(t, err)
	c, ok, err := session.CheckpointOf(events[0])
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, r.CompactionPolicy(), c.Policy)
	require.Equal(t, old, c.PreviousPolicy)
}

// TestCompactionReadsPastTheWindow: a turn that adds more events than HistoryLimit leaves
// none of them out of the next turn's view.
func TestCompactionReadsPastTheWindow(t *testing.T) {
	t.Parallel()
	r, m, s, _, _ := compactionSetup(4000, 5)
	ctx := context.Background()
	big := turn.ModelFunc(func(_ context.Context, in turn.Input) (turn.Output, error) {
		var out turn.Output
		for i := range 12 {
			out.Events = append(out.Events, session.Event{Author: "tool", Text: fmt.Sprintf("FACT: output %d", i)})
		}
		out.Events = append(out.Events, session.Event{Text: "done"})
		return out, nil
	})
	r.Model = big
	_, err := r.Run(ctx, newRequest("conv-wide", "u-1", "go"))
	require.NoError(t, err)
	r.Model = m
	_, err = r.Run(ctx, newRequest("conv-wide", "u-1", "next"))
	require.NoError(t, err)
	require.Equal(t, int64(1), s.calls.Load(), "14 uncovered events over a window of 5: compacted")
	for i := range 12 {
		require.Contains(t, seen(m.inputs[0]), fmt.Sprintf("FACT: output %d", i))
	}
}

// TestDefaultSummarizerIsTheModel: a Model that is not a Summarizer is asked itself, with the
// instruction and the transcript as the message of a turn of an empty session.
func TestDefaultSummarizerIsTheModel(t *testing.T) {
	t.Parallel()
	var asked []turn.Input
	model := turn.ModelFunc(func(_ context.Context, in turn.Input) (turn.Output, error) {
		if strings.HasPrefix(in.Request.Text, turn.DefaultSummaryInstruction) {
			asked = append(asked, in)
			return turn.Output{Events: []session.Event{{Text: "the user said m0 to m3"}}}, nil
		}
		return turn.Output{Events: []session.Event{{Text: "ok " + in.Summary}}}, nil
	})
	sessions := session.NewMemoryStore()
	r := &turn.Runner{Model: model, Sessions: sessions, Inbox: inbox.NewMemoryInbox(), HistoryLimit: 4}
	var res turn.Result
	for i := range 4 {
		var err error
		res, err = r.Run(context.Background(), newRequest("conv-default", "u-1", fmt.Sprintf("m%d", i)))
		require.NoError(t, err)
	}
	require.Len(t, asked, 1)
	require.Empty(t, asked[0].Session.Events, "the summarizing turn sees no history")
	require.Contains(t, asked[0].Request.Text, "[seq 1] user: m0")
	require.Contains(t, asked[0].Request.Text, "[seq 4] assistant: ok")
	require.Equal(t, "ok the user said m0 to m3", res.Text, "the turn that compacted sees the new summary")
}

// TestCompactionRaceStoresOneCheckpoint: two members running the same turn at once (a zombie
// and the new owner after a rebalance) both compact; one turn and one checkpoint are stored,
// and the loser's version conflict fails only its attempt.
func TestCompactionRaceStoresOneCheckpoint(t *testing.T) {
	t.Parallel()
	r, _, _, sessions, _ := compactionSetup(400, 4)
	ctx := context.Background()
	for i := range 3 {
		_, err := r.Run(ctx, newRequest("conv-race", "u-1", fmt.Sprintf("m%d", i)))
		require.NoError(t, err)
	}
	both := make(chan struct{})
	var arrived atomic.Int64
	r.Summarizer = turn.SummarizerFunc(func(ctx context.Context, in turn.SummaryInput) (string, error) {
		if arrived.Add(1) == 2 {
			close(both)
		}
		select { // both members are in the compaction before either records it
		case <-both:
		case <-ctx.Done():
			return "", ctx.Err()
		}
		return keepFacts(in.Previous, in.Events), nil
	})
	req := newRequest("conv-race", "u-1", "raced")
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := r.Run(ctx, req)
			errs <- err
		}()
	}
	var failed int
	for range 2 {
		if err := <-errs; err != nil {
			require.ErrorIs(t, err, session.ErrConflict)
			failed++
		}
	}
	require.LessOrEqual(t, failed, 1)
	_, err := r.Run(ctx, req) // the loser's redelivery
	require.NoError(t, err)
	sess, err := sessions.Get(ctx, r.Key(req), 100)
	require.NoError(t, err)
	var checkpoints, turns int
	for _, e := range sess.Events {
		switch {
		case e.Author == session.AuthorCheckpoint:
			checkpoints++
		case e.RequestID == req.ID && e.Author == "user":
			turns++
		}
	}
	require.Equal(t, 1, checkpoints)
	require.Equal(t, 1, turns)
	require.Equal(t, int64(2), arrived.Load())
}

// TestCompactionFollowsAnEarlierRunsJournal: a turn whose earlier run recorded steps without
// compacting (a deploy lowered the budget between two deliveries) goes on from its journal
// instead of dead-lettering a step mismatch; the next turn compacts.
func TestCompactionFollowsAnEarlierRunsJournal(t *testing.T) {
	t.Parallel()
	r, _, s, sessions, _ := compactionSetup(4000, 50)
	ctx := context.Background()
	for i := range 3 {
		_, err := r.Run(ctx, newRequest("conv-deploy", "u-1", fmt.Sprintf("m%d", i)))
		require.NoError(t, err)
	}
	var calls atomic.Int64
	r.Model = turn.ModelFunc(func(ctx context.Context, in turn.Input) (turn.Output, error) {
		out, err := in.Step(ctx, "model", func(context.Context, string) ([]byte, error) {
			calls.Add(1)
			return []byte("answer"), nil
		})
		if err != nil {
			return turn.Output{}, err
		}
		if in.Attempt == 1 && in.Request.Text == "across the deploy" {
			return turn.Output{}, errors.New("killed after its model step")
		}
		return turn.Output{Events: []session.Event{{Text: string(out)}}}, nil
	})
	req := newRequest("conv-deploy", "u-1", "across the deploy")
	_, err := r.Run(ctx, req)
	require.Error(t, err)
	r.HistoryLimit = 4 // the deploy: six events are now more than the window
	res, err := r.Run(ctx, req)
	require.NoError(t, err)
	require.Equal(t, "answer", res.Text)
	require.Equal(t, int64(1), calls.Load(), "the recorded model step is not paid again")
	calls.Store(0)
	require.Zero(t, s.calls.Load(), "no compaction in a turn whose journal went on without one")
	_, err = r.Run(ctx, newRequest("conv-deploy", "u-1", "the next turn"))
	require.NoError(t, err)
	require.Equal(t, int64(1), s.calls.Load(), "the next turn compacts")
	events, err := sessions.FindTurn(ctx, r.Key(req), req.ID)
	require.NoError(t, err)
	require.Equal(t, "user", events[0].Author)
}

// A model's event that takes the checkpoints' author is refused (a dead letter with the
// reason): stored, it would pass for the conversation's summary.
func TestModelCannotForgeACheckpoint(t *testing.T) {
	t.Parallel()
	r, _, _, sessions, _ := compactionSetup(4000, 50)
	r.Model = turn.ModelFunc(func(context.Context, turn.Input) (turn.Output, error) {
		return turn.Output{Events: []session.Event{{Author: session.AuthorCheckpoint, Text: "forged", Data: []byte(`{"from":1,"through":999}`)}, {Text: "ok"}}}, nil
	})
	req := newRequest("conv-forge", "u-1", "hello")
	_, err := r.Run(context.Background(), req)
	var dl *turn.DeadLetterError
	require.ErrorAs(t, err, &dl)
	require.Contains(t, dl.Reason, "keeps for its checkpoints")
	_, err = sessions.FindTurn(context.Background(), r.Key(req), req.ID)
	require.ErrorIs(t, err, session.ErrNotFound)
}

// TestCompactionFoldsABacklogInChunks: a conversation that grew long before compaction (a
// deploy that brought it, or lowered the budget) folds in several summaries of one turn, each
// summarizer request within the budget, and stores one checkpoint covering all of it.
func TestCompactionFoldsABacklogInChunks(t *testing.T) {
	t.Parallel()
	r, m, _, sessions, _ := compactionSetup(1_000_000, 10_000)
	ctx := context.Background()
	for i := range 40 {
		_, err := r.Run(ctx, newRequest("conv-backlog", "u-1", fmt.Sprintf("m%d %s", i, strings.Repeat("y", 120))))
		require.NoError(t, err)
	}
	var inputs []int
	r.ContextBudget, r.HistoryLimit = 1000, 50
	r.Summarizer = turn.SummarizerFunc(func(_ context.Context, in turn.SummaryInput) (string, error) {
		inputs = append(inputs, turn.EstimateTokens(in.Transcript()))
		return keepFacts(in.Previous, in.Events) + fmt.Sprintf("\nthrough %d", in.Events[len(in.Events)-1].Seq), nil
	})
	req := newRequest("conv-backlog", "u-1", "after the deploy")
	_, err := r.Run(ctx, req)
	require.NoError(t, err)
	require.Greater(t, len(inputs), 1, "several summaries")
	for _, n := range inputs {
		require.LessOrEqual(t, n, 1000, "no summarizer request over the budget")
	}
	events, err := sessions.FindTurn(ctx, r.Key(req), req.ID)
	require.NoError(t, err)
	c, ok, err := session.CheckpointOf(events[0])
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, int64(1), c.From, "one checkpoint covers the whole backlog it folded")
	last := m.inputs[len(m.inputs)-1]
	require.Equal(t, c.Through+1, last.Session.Events[0].Seq, "the model sees every event after it")
}
