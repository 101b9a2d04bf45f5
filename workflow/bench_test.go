package workflow

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
)

// benchConversations spreads hand-offs so that no run nears its signal limit.
const benchConversations = 200

// BenchmarkHandoff compares, on the same dev server and in one run, the rate at which
// requests are handed to Temporal: a raw SDK SignalWithStart loop (the best plain code, one
// request per signal), the bridge's Handle (what the consumer calls per record), and the
// bridge's HandOff with 10 requests of a conversation per signal. No worker runs, so only the
// hand-off is measured. Each iteration hands off handoffRequests requests; each reports
// requests/s; compare the ratios. Run with -benchtime 1x (see BENCHMARKS.md).
func BenchmarkHandoff(b *testing.B) {
	const handoffRequests = 2000
	s := newStack(b, 1)
	br := s.bridge(BridgeOptions{})
	reqs := func(prefix string, n int) []turn.Request {
		out := make([]turn.Request, n)
		for i := range out {
			out[i] = request(fmt.Sprintf("%s-%s-%d", s.taskQueue, prefix, i%benchConversations), int64(i/benchConversations+1), "hello")
			out[i].Source = turn.Source{Topic: "requests", Partition: int32(i % 6), Offset: int64(i)}
		}
		return out
	}
	report := func(b *testing.B, n int, start time.Time) {
		b.ReportMetric(float64(n)/time.Since(start).Seconds(), "requests/s")
	}
	b.Run("raw-SignalWithStart", func(b *testing.B) {
		n := handoffRequests * b.N
		rs := reqs(fmt.Sprintf("raw%d", b.N), n)
		ctx := context.Background()
		b.ResetTimer()
		start := time.Now()
		for _, r := range rs {
			id := br.WorkflowID(r.ConversationID)
			_, err := s.client.SignalWithStartWorkflow(ctx, id, SignalName, Batch{Envelopes: []Envelope{{Request: r, Source: r.Source}}},
				client.StartWorkflowOptions{ID: id, TaskQueue: s.taskQueue}, WorkflowName, State{ConversationID: r.ConversationID})
			require.NoError(b, err)
		}
		report(b, n, start)
	})
	b.Run("bridge-Handle", func(b *testing.B) {
		n := handoffRequests * b.N
		rs := reqs(fmt.Sprintf("handle%d", b.N), n)
		b.ResetTimer()
		start := time.Now()
		for _, r := range rs {
			_, err := br.Handle(context.Background(), r)
			require.NoError(b, err)
		}
		report(b, n, start)
	})
	b.Run("bridge-HandOff-batch10", func(b *testing.B) {
		n := handoffRequests * b.N
		rs := reqs(fmt.Sprintf("batch%d", b.N), n)
		// Group each conversation's requests into batches of 10, in sequence order.
		byConv := map[string][]turn.Request{}
		for _, r := range rs {
			byConv[r.ConversationID] = append(byConv[r.ConversationID], r)
		}
		var batches [][]turn.Request
		for _, list := range byConv {
			for i := 0; i < len(list); i += 10 {
				batches = append(batches, list[i:min(i+10, len(list))])
			}
		}
		b.ResetTimer()
		start := time.Now()
		for _, batch := range batches {
			require.NoError(b, br.HandOff(context.Background(), batch))
		}
		report(b, n, start)
	})
}

// BenchmarkEndToEnd compares turns/s from produced record to published result, direct mode
// (consumer with the Runner) against Temporal mode (consumer with the bridge, one worker),
// with a 50 ms model, SQLite stores and 6 partitions, in one run: 600 requests over 60
// conversations per iteration.
func BenchmarkEndToEnd(b *testing.B) {
	const requests, convs, partitions = 600, 60, 6
	model := func(calls *atomic.Int64) turn.ModelClient {
		return turn.ModelFunc(func(ctx context.Context, in turn.Input) (turn.Output, error) {
			calls.Add(1)
			select {
			case <-time.After(50 * time.Millisecond):
			case <-ctx.Done():
				return turn.Output{}, ctx.Err()
			}
			return turn.Output{Events: []session.Event{{Text: "ok"}}}, nil
		})
	}
	run := func(b *testing.B, temporal bool) {
		for range b.N {
			b.StopTimer()
			s := newStack(b, partitions)
			var calls atomic.Int64
			var h consumer.Handler
			if temporal {
				s.startWorker(func(o *WorkerOptions) { o.Runner.Model = model(&calls) })
				h = s.bridge(BridgeOptions{})
			} else {
				h = consumer.RunnerHandler(s.runner(model(&calls)))
			}
			for i := range requests {
				s.produce(request(fmt.Sprintf("%s-c%d", s.taskQueue, i%convs), int64(i/convs+1), "hello"), nil)
			}
			b.StartTimer()
			start := time.Now()
			s.startMember(h, nil)
			s.cluster.ReadAll(b, s.results, requests, wait)
			b.ReportMetric(float64(requests)/time.Since(start).Seconds(), "turns/s")
			b.StopTimer()
			require.GreaterOrEqual(b, calls.Load(), int64(requests))
		}
	}
	b.Run("direct", func(b *testing.B) { run(b, false) })
	b.Run("temporal", func(b *testing.B) { run(b, true) })
}
