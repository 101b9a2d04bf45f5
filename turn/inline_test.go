package turn_test

import (
	"bytes"
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
)

// goroutineID returns the current goroutine's id from its stack's first line
// ("goroutine N [running]:"), for telling apart where code runs.
func goroutineID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	return string(bytes.Fields(buf)[1])
}

// With InlineModel the model runs on the turn's goroutine; without it, on one of its own.
func TestInlineModelRunsOnTheTurnsGoroutine(t *testing.T) {
	t.Parallel()
	for _, inline := range []bool{false, true} {
		b := setup(t)
		var inModel string
		b.runner.InlineModel = inline
		b.runner.Model = turn.ModelFunc(func(context.Context, turn.Input) (turn.Output, error) {
			inModel = goroutineID()
			return turn.Output{Events: []session.Event{{Text: "hello"}}}, nil
		})
		res, err := b.runner.Run(context.Background(), newRequest("c-inline", "u-1", "hi"))
		require.NoError(t, err)
		require.Equal(t, "hello", res.Text)
		require.Equal(t, inline, inModel == goroutineID(), "inline %v", inline)
	}
}

// An inline model that answers after the turn's deadline has its answer dropped, and a
// panicking one fails its attempt, as with a model on a goroutine of its own.
func TestInlineModelLateAnswerAndPanic(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.runner.InlineModel = true
	b.runner.TurnTimeout = 20 * time.Millisecond
	b.runner.Model = turn.ModelFunc(func(ctx context.Context, _ turn.Input) (turn.Output, error) {
		<-ctx.Done() // honours cancellation, but answers anyway
		return turn.Output{Events: []session.Event{{Text: "too late"}}}, nil
	})
	req := newRequest("c-late", "u-1", "anyone?")
	_, err := b.runner.Run(context.Background(), req)
	require.ErrorIs(t, err, turn.ErrTurnTimeout)
	_, total := historyOf(t, b.sessions, b.runner.Key(req), req.ID)
	require.Zero(t, total, "the late answer is dropped")

	b.runner.TurnTimeout = 0
	b.runner.Model = turn.ModelFunc(func(context.Context, turn.Input) (turn.Output, error) {
		panic("model bug")
	})
	req = newRequest("c-panic-inline", "u-1", "hi")
	require.NotPanics(t, func() { _, err = b.runner.Run(context.Background(), req) })
	require.ErrorContains(t, err, "panic in model: model bug")
	require.Equal(t, turn.KindAttempt, turn.Classify(err))
}
