package turn_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
)

// A model whose own HTTP client times out (http.Client.Timeout, a per-call
// context.WithTimeout, a driver timeout) returns an error that matches
// context.DeadlineExceeded while the caller's context is still live. Before the fix the Runner classified
// it KindAbandoned and refunded the attempt, so the request never reached the dead-letter
// topic however often it was delivered (G5), and the consumer abandoned its lane (see
// consumer/sad_test.go).
func TestModelOwnTimeoutIsAnAttempt(t *testing.T) {
	t.Parallel()
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(2 * time.Second):
		}
	}))
	defer slow.Close()
	hc := &http.Client{Timeout: 20 * time.Millisecond}

	b := setup(t)
	b.runner.Model = turn.ModelFunc(func(ctx context.Context, _ turn.Input) (turn.Output, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, slow.URL, nil)
		if err != nil {
			return turn.Output{}, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return turn.Output{}, fmt.Errorf("call model: %w", err)
		}
		resp.Body.Close()
		return turn.Output{}, errors.New("unreachable")
	})
	req := newRequest("c-http-timeout", "u-1", "hi")
	ctx := context.Background() // the caller never cancels
	var kinds []turn.Kind
	for range 2 * turn.DefaultMaxAttempts {
		_, err := b.runner.Run(ctx, req)
		kinds = append(kinds, turn.Classify(err))
	}
	entry, err := b.inbox.Get(ctx, b.runner.InboxKey(req))
	require.NoError(t, err)
	require.Contains(t, kinds, turn.KindPermanent,
		"6 deliveries whose model call timed out never dead-letter: kinds %v, inbox attempts %d, status %s",
		kinds, entry.Attempts, entry.Status)
}

// emptyFindTurn is a Store whose FindTurn answers an empty turn without an error (a user's
// store with a bug, or a row whose events were pruned). The Runner must fail the attempt, not index it.
type emptyFindTurn struct{ session.Store }

func (emptyFindTurn) FindTurn(context.Context, session.Key, string) ([]session.Event, error) {
	return nil, nil
}

func TestEmptyStoredTurnIsAnErrorNotAPanic(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.runner.Sessions = emptyFindTurn{b.sessions}
	req := newRequest("c-empty-turn", "u-1", "hi")
	_, err := b.inbox.Begin(context.Background(), inbox.Delivery{Key: b.runner.InboxKey(req)}) // an earlier delivery
	require.NoError(t, err)
	require.NotPanics(t, func() {
		_, err = b.runner.Run(context.Background(), req)
	})
	require.Error(t, err)
}

// After MaxAttempts deliveries that crashed, the next delivery's Begin counts one more, and
// the dead letter must report the attempts that ran (3), not that count (4).
func TestCrashLoopDeadLetterCountsRanAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	req := newRequest("c-crashloop-count", "u-1", "kills the worker")
	for range turn.DefaultMaxAttempts {
		_, err := b.inbox.Begin(ctx, inbox.Delivery{Key: b.runner.InboxKey(req)})
		require.NoError(t, err)
	}
	_, err := b.runner.Run(ctx, req)
	var dead *turn.DeadLetterError
	require.ErrorAs(t, err, &dead)
	require.Equal(t, turn.DefaultMaxAttempts, dead.Attempts, "reason %q", dead.Reason)
}

// A model that ignores cancellation altogether cannot hold the turn past its deadline.
func TestModelIgnoringCancellationIsCutAtTheDeadline(t *testing.T) {
	t.Parallel()
	b := setup(t)
	stuck := make(chan struct{})
	t.Cleanup(func() { close(stuck) })
	b.runner.Model = turn.ModelFunc(func(context.Context, turn.Input) (turn.Output, error) {
		<-stuck // never looks at its context
		return turn.Output{Events: []session.Event{{Text: "too late"}}}, nil
	})
	b.runner.TurnTimeout = 20 * time.Millisecond
	req := newRequest("c-stuck", "u-1", "anyone?")
	_, err := b.runner.Run(context.Background(), req)
	require.ErrorIs(t, err, turn.ErrTurnTimeout)
	require.Equal(t, turn.KindAttempt, turn.Classify(err))
	_, total := historyOf(t, b.sessions, b.runner.Key(req), req.ID)
	require.Zero(t, total, "the late answer is dropped")
}

