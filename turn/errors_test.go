package turn_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	base := errors.New("x")
	for _, tc := range []struct {
		err  error
		want turn.Kind
	}{
		{nil, turn.KindNone},
		{base, turn.KindAttempt},
		{turn.Permanent(base), turn.KindPermanent},
		{fmt.Errorf("wrapped: %w", turn.Permanent(base)), turn.KindPermanent},
		{turn.RetryAfter(time.Second, base), turn.KindRateLimited},
		{fmt.Errorf("%w: %w", turn.ErrTurnTimeout, context.DeadlineExceeded), turn.KindAttempt},
		{context.Canceled, turn.KindAttempt},
		{fmt.Errorf("model: %w", context.DeadlineExceeded), turn.KindAttempt},
		{fmt.Errorf("%w: %w", turn.ErrAbandoned, context.Canceled), turn.KindAbandoned},
		{session.ErrConflict, turn.KindUnavailable},
		{retryableErr{}, turn.KindUnavailable},
		{turn.Unavailable(base), turn.KindUnavailable},
		{session.ErrOwnerMismatch, turn.KindPermanent},
		{&turn.DecodeError{Field: "text", Problem: "empty"}, turn.KindPermanent},
	} {
		require.Equal(t, tc.want, turn.Classify(tc.err), "%v", tc.err)
	}
	require.NoError(t, turn.Permanent(nil))
	require.NoError(t, turn.RetryAfter(time.Second, nil))
	require.NoError(t, turn.Unavailable(nil))
}

// Every Kind has a name of its own and round-trips through ParseKind; a Kind added to the
// const block without its entry in kindNames fails here (the name would be "" and String
// would fall back to "Kind(N)").
func TestEveryKindIsNamed(t *testing.T) {
	t.Parallel()
	kinds := turn.Kinds()
	require.Equal(t, turn.KindNone, kinds[0])
	require.Contains(t, kinds, turn.KindRunAlone)
	seen := map[string]bool{}
	for i, k := range kinds {
		require.Equal(t, turn.Kind(i), k, "Kinds is in declaration order")
		name := k.String()
		require.NotContains(t, name, "Kind(", "kind %d has no name", int(k))
		require.False(t, seen[name], "two kinds named %q", name)
		seen[name] = true
		back, ok := turn.ParseKind(name)
		require.True(t, ok)
		require.Equal(t, k, back)
	}
	require.Equal(t, "Kind(99)", turn.Kind(99).String())
	_, ok := turn.ParseKind("nonsense")
	require.False(t, ok)
}

// TestRetryAfterTellsTheRelayItsDelay: an error made by RetryAfter, wrapped, satisfies the
// interface inbox.Relay reads the delay through (the inbox package cannot import turn), with
// the delay given; one made with a negative delay asks for none.
func TestRetryAfterTellsTheRelayItsDelay(t *testing.T) {
	t.Parallel()
	var ra interface{ RetryAfter() time.Duration }
	require.True(t, errors.As(fmt.Errorf("deliver: %w", turn.RetryAfter(90*time.Second, errors.New("429"))), &ra))
	require.Equal(t, 90*time.Second, ra.RetryAfter())
	require.True(t, errors.As(turn.RetryAfter(-time.Second, errors.New("429")), &ra))
	require.Zero(t, ra.RetryAfter())
	require.False(t, errors.As(errors.New("503"), &ra))
}
