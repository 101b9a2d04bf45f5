package workflow

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	twf "go.temporal.io/sdk/workflow"

	"github.com/turnstile-go/turnstile/turn"
)

// envTarget reconciles against a testsuite environment's workflow.
type envTarget struct {
	env *testsuite.TestWorkflowEnvironment
}

func (e envTarget) lastApplied(context.Context, string) (int64, error) {
	v, err := e.env.QueryWorkflow(QueryLastAppliedSequence)
	if err != nil {
		return 0, err
	}
	var n int64
	return n, v.Get(&n)
}

func (e envTarget) resend(_ context.Context, _ string, envs []Envelope) error {
	e.env.SignalWorkflow(SignalName, Batch{Envelopes: envs})
	return nil
}

func queryStatus(t *testing.T, env *testsuite.TestWorkflowEnvironment) Status {
	t.Helper()
	v, err := env.QueryWorkflow(QueryStatus)
	require.NoError(t, err)
	var st Status
	require.NoError(t, v.Get(&st))
	return st
}

// The acceptance line: sequences 3, 1, 2 apply as 1, 2, 3; a duplicate of 2 applies once; a
// missing 4 holds 5 until Reconcile supplies 4 from the ledger, then 4, 5 apply in order.
func TestSequenceGateDuplicateAndReconcile(t *testing.T) {
	t.Parallel()
	u, env := newEnv(t)

	const conv = "c-gate"
	r := map[int64]any{}
	reqs := make([]Envelope, 6)
	for seq := int64(1); seq <= 5; seq++ {
		req := request(conv, seq, "message "+string(rune('0'+seq)))
		reqs[seq] = Envelope{Request: req}
		r[seq] = req
	}
	ledger := &MemoryLedger{}
	for seq := int64(1); seq <= 5; seq++ {
		require.NoError(t, ledger.Record(context.Background(), reqs[seq]))
	}
	dup2 := reqs[2] // the same request redelivered

	var held, after Status
	var resent int
	env.RegisterDelayedCallback(func() {
		for _, seq := range []int64{3, 1, 2} {
			env.SignalWorkflow(SignalName, Batch{Envelopes: []Envelope{reqs[seq]}})
		}
		env.SignalWorkflow(SignalName, Batch{Envelopes: []Envelope{dup2}})
		env.SignalWorkflow(SignalName, Batch{Envelopes: []Envelope{reqs[5]}}) // 4 is lost
	}, time.Second)
	env.RegisterDelayedCallback(func() {
		held = queryStatus(t, env)
		n, err := reconcile(context.Background(), ledger, envTarget{env}, conv)
		require.NoError(t, err)
		resent = n
	}, time.Minute)
	env.RegisterDelayedCallback(func() { after = queryStatus(t, env) }, 2*time.Minute)

	env.ExecuteWorkflow(WorkflowName, State{ConversationID: conv, Config: Config{IdleTimeout: time.Hour}})
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError(), "the run ends after its idle timeout")

	require.Equal(t, int64(3), held.LastAppliedSequence, "1, 2, 3 applied; 5 held at the gap")
	require.Equal(t, 1, held.Pending)
	require.Equal(t, []int64{5}, held.PendingSequences)
	require.Equal(t, 2, resent, "Reconcile re-sends 4 and 5 (the held 5 is dropped as pending)")
	require.Equal(t, int64(5), after.LastAppliedSequence)
	require.Zero(t, after.Pending)
	require.Equal(t, int64(5), after.Applied)
	require.Equal(t, []int64{1, 2, 3, 4, 5}, u.model.sequences(), "each applied once, in sequence order")
	ids := make([]string, 0, 5)
	for seq := int64(1); seq <= 5; seq++ {
		ids = append(ids, reqs[seq].Request.ID)
	}
	require.Equal(t, ids, u.publisher.resultIDs(), "one result per request, in order")
	requireEveryRequestAnswered(t, u.publisher.answered(), reqs[1].Request, reqs[2].Request, reqs[3].Request, reqs[4].Request, reqs[5].Request, dup2.Request)
}