// A panicking model fails its attempt instead of crashing the worker.
func TestModelPanicFailsTheAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.runner.Model = turn.ModelFunc(func(context.Context, turn.Input) (turn.Output, error) {
		var m map[string]int
		//lint:ignore SA5000 the panic is the point: a nil map write, a bug in the host's model
		m["boom"]++
		return turn.Output{}, nil
	})
	req := newRequest("c-panic", "u-1", "hi")
	var err error
	require.NotPanics(t, func() { _, err = b.runner.Run(context.Background(), req) })
	require.ErrorContains(t, err, "panic in model: assignment to entry in nil map")
	var pe *turn.PanicError
	require.ErrorAs(t, err, &pe)
	require.Contains(t, pe.Stack, "TestModelPanicFailsTheAttempt", "the stack names the function that panicked")
	require.Equal(t, turn.KindAttempt, turn.Classify(err))
}

// Request ids travel in result and dead-letter headers, so anyone may copy one. A record of
// mallory's own conversation that reuses alice's request id must not be answered with alice's
// stored result (G7): the inbox key is scoped to the session key.
func TestCopiedRequestIDDoesNotReplayAnotherUsersResult(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	alice := newRequest("c-alice", "alice", "my card number is 4111 1111 1111 1111")
	_, err := b.runner.Run(ctx, alice)
	require.NoError(t, err)

	mallory := newRequest("c-mallory", "mallory", "hi")
	mallory.ID = alice.ID
	res, err := b.runner.Run(ctx, mallory)
	require.NoError(t, err) // served as her own request, in her own session
	require.False(t, res.Replayed)
	require.Equal(t, "mallory", res.UserID)
	require.NotContains(t, res.Text, "4111")
	require.NotEqual(t, b.runner.InboxKey(alice), b.runner.InboxKey(mallory))
}

// The other direction: alice's request is in progress; mallory's record with alice's request
// id must neither complete alice's entry nor spend its attempts.
func TestCopiedRequestIDDoesNotCompleteAnotherUsersRequest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.model.err = func(n int64) error {
		if n == 1 {
			return errors.New("flaky model")
		}
		return nil
	}
	alice := newRequest("c-alice", "alice", "alice's question")
	_, err := b.runner.Run(ctx, alice)
	require.Equal(t, turn.KindAttempt, turn.Classify(err))

	mallory := newRequest("c-mallory", "mallory", "mallory's question")
	mallory.ID = alice.ID
	_, err = b.runner.Run(ctx, mallory)
	require.NoError(t, err)
	entry, err := b.inbox.Get(ctx, b.runner.InboxKey(alice))
	require.NoError(t, err)
	require.Equal(t, inbox.StatusInProgress, entry.Status)
	require.Equal(t, 1, entry.Attempts, "mallory's delivery spent none of alice's attempts")

	res, err := b.runner.Run(ctx, alice)
	require.NoError(t, err)
	require.Equal(t, "alice", res.UserID)
	require.Contains(t, res.Text, "alice's question")
}

func TestInboxKeyIsScoped(t *testing.T) {
	t.Parallel()
	req := newRequest("c-1", "u-1", "x")
	k := turn.InboxKey("app", req)
	require.True(t, strings.HasPrefix(k, req.ID+"/"), k)
	require.Equal(t, k, turn.InboxKey("app", req), "stable")
	for name, other := range map[string]func(r *turn.Request) string{
		"app":          func(*turn.Request) string { return turn.InboxKey("other", req) },
		"user":         func(r *turn.Request) string { r.UserID = "u-2"; return turn.InboxKey("app", *r) },
		"conversation": func(r *turn.Request) string { r.ConversationID = "c-2"; return turn.InboxKey("app", *r) },
	} {
		r := req
		require.NotEqual(t, k, other(&r), name)
	}
	// The parts are length-prefixed: shifting a boundary changes the key.
	a, b := req, req
	a.UserID, a.ConversationID = "u-1c", "-1"
	b.UserID, b.ConversationID = "u-1", "c-1"
	require.NotEqual(t, turn.InboxKey("app", a), turn.InboxKey("app", b))
}
