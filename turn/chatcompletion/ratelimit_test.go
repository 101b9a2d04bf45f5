package chatcompletion_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/turn"
)

// Issue 10, hole 1: every 429 was a rate limit (turn.RetryAfter), including OpenAI's "Request
// too large ... on tokens per min", which no wait can let through: the request paused every
// partition of its member again and again and was never dead-lettered. Such 429s are failures
// now; an ordinary rate limit still pauses.
func TestRateLimitsThatCannotLift(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		body string
		want turn.Kind
	}{
		{"request too large for TPM", errorBody("Request too large for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Requested 42000. The input or output tokens must be reduced in order to run successfully.",
			"tokens", "rate_limit_exceeded"), turn.KindPermanent},
		{"request too large, plain", `{"error":"request too large for the tokens-per-minute limit"}`, turn.KindPermanent},
		{"quota spent", errorBody("You exceeded your current quota, please check your plan and billing details.",
			"insufficient_quota", "insufficient_quota"), turn.KindAttempt},
		{"ordinary rate limit", errorBody("Rate limit reached for gpt-4o on requests per min (RPM): Limit 500, Used 500, Requested 1.",
			"requests", "rate_limit_exceeded"), turn.KindRateLimited},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, c := setup(t, replyJSON(http.StatusTooManyRequests, tc.body, "Retry-After", "1"))
			_, err := c.Respond(context.Background(), input("hello"))
			require.Error(t, err)
			require.Equal(t, tc.want, turn.Classify(err), "%v", err)
			require.Contains(t, err.Error(), fmt.Sprint(http.StatusTooManyRequests))
		})
	}
}
