package chatcompletion_test

import (
	"context"
	"errors"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turn/chatcompletion"
)

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 5, 0, 0, 0, time.UTC)
	cases := []struct {
		name    string
		headers map[string]string
		want    time.Duration
	}{
		{"absent", nil, 0},
		{"seconds", map[string]string{"Retry-After": "2"}, 2 * time.Second},
		{"seconds with spaces", map[string]string{"Retry-After": " 3 "}, 3 * time.Second},
		{"zero", map[string]string{"Retry-After": "0"}, 0},
		{"fraction", map[string]string{"Retry-After": "1.5"}, 1500 * time.Millisecond},
		{"IMF-fixdate", map[string]string{"Retry-After": "Mon, 30 Nov 2026 05:00:20 GMT"}, 20 * time.Second},
		{"RFC 850 date", map[string]string{"Retry-After": "Monday, 30-Nov-26 05:01:00 GMT"}, time.Minute},
		{"asctime date", map[string]string{"Retry-After": "Mon Nov 30 05:00:05 2026"}, 5 * time.Second},
		{"date in the past", map[string]string{"Retry-After": "Mon, 30 Nov 2026 04:59:00 GMT"}, 0},
		{"negative", map[string]string{"Retry-After": "-5"}, 0},
		{"exponent", map[string]string{"Retry-After": "1e3"}, 0},
		{"inf", map[string]string{"Retry-After": "inf"}, 0},
		{"garbage", map[string]string{"Retry-After": "soon"}, 0},
		{"milliseconds", map[string]string{"Retry-After-Ms": "250"}, 250 * time.Millisecond},
		{"milliseconds win", map[string]string{"Retry-After-Ms": "250", "Retry-After": "9"}, 250 * time.Millisecond},
		{"bad milliseconds fall back", map[string]string{"Retry-After-Ms": "x", "Retry-After": "9"}, 9 * time.Second},
		{"huge saturates", map[string]string{"Retry-After": "99999999999999999999999"}, time.Duration(math.MaxInt64)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			for k, v := range tc.headers {
				h.Set(k, v)
			}
			require.Equal(t, tc.want, chatcompletion.RetryAfter(h, now))
		})
	}
}

// TestRunnerOutcomes runs the client inside a turn.Runner: a 400 dead-letters the request, a
// 429 spends no attempt, and a reply becomes the turn's result.
func TestRunnerOutcomes(t *testing.T) {
	t.Parallel()
	type outcome struct {
		status int
		body   string
	}
	next := make(chan outcome, 3)
	f, c := setup(t, func(w http.ResponseWriter, r *http.Request) {
		o := <-next
		replyJSON(o.status, o.body, "Retry-After", "1")(w, r)
	})
	runner := &turn.Runner{Model: c, Sessions: session.NewMemoryStore(), Inbox: inbox.NewMemoryInbox(), TurnTimeout: 10 * time.Second}
	ctx := context.Background()

	req := input("hello").Request
	next <- outcome{http.StatusTooManyRequests, errorBody("Rate limit reached", "requests", "rate_limit_exceeded")}
	_, err := runner.Run(ctx, req)
	require.Equal(t, turn.KindRateLimited, turn.Classify(err), "%v", err)
	entry, err := runner.Inbox.Get(ctx, runner.InboxKey(req))
	require.NoError(t, err)
	require.Equal(t, 0, entry.Attempts, "a rate limit spends no attempt")

	next <- outcome{http.StatusOK, completion("hi there", "stop")}
	res, err := runner.Run(ctx, req)
	require.NoError(t, err)
	require.Equal(t, "hi there", res.Text)
	require.Equal(t, 2, res.Events)

	// The next turn of the conversation carries the first one as history.
	req2 := input("and again").Request
	next <- outcome{http.StatusBadRequest, errorBody("Invalid 'messages'", "invalid_request_error", "")}
	_, err = runner.Run(ctx, req2)
	var dead *turn.DeadLetterError
	require.True(t, errors.As(err, &dead), "%v", err)
	require.Equal(t, 1, dead.Attempts)
	require.Contains(t, dead.Reason, "Invalid 'messages'")

	reqs := f.requests()
	require.Len(t, reqs, 3)
	var roles []string
	for _, m := range reqs[2].Body.Messages {
		roles = append(roles, m.Role+": "+m.Content)
	}
	require.Equal(t, []string{"user: hello", "assistant: hi there", "user: and again"}, roles)
}
