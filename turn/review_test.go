package turn_test

// The TestReview tests are regression tests of the bugs a review of the step journal, the
// outbox and the agent loop found on 2026-12-02: each comment describes a bug as it was found;
// the test asserts the behaviour of its fix.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
	"github.com/turnstile-go/turnstile/internal/sqltest"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
)

// countingSteps runs n steps named name through in.Step, counting the runs of their fn (the
// side effect: a refund, a paid model call).
type countingSteps struct {
	n    int
	name func(i int) string
	runs atomic.Int32
}

func (m *countingSteps) Respond(ctx context.Context, in turn.Input) (turn.Output, error) {
	for i := range m.n {
		if _, err := in.Step(ctx, m.name(i), func(context.Context, string) ([]byte, error) {
			m.runs.Add(1)
			return []byte(`"done"`), nil
		}); err != nil {
			return turn.Output{}, err
		}
	}
	return turn.Output{Events: []session.Event{{Text: "ok"}}}, nil
}

// Runner.MaxSteps is checked when the step's output is recorded, after its fn ran: the step
// past the bound performs its side effect (a refund; a paid model call) and only then fails
// the turn with ErrJournalFull, so the request is dead-lettered with a side effect nobody
// recorded or told the model of. The step count is known before fn runs (the ordinal).
func TestReviewStepPastMaxStepsRunsItsSideEffect(t *testing.T) {
	t.Parallel()
	m := &countingSteps{n: 3, name: func(i int) string { return fmt.Sprintf("tool:refund-%d", i) }}
	r := &turn.Runner{Model: m, Sessions: session.NewMemoryStore(), Inbox: inbox.NewMemoryInbox(), MaxSteps: 2}
	_, err := r.Run(context.Background(), newRequest("c-review-bound", "u-1", "refund three orders"))
	require.ErrorIs(t, err, turn.ErrJournalFull)
	require.EqualValues(t, 2, m.runs.Load(), "step 3 is past MaxSteps = 2: it must fail before its fn runs")
}

// barrierInbox holds each RecordStep until n of them wait, as parallel tool calls that finish
// together do.
type barrierInbox struct {
	*inbox.MemoryInbox
	n    int
	mu   sync.Mutex
	wait int
	all  chan struct{}
}

func (b *barrierInbox) RecordStep(ctx context.Context, key string, s inbox.Step) (inbox.Step, error) {
	b.mu.Lock()
	b.wait++
	if b.wait == b.n {
		close(b.all)
	}
	b.mu.Unlock()
	<-b.all
	return b.MemoryInbox.RecordStep(ctx, key, s)
}

// parallelSteps takes n steps in order and runs them at once, as the Journal's doc says.
type parallelSteps struct{ n int }

