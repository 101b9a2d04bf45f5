package turn_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
)

// echoModel is a deterministic fake model that counts its calls.
type echoModel struct {
	calls atomic.Int64
	err   func(call int64) error // optional: the error of the n-th call (1-based)
}

func (m *echoModel) Respond(ctx context.Context, in turn.Input) (turn.Output, error) {
	n := m.calls.Add(1)
	if m.err != nil {
		if err := m.err(n); err != nil {
			return turn.Output{}, err
		}
	}
	return turn.Output{Events: []session.Event{
		{Author: "tool", Text: "looked up", Data: []byte(`{"key":"` + in.ToolKey("lookup") + `"}`)},
		{Text: fmt.Sprintf("echo %q after %d events", in.Request.Text, in.Session.EventCount)},
	}}, nil
}

type bundle struct {
	model    *echoModel
	sessions *session.MemoryStore
	inbox    *inbox.MemoryInbox
	runner   *turn.Runner
}

func setup(t *testing.T) *bundle {
	t.Helper()
	b := &bundle{model: &echoModel{}, sessions: session.NewMemoryStore(), inbox: inbox.NewMemoryInbox()}
	b.runner = &turn.Runner{Model: b.model, Sessions: b.sessions, Inbox: b.inbox, TurnTimeout: 10 * time.Second}
	return b
}

func newRequest(conv, user, text string) turn.Request {
	return turn.Request{Schema: turn.SchemaVersion, ID: uuid.NewString(), ConversationID: conv, UserID: user, Text: text}
}

// turnsOf returns how many events of the request the session holds, and the session's size.
func historyOf(t *testing.T, s session.Store, key session.Key, requestID string) (turnEvents int, total int64) {
	t.Helper()
	sess, err := s.Get(context.Background(), key, 1000)
	require.NoError(t, err)
	for _, e := range sess.Events {
		if e.RequestID == requestID {
			turnEvents++
		}
	}
	return turnEvents, sess.EventCount
}

func TestRunTwiceCallsModelOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	req := newRequest("c-1", "u-1", "hello")

	first, err := b.runner.Run(ctx, req)
	require.NoError(t, err)
	require.False(t, first.Replayed)
	second, err := b.runner.Run(ctx, req)
	require.NoError(t, err)
	require.True(t, second.Replayed)

	require.EqualValues(t, 1, b.model.calls.Load())
	second.Replayed = false
	require.Equal(t, first, second)
	require.Equal(t, `echo "hello" after 0 events`, first.Text)
	n, total := historyOf(t, b.sessions, b.runner.Key(req), req.ID)
	require.Equal(t, 3, n, "user message, tool event, answer")
	require.EqualValues(t, 3, total)
}

func TestRunKeepsContextAcrossTurns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	for i := range 3 {
		res, err := b.runner.Run(ctx, newRequest("c-ctx", "u-1", fmt.Sprintf("msg %d", i)))
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("echo %q after %d events", fmt.Sprintf("msg %d", i), 3*i), res.Text)
	}
}

// errCrash stands for the process dying: the step it follows happened, nothing after it does.
var errCrash = errors.New("simulated crash")

// crash makes every store call fail once it is triggered, including the runner's bookkeeping,
// as if the process had died.
type crash struct{ dead atomic.Bool }

func (c *crash) check() error {
	if c.dead.Load() {
		return errCrash
	}
	return nil
}

type crashingSessions struct {
	session.Store
	c          *crash
	afterGet   bool // crash after Begin: the first session call dies
	noAppend   bool // crash after the model call: Append dies before writing
	afterWrite bool // crash right after Append wrote
}

func (s *crashingSessions) Get(ctx context.Context, key session.Key, recent int) (session.Session, error) {
	if s.afterGet {
		s.c.dead.Store(true)
	}
	if err := s.c.check(); err != nil {
		return session.Session{}, err
	}
	return s.Store.Get(ctx, key, recent)
}