// Requests without a Sequence apply in arrival order, and a redelivered one is dropped.
func TestArrivalOrderWithoutSequence(t *testing.T) {
	t.Parallel()
	u, env := newEnv(t)
	a, b, c := request("c-arrival", 0, "a"), request("c-arrival", 0, "b"), request("c-arrival", 0, "c")
	env.RegisterDelayedCallback(func() {
		// One batch of two, then a duplicate of the first in another batch, then the third.
		env.SignalWorkflowSkippingWorkflowTask(SignalName, batchOf(b, a))
		env.SignalWorkflow(SignalName, batchOf(b))
		env.SignalWorkflow(SignalName, batchOf(c, a))
	}, time.Second)
	env.ExecuteWorkflow(WorkflowName, State{ConversationID: "c-arrival", Config: Config{IdleTimeout: time.Minute}})
	require.NoError(t, env.GetWorkflowError())
	require.Equal(t, []string{"b", "a", "c"}, u.model.texts())
	require.Len(t, u.publisher.resultIDs(), 3)
	requireEveryRequestAnswered(t, u.publisher.answered(), a, b, c, b, a)
}

// At the turn threshold the run continues as new once the signal channel is drained,
// carrying the pending requests (by their positions in the OverflowStore: no text), the
// sequence mark and the dedup window.
func TestContinueAsNewCarriesState(t *testing.T) {
	t.Parallel()
	u, env := newEnv(t)
	const conv = "c-can"
	var reqs []Envelope
	for seq := int64(1); seq <= 6; seq++ {
		reqs = append(reqs, Envelope{Request: request(conv, seq, "m")})
	}
	env.RegisterDelayedCallback(func() {
		// Skipping the workflow task: all six arrive together, at the moment the run is due.
		for _, e := range reqs {
			env.SignalWorkflowSkippingWorkflowTask(SignalName, Batch{Envelopes: []Envelope{e}})
		}
		env.SignalWorkflow(SignalName, Batch{Envelopes: []Envelope{reqs[0]}}) // a duplicate
	}, time.Second)
	env.ExecuteWorkflow(WorkflowName, State{ConversationID: conv, Config: Config{MaxTurnsPerRun: 4, DedupWindow: 3}})
	next := continuedState(t, env)
	require.Equal(t, int64(5), next.NextSequence)
	require.Equal(t, int64(4), next.Applied)
	require.Empty(t, next.Pending, "the pending requests wait in the OverflowStore")
	require.Equal(t, int64(2), next.Overflow)
	pending := carried(t, u.states, next)
	require.Equal(t, []string{reqs[4].Request.ID, reqs[5].Request.ID}, []string{pending[0].Request.ID, pending[1].Request.ID})
	require.Equal(t, []string{reqs[1].Request.ID, reqs[2].Request.ID, reqs[3].Request.ID}, next.Recent, "the dedup window keeps the last 3")
	require.Equal(t, []int64{1, 2, 3, 4}, u.model.sequences())
	all := make([]turn.Request, 0, len(reqs))
	for _, e := range reqs {
		all = append(all, e.Request)
	}
	requireEveryRequestAnswered(t, carriedInto(u.publisher.answered(), pending), all...)
}

// continuedState returns the State a run that continued as new handed to the next one.
func continuedState(t *testing.T, env *testsuite.TestWorkflowEnvironment) State {
	t.Helper()
	var can *twf.ContinueAsNewError
	require.ErrorAs(t, env.GetWorkflowError(), &can)
	require.Equal(t, WorkflowName, can.WorkflowType.Name)
	var next State
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
	return next
}

