package workflow

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
)

// runConversation runs conv's workflow in a testsuite environment over u, sends each batch
// one second after the one before and returns the status one minute after the last; the run
// ends idle.
func runConversation(t *testing.T, u *unit, conv string, batches ...Batch) Status {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	require.NoError(t, Register(env, u.opts))
	for i, b := range batches {
		env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalName, b) }, time.Duration(i+1)*time.Second)
	}
	var st Status
	env.RegisterDelayedCallback(func() { st = queryStatus(t, env) }, time.Duration(len(batches))*time.Second+time.Minute)
	env.ExecuteWorkflow(WorkflowName, State{ConversationID: conv, Config: Config{IdleTimeout: time.Hour}})
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	return st
}

// Issue 19: user B's record naming user A's conversation with A's next sequence is
// dead-lettered (G7) and changes nothing of the conversation, so A's own request with that
// sequence is then served; B's record redelivered (its inbox entry already dead) is refused
// again and changes nothing either.
func TestStrangerDoesNotTakeTheNextSequence(t *testing.T) {
	t.Parallel()
	u := newUnit(t)
	const conv = "c-1"
	var own []turn.Request
	for seq := int64(1); seq <= 6; seq++ {
		own = append(own, request(conv, seq, "mine"))
	}
	stranger := request(conv, 7, "not yours")
	stranger.UserID = "u-2"
	seven := request(conv, 7, "mine too")
	st := runConversation(t, u, conv, batchOf(own...), batchOf(stranger), batchOf(stranger), batchOf(seven))

	reason, ok := u.publisher.deadLetterOf(stranger.ID)
	require.True(t, ok, "the stranger's record is dead-lettered")
	require.Contains(t, reason, session.ErrOwnerMismatch.Error())
	require.Contains(t, u.publisher.resultIDs(), seven.ID, "A's request 7 is served")
	require.Equal(t, int64(7), st.LastAppliedSequence)
	require.Equal(t, int64(7), st.Applied, "the stranger's record is not counted")
	require.Empty(t, st.LastErrorKind, "the stranger's dead letter is not the conversation's error")
	require.Zero(t, st.Pending)
	require.Equal(t, []int64{1, 2, 3, 4, 5, 6, 7}, u.model.sequences())
	u.publisher.mu.Lock()
	require.Len(t, u.publisher.deadLetters, 2, "one dead letter per delivery of the stranger's record")
	u.publisher.mu.Unlock()
	requireEveryRequestAnswered(t, u.publisher.answered(), append(own, stranger, seven)...)
}

// A new request id that reuses a sequence already applied is dead-lettered with the reason;
// the same request again (a true duplicate) stays a no-op.
func TestNewRequestReusingAppliedSequenceDeadLettered(t *testing.T) {
	t.Parallel()
	u := newUnit(t)
	const conv = "c-reuse-applied"
	r1, r2, r3 := request(conv, 1, "one"), request(conv, 2, "two"), request(conv, 3, "three")
	reuse := request(conv, 2, "two again, new id")
	st := runConversation(t, u, conv, batchOf(r1, r2, r3), batchOf(reuse, r2))

	reason, ok := u.publisher.deadLetterOf(reuse.ID)
	require.True(t, ok, "the reused sequence is dead-lettered")
	require.Contains(t, reason, "sequence 2 is below the applied mark 3")
	require.Equal(t, []string{r1.ID, r2.ID, r3.ID}, u.publisher.resultIDs(), "the duplicate of 2 is not answered again")
	require.Equal(t, []int64{1, 2, 3}, u.model.sequences())
	require.Equal(t, int64(3), st.LastAppliedSequence)
	requireEveryRequestAnswered(t, u.publisher.answered(), r1, r2, r3, reuse, r2)
}

// A new request id that reuses the sequence of a pending request of the same user is
// dead-lettered with the reason at once, while the pending one waits at its gap; both of
// another user's requests for one sequence wait for the Runner to say whose it is.
func TestNewRequestReusingPendingSequenceDeadLettered(t *testing.T) {
	t.Parallel()
	u := newUnit(t)
	const conv = "c-reuse-pending"
	r1, r3 := request(conv, 1, "one"), request(conv, 3, "three")
	reuse := request(conv, 3, "three again, new id")
	var held Status
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	require.NoError(t, Register(env, u.opts))
	r2 := request(conv, 2, "two")
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalName, batchOf(r1, r3, reuse)) }, time.Second)
	env.RegisterDelayedCallback(func() { held = queryStatus(t, env) }, 30*time.Second)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalName, batchOf(r2)) }, time.Minute)
	env.ExecuteWorkflow(WorkflowName, State{ConversationID: conv, Config: Config{IdleTimeout: time.Hour}})
	require.NoError(t, env.GetWorkflowError())

	reason, ok := u.publisher.deadLetterOf(reuse.ID)
	require.True(t, ok, "the reused pending sequence is dead-lettered")
	require.Contains(t, reason, "sequence 3 is already pending as request "+r3.ID)
	require.Equal(t, []int64{3}, held.PendingSequences, "dead-lettered while 3 waited at the gap")
	require.Equal(t, int64(1), held.LastAppliedSequence)
	require.Equal(t, []string{r1.ID, r2.ID, r3.ID}, u.publisher.resultIDs())
	requireEveryRequestAnswered(t, u.publisher.answered(), r1, r3, reuse, r2)
}