func (s *crashingSessions) Append(ctx context.Context, key session.Key, v int64, t session.Turn) (session.Appended, error) {
	if s.noAppend {
		s.c.dead.Store(true)
	}
	if err := s.c.check(); err != nil {
		return session.Appended{}, err
	}
	a, err := s.Store.Append(ctx, key, v, t)
	if s.afterWrite {
		s.c.dead.Store(true)
		return session.Appended{}, errCrash
	}
	return a, err
}

type crashingInbox struct {
	inbox.Inbox
	c             *crash
	afterComplete bool
}

func (b *crashingInbox) Complete(ctx context.Context, id string, res []byte) error {
	if err := b.c.check(); err != nil {
		return err
	}
	err := b.Inbox.Complete(ctx, id, res)
	if b.afterComplete {
		b.c.dead.Store(true)
		return errCrash
	}
	return err
}

func (b *crashingInbox) Fail(ctx context.Context, id string, f inbox.Failure) error {
	if err := b.c.check(); err != nil {
		return err
	}
	return b.Inbox.Fail(ctx, id, f)
}

func (b *crashingInbox) MarkDead(ctx context.Context, id, reason string) error {
	if err := b.c.check(); err != nil {
		return err
	}
	return b.Inbox.MarkDead(ctx, id, reason)
}

// TestCrashPoints injects a crash after each step of docs/DESIGN.md's crash table, then runs the
// request again on a fresh Runner over the same stores.
func TestCrashPoints(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		sessions  func(session.Store, *crash) session.Store
		inbox     func(inbox.Inbox, *crash) inbox.Inbox
		wantCalls int64
	}{
		{"after begin", func(s session.Store, c *crash) session.Store {
			return &crashingSessions{Store: s, c: c, afterGet: true}
		}, nil, 1},
		{"after model call", func(s session.Store, c *crash) session.Store {
			return &crashingSessions{Store: s, c: c, noAppend: true}
		}, nil, 2},
		{"after session append", func(s session.Store, c *crash) session.Store {
			return &crashingSessions{Store: s, c: c, afterWrite: true}
		}, nil, 1},
		{"after inbox complete", nil, func(b inbox.Inbox, c *crash) inbox.Inbox { return &crashingInbox{Inbox: b, c: c, afterComplete: true} }, 1},
		{"after publish", nil, nil, 1}, // the run succeeded; the caller died before committing
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			// An earlier turn, so that the crashed one is not the first of the session.
			_, err := b.runner.Run(ctx, newRequest("c-crash", "u-1", "earlier"))
			require.NoError(t, err)
			b.model.calls.Store(0)

			c := &crash{}
			doomed := *b.runner
			if tc.sessions != nil {
				doomed.Sessions = tc.sessions(b.sessions, c)
			}
			if tc.inbox != nil {
				doomed.Inbox = &crashingInbox{Inbox: b.inbox, c: c}
				doomed.Inbox = tc.inbox(b.inbox, c)
			}
			req := newRequest("c-crash", "u-1", "the crashed one")
			_, firstErr := doomed.Run(ctx, req)
			if tc.sessions != nil || tc.inbox != nil {
				require.ErrorIs(t, firstErr, errCrash)
			}

			res, err := b.runner.Run(ctx, req)
			require.NoError(t, err)
			require.Equal(t, `echo "the crashed one" after 3 events`, res.Text)
			require.LessOrEqual(t, b.model.calls.Load(), int64(2))
			require.Equal(t, tc.wantCalls, b.model.calls.Load())
			n, total := historyOf(t, b.sessions, b.runner.Key(req), req.ID)
			require.Equal(t, 3, n, "exactly one turn of the request")
			require.EqualValues(t, 6, total)

			again, err := b.runner.Run(ctx, req)
			require.NoError(t, err)
			require.True(t, again.Replayed)
			again.Replayed = false
			res.Replayed = false
			require.Equal(t, res, again)
		})
	}
}

// blockingModel waits for release before answering, so a test can interleave two runners.
type blockingModel struct {
	entered chan struct{}
	release chan struct{}
}