// A poison request is dead-lettered by the Runner, the activity publishes the dead letter and
// the conversation moves on to the next sequence; a submit update of a poison request fails
// with ErrDeadLettered, and one of a good request returns its Result.
func TestDeadLetterMovesOn(t *testing.T) {
	t.Parallel()
	u := newUnit(t)
	u.model.errFunc = func(in turn.Input) error {
		if strings.HasPrefix(in.Request.Text, "poison") {
			return turn.Permanent(errors.New("the model refuses this prompt"))
		}
		return nil
	}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	require.NoError(t, Register(env, u.opts))
	const conv = "c-poison"
	bad, good := request(conv, 1, "poison one"), request(conv, 2, "fine two")
	badUpdate, goodUpdate := request(conv, 3, "poison three"), request(conv, 4, "fine four")
	var updateErr error
	var updateOut *Outcome
	var st Status
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(SignalName, batchOf(good, bad))
		env.UpdateWorkflow(UpdateName, badUpdate.ID, &testsuite.TestUpdateCallback{
			OnReject: func(err error) { updateErr = err },
			OnComplete: func(_ any, err error) {
				updateErr = err
			},
		}, Envelope{Request: badUpdate})
		env.UpdateWorkflow(UpdateName, goodUpdate.ID, &testsuite.TestUpdateCallback{
			OnReject:   func(err error) { require.NoError(t, err) },
			OnComplete: func(v any, err error) { require.NoError(t, err); updateOut = v.(*Outcome) },
		}, Envelope{Request: goodUpdate})
	}, time.Second)
	env.RegisterDelayedCallback(func() { st = queryStatus(t, env) }, time.Minute)
	env.ExecuteWorkflow(WorkflowName, State{ConversationID: conv, Config: Config{IdleTimeout: time.Hour}})
	require.NoError(t, env.GetWorkflowError())

	require.Equal(t, []int64{1, 2, 3, 4}, u.model.sequences())
	require.Equal(t, []string{good.ID, goodUpdate.ID}, u.publisher.resultIDs())
	u.publisher.mu.Lock()
	require.Len(t, u.publisher.deadLetters, 2)
	require.Contains(t, u.publisher.deadLetters[0].Reason, "the model refuses this prompt")
	u.publisher.mu.Unlock()
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, updateErr, &appErr)
	require.Equal(t, ErrDeadLettered, appErr.Type())
	require.NotNil(t, updateOut)
	require.NotNil(t, updateOut.Result, "an update gets the Result back")
	require.Equal(t, goodUpdate.ID, updateOut.Result.RequestID)
	require.Equal(t, int64(4), st.LastAppliedSequence)
	require.Equal(t, "permanent", st.LastErrorKind)
	requireEveryRequestAnswered(t, u.publisher.answered(), bad, good, badUpdate, goodUpdate)
}

// An update whose request waits at a gap when the run is due to continue as new does not hold
// the run open: it is turned back with the ContinuingAsNew error (Submit sends it again) and
// the request travels into the next run.
func TestUpdateHeldAtGapDoesNotBlockContinueAsNew(t *testing.T) {
	t.Parallel()
	u, env := newEnv(t)
	const conv = "c-held"
	first, third := request(conv, 1, "one"), request(conv, 3, "three")
	var updateErr error
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflowSkippingWorkflowTask(SignalName, batchOf(first))
		env.UpdateWorkflow(UpdateName, third.ID, &testsuite.TestUpdateCallback{
			OnReject:   func(err error) { updateErr = err },
			OnComplete: func(_ any, err error) { updateErr = err },
		}, Envelope{Request: third})
	}, time.Second)
	env.ExecuteWorkflow(WorkflowName, State{ConversationID: conv, Config: Config{MaxTurnsPerRun: 1}})
	next := continuedState(t, env)
	pending := carried(t, u.states, next)
	require.Len(t, pending, 1)
	require.Equal(t, third.ID, pending[0].Request.ID, "the held request travels into the next run")
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, updateErr, &appErr)
	require.Equal(t, errTypeContinuing, appErr.Type())
	require.Equal(t, []int64{1}, u.model.sequences())
	requireEveryRequestAnswered(t, carriedInto(u.publisher.answered(), pending), first, third)
}

// A request that names another conversation than the workflow's is never applied there (G7):
// it is dead-lettered with the reason, and the conversation's own requests go on.
func TestForeignRequestDeadLettered(t *testing.T) {
	t.Parallel()
	u, env := newEnv(t)
	own, foreign := request("c-own", 1, "mine"), request("c-other", 1, "not yours")
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalName, batchOf(foreign, own)) }, time.Second)
	env.ExecuteWorkflow(WorkflowName, State{ConversationID: "c-own", Config: Config{IdleTimeout: time.Minute}})
	require.NoError(t, env.GetWorkflowError())
	require.Equal(t, []string{"mine"}, u.model.texts())
	require.Equal(t, []string{own.ID}, u.publisher.resultIDs())
	reason, ok := u.publisher.deadLetterOf(foreign.ID)
	require.True(t, ok)
	require.Contains(t, reason, `names conversation "c-other"`)
	requireEveryRequestAnswered(t, u.publisher.answered(), own, foreign)
}

// newEnv returns a testsuite environment with the workflow and activity registered over a
// unit's fakes.
func newEnv(t *testing.T) (*unit, *testsuite.TestWorkflowEnvironment) {
	t.Helper()
	u := newUnit(t)
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	require.NoError(t, Register(env, u.opts))
	return u, env
}

