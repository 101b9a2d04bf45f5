package workflow

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	tworker "go.temporal.io/sdk/worker"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
	"github.com/turnstile-go/turnstile/internal/sqltest"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/session/sqlsession"
	"github.com/turnstile-go/turnstile/turn"
)

// The bridge takes the consumer's batches.
var _ consumer.BatchHandler = (*Bridge)(nil)

// startConsumer runs a consumer group member of the stack that hands records to h, with tune
// applied to its Config, until the test ends, and returns it.
func (s *stack) startConsumer(h consumer.Handler, tune func(*consumer.Config)) *consumer.Consumer {
	t := s.t
	t.Helper()
	cfg := consumer.Config{
		Brokers: s.cluster.Brokers(), GroupID: s.group, RequestsTopic: s.requests,
		ResultsTopic: s.results, DeadLetterTopic: s.dlq, Sarama: s.cluster.Config(), Logger: slog.New(s.logs),
		CommitInterval: 100 * time.Millisecond, RetryBackoff: 20 * time.Millisecond,
	}
	if tune != nil {
		tune(&cfg)
	}
	c, err := consumer.New(cfg, h)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil && ctx.Err() == nil {
				t.Errorf("member: %v", err)
			}
		case <-time.After(wait):
			t.Errorf("member did not stop")
		}
	})
	return c
}

// A conversation's records waiting in the consumer's window reach its workflow in batches
// (one signal each), and every one of them is applied once, in order.
func TestDevServerConsumerHandsOffBatches(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	s.startWorker(nil)
	conv := s.taskQueue + "-batched"
	for i := range 30 {
		s.produce(request(conv, int64(i+1), fmt.Sprintf("message %d", i+1)), nil)
	}
	c := s.startConsumer(s.bridge(BridgeOptions{}), func(cfg *consumer.Config) { cfg.MaxBatch = 10 })
	st := s.waitApplied(s.bridge(BridgeOptions{}), conv, 30)
	require.EqualValues(t, 30, st.Applied)
	require.Eventually(t, func() bool { return c.Stats().Records == 30 }, wait, 10*time.Millisecond)
	require.Positive(t, c.Stats().Batches, "waiting records went in batches")
	require.Equal(t, []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30},
		s.model.sequences(), "each request ran once, in order")
}

// BenchmarkHandoffUnderConsumer measures what the consumer hands to Temporal per second
// through the bridge: handoffRecords records over 200 conversations on 6 partitions, produced
// before the member starts, handed off with one signal per record (MaxBatch 1) against the
// consumer's batches, interleaved one run each per iteration on one dev
// server; no worker runs, so only the hand-off is measured (from the member's start to every
// offset committable). Batched means MaxBatch 100. It reports each side's records/s and
// batched/single.
func BenchmarkHandoffUnderConsumer(b *testing.B) {
	const handoffRecords = 2000
	run := func(maxBatch int) time.Duration {
		s := newStack(b, 6)
		for i := range handoffRecords {
			conv := fmt.Sprintf("%s-c%d", s.taskQueue, i%benchConversations)
			s.produce(request(conv, int64(i/benchConversations+1), "hello"), nil)
		}
		start := time.Now()
		c := s.startConsumer(s.bridge(BridgeOptions{}), func(cfg *consumer.Config) { cfg.MaxBatch = maxBatch })
		require.Eventually(b, func() bool { return c.Stats().Records == handoffRecords }, wait, time.Millisecond)
		return time.Since(start)
	}
	var single, batched time.Duration
	b.ResetTimer()
	for range b.N {
		single += run(1)
		batched += run(100)
	}
	n := float64(handoffRecords * b.N)
	b.ReportMetric(n/single.Seconds(), "single-records/s")
	b.ReportMetric(n/batched.Seconds(), "batched-records/s")
	b.ReportMetric(single.Seconds()/batched.Seconds(), "batched/single")
}

// BenchmarkEndToEndPostgres compares turns/s from produced record to published result with a
// 1 s model over 1,000 conversations on PostgreSQL stores: direct mode by key (the consumer
// with the Runner, MaxInFlight 64) against Temporal mode (the consumer with the bridge, one
// worker running at most 64 turn activities at once), so that both run 64 turns at a time and
// Little's law bounds both at 64 turns/s. One run of each per iteration.
func BenchmarkEndToEndPostgres(b *testing.B) {
	const requests, convs, partitions, inFlight = 1280, 1000, 6, 64
	model := func(calls *atomic.Int64) turn.ModelClient {
		return turn.ModelFunc(func(ctx context.Context, in turn.Input) (turn.Output, error) {
			calls.Add(1)
			select {
			case <-time.After(time.Second):
			case <-ctx.Done():
				return turn.Output{}, ctx.Err()
			}
			return turn.Output{Events: []session.Event{{Text: "ok"}}}, nil
		})
	}
	run := func(b *testing.B, temporal bool) float64 {
		s := newStack(b, partitions)
		db := sqltest.OpenPostgres(b)
		prefix := sqltest.Prefix(b, db, true)
		var err error
		s.sessions, err = sqlsession.New(db, sqlsession.PostgreSQL, sqlsession.Options{TablePrefix: prefix, Concurrency: inFlight})
		require.NoError(b, err)
		require.NoError(b, s.sessions.Migrate(context.Background()))
		s.inbox, err = sqlinbox.New(db, sqlinbox.PostgreSQL, sqlinbox.Options{TablePrefix: prefix, Concurrency: inFlight})
		require.NoError(b, err)
		require.NoError(b, s.inbox.Migrate(context.Background()))
		var calls atomic.Int64
		var h consumer.Handler
		if temporal {
			s.startWorkerWith(func(o *WorkerOptions) { o.Runner.Model = model(&calls) },
				tworker.Options{MaxConcurrentActivityExecutionSize: inFlight, MaxConcurrentWorkflowTaskPollers: 4, MaxConcurrentActivityTaskPollers: 4})
			h = s.bridge(BridgeOptions{})
		} else {
			h = consumer.RunnerHandler(s.runner(model(&calls)))
		}
		for i := range requests {
			s.produce(request(fmt.Sprintf("%s-c%d", s.taskQueue, i%convs), int64(i/convs+1), "hello"), nil)
		}
		start := time.Now()
		s.startConsumer(h, func(cfg *consumer.Config) { cfg.MaxInFlight = inFlight })
		s.cluster.ReadAll(b, s.results, requests, wait)
		rate := float64(requests) / time.Since(start).Seconds()
		b.Logf("temporal mode %v: %.1f turns/s", temporal, rate)
		require.GreaterOrEqual(b, calls.Load(), int64(requests))
		return rate
	}
	var direct, temporal float64
	for range b.N {
		direct += run(b, false)
		temporal += run(b, true)
	}
	b.ReportMetric(direct/float64(b.N), "direct-turns/s")
	b.ReportMetric(temporal/float64(b.N), "temporal-turns/s")
	b.ReportMetric(temporal/direct, "temporal/direct")
}