func (m *blockingModel) Respond(ctx context.Context, in turn.Input) (turn.Output, error) {
	close(m.entered)
	select {
	case <-m.release:
	case <-ctx.Done():
		return turn.Output{}, ctx.Err()
	}
	return turn.Output{Events: []session.Event{{Text: "zombie answer"}}}, nil
}

func TestZombieAppendConflicts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	req := newRequest("c-zombie", "u-1", "who wins?")

	slow := &blockingModel{entered: make(chan struct{}), release: make(chan struct{})}
	zombie := *b.runner
	zombie.Model = slow
	var (
		zombieErr error
		wg        sync.WaitGroup
	)
	wg.Go(func() { _, zombieErr = zombie.Run(ctx, req) })
	<-slow.entered // the zombie holds the session at version 0

	res, err := b.runner.Run(ctx, req) // the new owner of the partition
	require.NoError(t, err)
	close(slow.release)
	wg.Wait()

	require.ErrorIs(t, zombieErr, session.ErrConflict)
	require.Equal(t, turn.KindUnavailable, turn.Classify(zombieErr))
	n, total := historyOf(t, b.sessions, b.runner.Key(req), req.ID)
	require.Equal(t, 3, n)
	require.EqualValues(t, 3, total)
	require.Equal(t, `echo "who wins?" after 0 events`, res.Text)
	entry, err := b.inbox.Get(ctx, b.runner.InboxKey(req))
	require.NoError(t, err)
	require.Equal(t, inbox.StatusDone, entry.Status)
}

func TestForeignConversationRejected(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, err := b.runner.Run(ctx, newRequest("c-owned", "alice", "mine"))
	require.NoError(t, err)

	intruder := newRequest("c-owned", "mallory", "show me alice's chat")
	_, err = b.runner.Run(ctx, intruder)
	require.ErrorIs(t, err, session.ErrOwnerMismatch)
	var dead *turn.DeadLetterError
	require.ErrorAs(t, err, &dead)
	require.Equal(t, turn.KindPermanent, turn.Classify(err))
	require.EqualValues(t, 1, b.model.calls.Load(), "the model never saw the intruder")

	sess, err := b.sessions.Get(ctx, session.Key{App: turn.DefaultApp, User: "alice", Conversation: "c-owned"}, 100)
	require.NoError(t, err)
	require.EqualValues(t, 3, sess.EventCount)
	require.EqualValues(t, 1, sess.Version)
	entry, err := b.inbox.Get(ctx, b.runner.InboxKey(intruder))
	require.NoError(t, err)
	require.Equal(t, inbox.StatusDead, entry.Status)
}

func TestTurnDeadline(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.runner.Model = turn.ModelFunc(func(ctx context.Context, _ turn.Input) (turn.Output, error) {
		<-ctx.Done() // a model that never answers on its own
		return turn.Output{}, ctx.Err()
	})
	b.runner.TurnTimeout = 20 * time.Millisecond
	req := newRequest("c-slow", "u-1", "anyone?")
	_, err := b.runner.Run(context.Background(), req)
	require.ErrorIs(t, err, turn.ErrTurnTimeout)
	require.Equal(t, turn.KindAttempt, turn.Classify(err))

	entry, err := b.inbox.Get(context.Background(), b.runner.InboxKey(req))
	require.NoError(t, err)
	require.Equal(t, inbox.StatusInProgress, entry.Status)
	require.Equal(t, 1, entry.Attempts)
	require.Contains(t, entry.Reason, "deadline")
}

func TestAttemptsExhaustedDeadLetters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.model.err = func(int64) error { return errors.New("model exploded") }
	ctx := context.Background()
	req := newRequest("c-poison", "u-1", "boom")
	for i := 1; i < turn.DefaultMaxAttempts; i++ {
		_, err := b.runner.Run(ctx, req)
		require.Equal(t, turn.KindAttempt, turn.Classify(err), "attempt %d: %v", i, err)
	}
	_, err := b.runner.Run(ctx, req)
	var dead *turn.DeadLetterError
	require.ErrorAs(t, err, &dead)
	require.Equal(t, turn.DefaultMaxAttempts, dead.Attempts)
	require.Contains(t, dead.Reason, "model exploded")

	_, err = b.runner.Run(ctx, req) // redelivered after the DLQ publish, before the commit
	require.ErrorAs(t, err, &dead)
	require.EqualValues(t, turn.DefaultMaxAttempts, b.model.calls.Load())
}

func TestCrashLoopCountsAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	req := newRequest("c-crashloop", "u-1", "kills the worker")
	for range turn.DefaultMaxAttempts { // deliveries that died mid-turn: Begin, then nothing
		_, err := b.inbox.Begin(ctx, inbox.Delivery{Key: b.runner.InboxKey(req)})
		require.NoError(t, err)
	}
	_, err := b.runner.Run(ctx, req)
	var dead *turn.DeadLetterError
	require.ErrorAs(t, err, &dead)
	require.Contains(t, dead.Reason, "attempts exhausted")
	require.Zero(t, b.model.calls.Load())
}

func TestPermanentSkipsRetries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.model.err = func(int64) error { return turn.Permanent(errors.New("prompt rejected")) }
	_, err := b.runner.Run(context.Background(), newRequest("c-perm", "u-1", "bad"))
	var dead *turn.DeadLetterError
	require.ErrorAs(t, err, &dead)
	require.Equal(t, 1, dead.Attempts)
	require.Contains(t, dead.Reason, "prompt rejected")
}

func TestRateLimitAndCancelRefundAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.model.err = func(n int64) error {
		if n == 1 {
			return turn.RetryAfter(2*time.Second, errors.New("429"))
		}
		return nil
	}
	ctx := context.Background()
	req := newRequest("c-rl", "u-1", "hi")
	_, err := b.runner.Run(ctx, req)
	require.Equal(t, turn.KindRateLimited, turn.Classify(err))
	d, ok := turn.RetryDelay(err)
	require.True(t, ok)
	require.Equal(t, 2*time.Second, d)
	entry, err := b.inbox.Get(ctx, b.runner.InboxKey(req))
	require.NoError(t, err)
	require.Zero(t, entry.Attempts, "a rate limit spends no attempt")

	canceled, cancel := context.WithCancel(ctx)
	b.runner.Model = turn.ModelFunc(func(context.Context, turn.Input) (turn.Output, error) {
		cancel() // the partition is revoked mid-turn
		return turn.Output{}, errors.New("connection closed")
	})
	_, err = b.runner.Run(canceled, req)
	require.Equal(t, turn.KindAbandoned, turn.Classify(err))
	entry, err = b.inbox.Get(ctx, b.runner.InboxKey(req))
	require.NoError(t, err)
	require.Zero(t, entry.Attempts, "an abandoned turn spends no attempt")
}

func TestEmptyModelOutputFailsAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.runner.Model = turn.ModelFunc(func(context.Context, turn.Input) (turn.Output, error) { return turn.Output{}, nil })
	_, err := b.runner.Run(context.Background(), newRequest("c-empty", "u-1", "hi"))
	require.ErrorContains(t, err, "no events")
	require.Equal(t, turn.KindAttempt, turn.Classify(err))
}

func TestRunnerValidate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for name, r := range map[string]*turn.Runner{
		"Model":    {Sessions: b.sessions, Inbox: b.inbox},
		"Sessions": {Model: b.model, Inbox: b.inbox},
		"Inbox":    {Model: b.model, Sessions: b.sessions},
	} {
		_, err := r.Run(context.Background(), newRequest("c", "u", "x"))
		require.ErrorContains(t, err, "Runner."+name)
	}
	_, err := b.runner.Run(context.Background(), turn.Request{ID: "nope"})
	require.Equal(t, turn.KindPermanent, turn.Classify(err))
}

type retryableErr struct{}

func (retryableErr) Error() string   { return "connection reset" }
func (retryableErr) Retryable() bool { return true }
