package consumer_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
)

// outage is a retryable infrastructure error, as the SQL stores return for a lost connection.
type outage struct{}

func (outage) Error() string   { return "connection refused" }
func (outage) Retryable() bool { return true }

// flakySessions fails its first appends with an outage.
type flakySessions struct {
	session.Store
	failures atomic.Int64
}

func (s *flakySessions) Append(ctx context.Context, key session.Key, v int64, t session.Turn) (session.Appended, error) {
	if s.failures.Add(-1) >= 0 {
		return session.Appended{}, outage{}
	}
	return s.Store.Append(ctx, key, v, t)
}

func TestStoreOutageSpendsNoAttempt(t *testing.T) {
	t.Parallel()
	e := setup(t, 1, 1)
	flaky := &flakySessions{Store: e.sessions}
	flaky.failures.Store(int64(turn.DefaultMaxAttempts + 2)) // more outages than attempts
	m := e.start(memberOpts{runner: func(r *turn.Runner) { r.Sessions = flaky }})
	req := request("c-outage", "are you there?")
	e.produce(req)

	results := e.resultsByID(1)
	require.Len(t, results[req.ID], 1)
	require.Zero(t, m.c.Stats().DeadLetters)
	require.Zero(t, m.c.Stats().Retries, "an outage is not the request's fault")
	entry, err := e.inbox.Get(context.Background(), req.ID)
	require.NoError(t, err)
	require.Equal(t, 1, entry.Attempts)
	_, perRequest := e.history("c-outage")
	require.Equal(t, map[string]int{req.ID: 1}, perRequest)
}