func (m parallelSteps) Respond(ctx context.Context, in turn.Input) (turn.Output, error) {
	j := in.Journal()
	steps := make([]turn.Step, m.n)
	for i := range steps {
		steps[i] = j.Next(fmt.Sprintf("tool:t%d", i))
	}
	errs := make([]error, m.n)
	var wg sync.WaitGroup
	for i, s := range steps {
		wg.Go(func() {
			_, errs[i] = j.Run(ctx, s, func(context.Context, string) ([]byte, error) { return []byte(`"x"`), nil })
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return turn.Output{}, err
	}
	return turn.Output{Events: []session.Event{{Text: "ok"}}}, nil
}

// Journal.record checks the bounds under the lock, releases it, records, and only then counts
// the step: parallel steps that record at once all pass the check, so a turn records more
// than MaxSteps steps (and more than MaxJournalBytes bytes).
func TestReviewParallelStepsPassMaxSteps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// The barrier lets the records go once two wait: the two places MaxSteps gives (before the
	// fix all four steps reached it and recorded).
	ib := &barrierInbox{MemoryInbox: inbox.NewMemoryInbox(), n: 2, all: make(chan struct{})}
	r := &turn.Runner{Model: parallelSteps{n: 4}, Sessions: session.NewMemoryStore(), Inbox: ib, MaxSteps: 2}
	req := newRequest("c-review-parallel", "u-1", "four tools at once")
	_, err := r.Run(ctx, req)
	steps, serr := ib.Steps(ctx, r.InboxKey(req))
	require.NoError(t, serr)
	require.LessOrEqual(t, len(steps), 2, "MaxSteps = 2, yet the journal holds %d steps (run error: %v)", len(steps), err)
}

// runThenDefer runs step 1 "tool:email" as a regular step and fails on its first run; on its
// second run (a deploy made email a deferred tool) it defers step 1 "tool:email".
type runThenDefer struct{ runs atomic.Int32 }

func (m *runThenDefer) Respond(ctx context.Context, in turn.Input) (turn.Output, error) {
	j := in.Journal()
	s := j.Next("tool:email")
	if m.runs.Add(1) == 1 {
		if _, err := j.Run(ctx, s, func(context.Context, string) ([]byte, error) { return []byte(`"sent"`), nil }); err != nil {
			return turn.Output{}, err
		}
		return turn.Output{}, errors.New("killed")
	}
	if _, err := j.Defer(ctx, s, "email", map[string]string{"to": "x"}); err != nil {
		return turn.Output{}, err
	}
	return turn.Output{Events: []session.Event{{Text: "ok"}}}, nil
}

// The mismatch reason of a step that a run defers where the journal ran it names the same
// step twice ("tool:email" in the journal and "tool:email" in this run): Journal.mismatch
// always prints this run's step as not deferred. The operator reading the dead letter at 3 a.m.
// sees two equal names and no difference.
func TestReviewDeferMismatchReasonNamesTheSameStepTwice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := &turn.Runner{Model: &runThenDefer{}, Sessions: session.NewMemoryStore(), Inbox: inbox.NewMemoryInbox()}
	req := newRequest("c-review-mismatch", "u-1", "email me")
	_, err := r.Run(ctx, req)
	require.Error(t, err)
	_, err = r.Run(ctx, req)
	require.ErrorIs(t, err, inbox.ErrStepMismatch)
	require.Contains(t, err.Error(), `"tool:email (deferred)" in this run`, "the reason must say what differs: %v", err)
}

// sqlinbox stores a step's name through sqldialect.Text (invalid UTF-8 replaced, NUL dropped)
// and gives the stored name back, but Journal.recorded compares it with the run's own name:
// on the SQL inbox, a step whose name has a NUL or invalid UTF-8 (a host's in.Step name built
// from data) mismatches itself on the request's next run, and the request is dead-lettered
// with ErrStepMismatch. The memory inbox runs it fine.
func TestReviewSQLStepNameMismatchesItself(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := sqltest.SQLiteFile(t)
	ib, err := sqlinbox.New(db, sqlinbox.SQLite, sqlinbox.Options{TablePrefix: sqltest.Prefix(t, db, false)})
	require.NoError(t, err)
	require.NoError(t, ib.Migrate(ctx))
	m := &killAfterFirst{name: "tool:lookup-caf\xe9"} // a Latin-1 name, as a host read it
	r := &turn.Runner{Model: m, Sessions: session.NewMemoryStore(), Inbox: ib}
	req := newRequest("c-review-name", "u-1", "look it up")
	// The fix: such a name is refused before the step runs, the same on every inbox, with a
	// clear permanent error, rather than stored cleaned and mismatching itself later.
	_, err = r.Run(ctx, req)
	require.ErrorIs(t, err, inbox.ErrInvalid)
	require.Equal(t, turn.KindPermanent, turn.Classify(err))
	require.ErrorContains(t, err, "not valid UTF-8")
	require.Zero(t, m.runs.Load(), "the step did not run")
}

type killAfterFirst struct {
	name string
	runs atomic.Int32
}

func (m *killAfterFirst) Respond(ctx context.Context, in turn.Input) (turn.Output, error) {
	if _, err := in.Step(ctx, m.name, func(context.Context, string) ([]byte, error) { return []byte(`"x"`), nil }); err != nil {
		return turn.Output{}, err
	}
	if m.runs.Add(1) == 1 {
		return turn.Output{}, errKilled
	}
	return turn.Output{Events: []session.Event{{Text: "ok"}}}, nil
}
