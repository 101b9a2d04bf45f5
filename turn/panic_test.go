package turn_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
)

// panickingSessions is a session store whose Append panics, as a store with a bug would.
type panickingSessions struct{ session.Store }

func (panickingSessions) Append(context.Context, session.Key, int64, session.Turn) (session.Appended, error) {
	var s []int
	_ = s[3] // index out of range: a store bug
	return session.Appended{}, nil
}

// panickingInbox is an inbox whose Begin panics.
type panickingInbox struct{ inbox.Inbox }

func (panickingInbox) Begin(context.Context, inbox.Delivery) (inbox.Entry, error) {
	panic("inbox begin exploded")
}

// A store method that panics fails the attempt with the panic in the error; the attempts then
// run out as for any failure, and the dead letter's reason carries the panic.
func TestStorePanicFailsTheAttemptThenDeadLetters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.runner.Sessions = panickingSessions{b.sessions}
	req := newRequest("c-store-panic", "u-1", "hi")
	for attempt := 1; attempt < b.runner.Attempts(); attempt++ {
		var err error
		require.NotPanics(t, func() { _, err = b.runner.Run(context.Background(), req) })
		require.Equal(t, turn.KindAttempt, turn.Classify(err), "attempt %d", attempt)
		var pe *turn.PanicError
		require.ErrorAs(t, err, &pe)
		require.Equal(t, "session or inbox store", pe.Where)
		require.Contains(t, pe.Stack, "panickingSessions.Append")
		require.ErrorContains(t, err, "index out of range")
	}
	_, err := b.runner.Run(context.Background(), req)
	var dle *turn.DeadLetterError
	require.ErrorAs(t, err, &dle)
	require.Contains(t, dle.Reason, "panic in session or inbox store")
	require.Equal(t, turn.KindAttempt, dle.Kind, "its attempts ran out")
	require.Contains(t, dle.Reason, "index out of range")
	entry, err := b.inbox.Get(context.Background(), b.runner.InboxKey(req))
	require.NoError(t, err)
	require.Equal(t, inbox.StatusDead, entry.Status)
}

// A panic outside the attempt (the inbox's Begin) is returned as a failed attempt too.
func TestInboxBeginPanicIsAnError(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.runner.Inbox = panickingInbox{b.inbox}
	var err error
	require.NotPanics(t, func() { _, err = b.runner.Run(context.Background(), newRequest("c-begin", "u-1", "hi")) })
	require.ErrorContains(t, err, "inbox begin exploded")
	require.Equal(t, turn.KindAttempt, turn.Classify(err))
}

func TestRecoveredTrimsTheStack(t *testing.T) {
	t.Parallel()
	var pe *turn.PanicError
	func() {
		defer func() { pe = turn.Recovered("handler", recover()) }()
		deepPanic(20)
	}()
	require.Equal(t, "boom", pe.Value)
	require.True(t, strings.HasPrefix(pe.Stack, "github.com/turnstile-go/turnstile/turn_test.deepPanic (panic_test.go:"), pe.Stack)
	require.NotContains(t, pe.Stack, "runtime.gopanic")
	require.Equal(t, 8, strings.Count(pe.Stack, " < "), "eight frames and an ellipsis: %s", pe.Stack)
	require.True(t, strings.HasSuffix(pe.Stack, " < …"))
	require.Equal(t, turn.KindAttempt, turn.Classify(pe))
	require.True(t, strings.HasPrefix(pe.Error(), "panic in handler: boom [at "), pe.Error())
}

func deepPanic(n int) {
	if n == 0 {
		panic("boom")
	}
	deepPanic(n - 1)
}
