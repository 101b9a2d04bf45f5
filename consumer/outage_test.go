package consumer_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/consumer"
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
	entry, err := e.inbox.Get(context.Background(), turn.InboxKey(turn.DefaultApp, req))
	require.NoError(t, err)
	require.Equal(t, 1, entry.Attempts)
	_, perRequest := e.history("c-outage")
	require.Equal(t, map[string]int{req.ID: 1}, perRequest)
}

// G6: a backlog does not pile up in memory. With a slow model and a partition full of
// records, the lane pauses the partition at MaxBuffered records, so it holds at most that
// plus one fetch; without the pause it would hold the whole backlog.
func TestBacklogIsBounded(t *testing.T) {
	t.Parallel()
	const backlog, maxBuffered = 600, 8
	e := setup(t, 1, 1)
	var sent []turn.Request
	for i := range backlog {
		sent = append(sent, request("c-backlog", fmt.Sprintf("message %03d", i)))
	}
	e.produce(sent...) // the whole backlog waits before the member starts
	m := e.start(memberOpts{
		model: func(ctx context.Context, in turn.Input) (turn.Output, error) {
			select {
			case <-time.After(time.Millisecond):
			case <-ctx.Done():
				return turn.Output{}, ctx.Err()
			}
			return echo(in)
		},
		tune: func(cfg *consumer.Config) {
			cfg.MaxBuffered = maxBuffered
			cfg.Sarama.Consumer.Fetch.Default = 4 << 10 // a fetch brings a dozen records or so
		},
	})
	results := e.resultsByID(backlog)
	require.Len(t, results, backlog)
	e.checkHistories(map[string][]turn.Request{"c-backlog": sent})
	peak := m.c.Stats().PeakBuffered
	t.Logf("peak %d", peak)
	require.Positive(t, peak)
	// Fetches already in flight when the lane pauses still arrive, so the peak is some
	// fetches above MaxBuffered; without the pause it is most of the backlog.
	require.Less(t, peak, int64(backlog/3), "the lane held %d records at once", peak)
}