// panickyStore is a session store whose Get panics while panics is above zero.
type panickyStore struct {
	session.Store
	panics atomic.Int32
}

func (s *panickyStore) Get(ctx context.Context, key session.Key, recent int) (session.Session, error) {
	if s.panics.Add(-1) >= 0 {
		panic("the store fell over")
	}
	return s.Store.Get(ctx, key, recent)
}

// panickyPublisher is a Publisher whose PublishResult panics while panics is above zero.
type panickyPublisher struct {
	*recordingPublisher
	panics atomic.Int32
}

func (p *panickyPublisher) PublishResult(ctx context.Context, env Envelope, res turn.Result) error {
	if p.panics.Add(-1) >= 0 {
		panic("the publisher fell over")
	}
	return p.recordingPublisher.PublishResult(ctx, env, res)
}

// A panic in the activity outside the Runner (the publisher here; the Runner turns its model's
// and stores' into a turn.PanicError) fails the attempt with the SDK's PanicError, and the
// next attempt answers the request from the inbox.
func TestActivityPanicIsPanicError(t *testing.T) {
	t.Parallel()
	u := newUnit(t)
	pub := &panickyPublisher{recordingPublisher: u.publisher}
	pub.panics.Store(1)
	u.opts.Publisher = pub
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	w := &worker{opts: u.opts}
	w.opts.Logger, w.opts.HeartbeatTimeout = discardLogger(), DefaultHeartbeatTimeout
	env.RegisterActivityWithOptions(w.ApplyTurn, activity.RegisterOptions{Name: ActivityName})
	req := request("c-panic-activity", 1, "one")
	_, err := env.ExecuteActivity(ActivityName, TurnInput{Envelope: Envelope{Request: req}})
	var panicErr *temporal.PanicError
	require.ErrorAs(t, err, &panicErr)
	require.Contains(t, panicErr.Error(), "the publisher fell over")
	out, err := env.ExecuteActivity(ActivityName, TurnInput{Envelope: Envelope{Request: req}})
	require.NoError(t, err, "the next attempt publishes")
	var o Outcome
	require.NoError(t, out.Get(&o))
	require.True(t, o.Published)
	require.Equal(t, []string{req.ID}, u.publisher.resultIDs())
	require.Equal(t, []string{req.Text}, u.model.texts(), "the model ran once")
}

// A panic in the turn (a store method, the model) fails the attempt; once the attempts are
// spent the request is dead-lettered with the panic in the reason, and the conversation goes
// on to its next request.
func TestPanicInTurnDeadLettersWithThePanic(t *testing.T) {
	t.Parallel()
	u := newUnit(t)
	u.runner.MaxAttempts = 2
	store := &panickyStore{Store: u.sessions}
	store.panics.Store(2) // both attempts of the first request
	u.runner.Sessions = store
	u.opts.Logger = discardLogger()
	u.model.errFunc = func(in turn.Input) error {
		if strings.HasPrefix(in.Request.Text, "model panics") {
			panic(errors.New("the model fell over"))
		}
		return nil
	}
	const conv = "c-panic"
	storePanic, modelPanic, fine := request(conv, 1, "store panics"), request(conv, 2, "model panics"), request(conv, 3, "fine")
	st := runConversation(t, u, conv, batchOf(storePanic, modelPanic, fine))

	reason, ok := u.publisher.deadLetterOf(storePanic.ID)
	require.True(t, ok)
	require.Contains(t, reason, "2 attempts exhausted")
	require.Contains(t, reason, "panic in")
	require.Contains(t, reason, "the store fell over")
	reason, ok = u.publisher.deadLetterOf(modelPanic.ID)
	require.True(t, ok)
	require.Contains(t, reason, "panic in")
	require.Contains(t, reason, "the model fell over")
	require.Equal(t, []string{fine.ID}, u.publisher.resultIDs(), "the conversation goes on")
	require.Equal(t, int64(3), st.LastAppliedSequence)
	requireEveryRequestAnswered(t, u.publisher.answered(), storePanic, modelPanic, fine)
}
