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

// An answer whose Result would exceed the context's ResultLimit is dead-lettered before the
// append: the session holds no turn of the request and the inbox marks it dead. One just under
// the limit is served.
func TestResultOverTheLimitIsNotAppended(t *testing.T) {
	t.Parallel()
	b := setup(t)
	answer := strings.Repeat("x", 1_200_000)
	b.runner.Model = turn.ModelFunc(func(context.Context, turn.Input) (turn.Output, error) {
		return turn.Output{Events: []session.Event{{Text: answer}}}, nil
	})
	ctx := turn.WithResultLimit(context.Background(), turn.ResultLimit{Bytes: 1_000_000, Source: "the producer's Producer.MaxMessageBytes"})
	req := newRequest("c-big", "u-1", "write me a novel")
	_, err := b.runner.Run(ctx, req)
	var dle *turn.DeadLetterError
	require.ErrorAs(t, err, &dle)
	require.Equal(t, turn.KindPermanent, dle.Kind)
	var big *turn.ResultTooLargeError
	require.ErrorAs(t, err, &big)
	require.Equal(t, 1_000_000, big.Limit)
	require.Greater(t, big.Size, 1_200_000)
	require.Contains(t, dle.Reason, "over the limit of 1000000 bytes (the producer's Producer.MaxMessageBytes)")
	turnEvents, total := historyOf(t, b.sessions, b.runner.Key(req), req.ID)
	require.Zero(t, turnEvents, "no turn of the request in the session")
	require.Zero(t, total)
	entry, err := b.inbox.Get(context.Background(), b.runner.InboxKey(req))
	require.NoError(t, err)
	require.Equal(t, inbox.StatusDead, entry.Status)

	// Just under the limit: the bound says "maybe too large", the exact encoding says no.
	answer = strings.Repeat("y", 999_000)
	ok := newRequest("c-fits", "u-1", "a long one")
	res, err := b.runner.Run(ctx, ok)
	require.NoError(t, err)
	require.Equal(t, answer, res.Text)
	turnEvents, _ = historyOf(t, b.sessions, b.runner.Key(ok), ok.ID)
	require.Equal(t, 2, turnEvents)
}
