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
