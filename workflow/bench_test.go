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
// requests are handed to Temporal by a raw SDK SignalWithStart loop (the best plain code, one
// request per signal), by the bridge's Handle (what the consumer calls per record) and by the
// bridge's HandOff with the 10 requests of a conversation in one signal. The three are
// interleaved, 10 requests at a time, so that the shared machine's load drifts over all of
// them alike; each mode has its own 200 conversations. No worker runs: only the hand-off is
// measured. An iteration hands off handoffRequests requests per mode; run with -benchtime 1x.
// It reports each mode's requests/s and the ratios handle/raw and batch10/raw.
func BenchmarkHandoff(b *testing.B) {
	const handoffRequests = 2000
	s := newStack(b, 1)
	br := s.bridge(BridgeOptions{})
	ctx := context.Background()
	group := func(mode string, g, seqBase int) []turn.Request {
		out := make([]turn.Request, 10)
		conv := fmt.Sprintf("%s-%s-%d", s.taskQueue, mode, g%benchConversations)
		for i := range out {
			out[i] = request(conv, int64(seqBase+i+1), "hello")
			out[i].Source = turn.Source{Topic: "requests", Partition: int32(g % 6), Offset: int64(g*10 + i)}
		}
		return out
	}
	raw := func(r turn.Request) {
		id := br.WorkflowID(r.ConversationID)
		_, err := s.client.SignalWithStartWorkflow(ctx, id, SignalName, Batch{Envelopes: []Envelope{{Request: r, Source: r.Source}}},
			client.StartWorkflowOptions{ID: id, TaskQueue: s.taskQueue}, WorkflowName, State{ConversationID: r.ConversationID})
		require.NoError(b, err)
	}
	for _, r := range group("warm", 0, 0) { // the connection and the server warm up untimed
		raw(r)
	}
	var tRaw, tHandle, tBatch time.Duration
	b.ResetTimer()
	for it := range b.N {
		for g := range handoffRequests / 10 {
			seqBase := (it*handoffRequests/10 + g) / benchConversations * 10
			start := time.Now()
			for _, r := range group("raw", g, seqBase) {
				raw(r)
			}
			tRaw += time.Since(start)
			start = time.Now()
			for _, r := range group("handle", g, seqBase) {
				_, err := br.Handle(ctx, r)
				require.NoError(b, err)
			}
			tHandle += time.Since(start)
			start = time.Now()
			require.NoError(b, br.HandOff(ctx, group("batch", g, seqBase)))
			tBatch += time.Since(start)
		}
	}
	n := float64(handoffRequests * b.N)
	b.ReportMetric(n/tRaw.Seconds(), "raw-requests/s")
	b.ReportMetric(n/tHandle.Seconds(), "handle-requests/s")
	b.ReportMetric(n/tBatch.Seconds(), "batch10-requests/s")
	b.ReportMetric(tRaw.Seconds()/tHandle.Seconds(), "handle/raw")
	b.ReportMetric(tRaw.Seconds()/tBatch.Seconds(), "batch10/raw")
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