// A run continues as new once it has received MaxSignalsPerRun signals, far below the
// server's per-run limit, carrying what it has not applied yet.
func TestContinueAsNewOnSignalCount(t *testing.T) {
	t.Parallel()
	u, env := newEnv(t)
	const conv = "c-signals"
	var sent []turn.Request
	for seq := int64(1); seq <= 6; seq++ {
		sent = append(sent, request(conv, seq, "m"))
	}
	env.RegisterDelayedCallback(func() {
		for _, r := range sent[:5] {
			env.SignalWorkflowSkippingWorkflowTask(SignalName, batchOf(r))
		}
		env.SignalWorkflow(SignalName, batchOf(sent[5]))
	}, time.Second)
	env.ExecuteWorkflow(WorkflowName, State{ConversationID: conv, Config: Config{MaxSignalsPerRun: 3}})
	next := continuedState(t, env)
	require.Empty(t, u.model.sequences(), "due before the first turn: all six travel on")
	pending := carried(t, u.states, next)
	require.Len(t, pending, 6)
	require.Equal(t, int64(1), next.NextSequence)
	requireEveryRequestAnswered(t, carriedInto(u.publisher.answered(), pending), sent...)
}

// turn.RetryAfter from the model retries the activity after the model's delay without
// spending an attempt; a model that keeps failing is dead-lettered by the Runner after its
// MaxAttempts, and the workflow moves on.
func TestRetriesAndAttempts(t *testing.T) {
	t.Parallel()
	u, env := newEnv(t)
	u.runner.MaxAttempts = 2
	var limited atomic.Int32
	u.model.errFunc = func(in turn.Input) error {
		switch in.Request.Text {
		case "rate limited once":
			if limited.Add(1) == 1 {
				return turn.RetryAfter(3*time.Second, errors.New("429"))
			}
		case "always failing":
			return errors.New("model crashed")
		}
		return nil
	}
	const conv = "c-retry"
	limitedReq, failing := request(conv, 1, "rate limited once"), request(conv, 2, "always failing")
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalName, batchOf(limitedReq, failing)) }, time.Second)
	env.ExecuteWorkflow(WorkflowName, State{ConversationID: conv, Config: Config{IdleTimeout: time.Minute}})
	require.NoError(t, env.GetWorkflowError())

	require.Equal(t, []string{limitedReq.ID}, u.publisher.resultIDs())
	u.publisher.mu.Lock()
	require.Len(t, u.publisher.deadLetters, 1)
	require.Contains(t, u.publisher.deadLetters[0].Reason, "2 attempts exhausted")
	u.publisher.mu.Unlock()
	entry, err := u.inbox.Get(context.Background(), u.runner.InboxKey(limitedReq))
	require.NoError(t, err)
	require.Equal(t, 1, entry.Attempts, "the rate-limited try spent no attempt")
	requireEveryRequestAnswered(t, u.publisher.answered(), limitedReq, failing)
}

// A run that ends idle saves its State; the conversation's next run (started by the next
// request) loads it, so the sequence mark and the dedup window survive the gap between runs.
func TestIdleEndKeepsStateForNextRun(t *testing.T) {
	t.Parallel()
	u, env := newEnv(t)
	const conv = "c-idle"
	r1, r2, r3 := request(conv, 1, "one"), request(conv, 2, "two"), request(conv, 3, "three")
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalName, batchOf(r1, r2)) }, time.Second)
	env.ExecuteWorkflow(WorkflowName, State{ConversationID: conv, Config: Config{IdleTimeout: time.Minute}})
	require.NoError(t, env.GetWorkflowError())
	saved, found, err := u.states.LoadState(context.Background(), conv)
	require.NoError(t, err)
	require.True(t, found, "the idle run saved its state")
	require.Equal(t, int64(3), saved.NextSequence)

	var s testsuite.WorkflowTestSuite
	next := s.NewTestWorkflowEnvironment()
	require.NoError(t, Register(next, u.opts))
	var st Status
	next.RegisterDelayedCallback(func() { next.SignalWorkflow(SignalName, batchOf(r2, r3)) }, time.Second)
	next.RegisterDelayedCallback(func() { st = queryStatus(t, next) }, 30*time.Second)
	next.ExecuteWorkflow(WorkflowName, State{ConversationID: conv, Config: Config{IdleTimeout: time.Minute}})
	require.NoError(t, next.GetWorkflowError())
	require.Equal(t, []int64{1, 2, 3}, u.model.sequences(), "3 applied at once, the redelivered 2 dropped")
	require.Equal(t, int64(3), st.LastAppliedSequence)
	require.Equal(t, int64(3), st.Applied)
	requireEveryRequestAnswered(t, u.publisher.answered(), r1, r2, r3)
}
