package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turn/turnotel"
)

// handOffs is a BatchHandler that, as the Temporal bridge does, publishes nothing and records
// what it was handed, per call. Calls wait until hold closes (nil: no wait), so that every
// record produced meanwhile waits in the window.
type handOffs struct {
	mu      sync.Mutex
	calls   [][]turn.Request
	hold    chan struct{}
	failAll bool // HandleBatch fails: the consumer falls back to Handle
}

func (h *handOffs) wait() {
	if h.hold != nil {
		<-h.hold
	}
}

func (h *handOffs) Handle(_ context.Context, req turn.Request) (*turn.Result, error) {
	h.wait()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, []turn.Request{req})
	return nil, nil
}

func (h *handOffs) HandleBatch(_ context.Context, reqs []turn.Request) error {
	h.wait()
	if h.failAll {
		return turn.Unavailable(errors.New("workflow service unavailable"))
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, append([]turn.Request(nil), reqs...))
	return nil
}

// handedOff returns the requests handed off, by conversation, in the order they were, and
// the largest call.
func (h *handOffs) handedOff() (byConv map[string][]string, largest int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	byConv = map[string][]string{}
	for _, call := range h.calls {
		largest = max(largest, len(call))
		for _, r := range call {
			byConv[r.ConversationID] = append(byConv[r.ConversationID], r.ID)
		}
	}
	return byConv, largest
}

// produceKeys produces n requests of each conversation, interleaved, and returns their ids
// by conversation in produce order.
func produceKeys(e *env, convs []string, n int) map[string][]string {
	want := map[string][]string{}
	for i := range n {
		for _, conv := range convs {
			req := request(conv, fmt.Sprintf("hello %d", i))
			e.produce(req)
			want[conv] = append(want[conv], req.ID)
		}
	}
	return want
}

// A BatchHandler gets a conversation's waiting records in one call, up to MaxBatch, in offset
// order; every record is handed off once, in its conversation's order, and committed. With
// metrics on, each batched record counts as a turn.
func TestBatchHandlerTakesAConversationsWaitingRecords(t *testing.T) {
	t.Parallel()
	e := setup(t, 1, 1)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	h := &handOffs{hold: make(chan struct{})}
	convs := []string{"b-1", "b-2", "b-3"}
	const perConv, maxBatch = 20, 8
	m := e.start(memberOpts{handler: h, tune: func(cfg *consumer.Config) {
		cfg.MaxBatch = maxBatch
		cfg.Telemetry = turnotel.Options{MeterProvider: mp}
	}})
	want := produceKeys(e, convs, perConv)
	eventually(t, func() bool { return m.c.Stats().PeakBuffered == int64(len(convs)*perConv) }, "every record in the window")
	close(h.hold)
	eventually(t, func() bool { return m.c.Stats().Records == int64(len(convs)*perConv) }, "every record done")

	got, largest := h.handedOff()
	require.Equal(t, want, got, "each record handed off once, in its conversation's order")
	require.Equal(t, maxBatch, largest, "a waiting conversation goes in batches of MaxBatch")
	st := m.c.Stats()
	require.Positive(t, st.Batches)
	require.Equal(t, int64(len(convs)*perConv), st.Turns)
	require.Less(t, st.Batches, st.Batched, "batches of several records")
	eventually(t, func() bool {
		return e.cluster.CommittedOffset(t, e.group, e.requests, 0) == int64(len(convs)*perConv)
	}, "every offset committed")
	group := attribute.String("messaging.consumer.group.name", e.group)
	turns := collect(t, reader, consumer.MetricTurns)
	require.Equal(t, int64(len(convs)*perConv), turns[attrs(group, attribute.String("turnstile.outcome", consumer.OutcomeDone))],
		"every record a turn in the metrics, batched or not")
}

// A batch the handler refuses is served one record at a time through Handle, in order; a
// record that does not decode in the middle of a conversation's waiting records ends the
// batch before it and is dead-lettered, and the records after it are handed off.
func TestBatchFallsBackToOneByOne(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		failAll bool
		garbage bool
	}{{"the batch refused", true, false}, {"a record that does not decode", false, true}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, 1, 1)
			h := &handOffs{hold: make(chan struct{}), failAll: c.failAll}
			m := e.start(memberOpts{handler: h, tune: func(cfg *consumer.Config) { cfg.MaxBatch = 100 }})
			want := produceKeys(e, []string{"f-1"}, 6)
			n := 6
			if c.garbage {
				e.cluster.Produce(t, e.requests, "f-1", []byte("{not json"), nil)
				want["f-1"] = append(want["f-1"], produceKeys(e, []string{"f-1"}, 3)["f-1"]...)
				n += 4
			}
			eventually(t, func() bool { return m.c.Stats().PeakBuffered == int64(n) }, "every record in the window")
			close(h.hold)
			eventually(t, func() bool { return m.c.Stats().Records == int64(n) }, "every record done")
			got, _ := h.handedOff()
			require.Equal(t, want, got, "each decodable record handed off once, in order")
			st := m.c.Stats()
			if c.failAll {
				require.Zero(t, st.Batches)
				require.Zero(t, st.DeadLetters)
				return
			}
			require.Positive(t, st.Batches)
			require.EqualValues(t, 1, st.DeadLetters, "the record that does not decode")
			require.Len(t, e.cluster.ReadAll(t, e.dlq, 1, wait), 1)
		})
	}
}

// spanHandOffs is a BatchHandler that records, for each request it is handed, the span
// current in the context it would hand that request off with: BatchRequestContext's in a
// batch, the call's own under Handle.
type spanHandOffs struct {
	handOffs
	spanMu     sync.Mutex
	spans      map[string]trace.SpanContext // by request id
	outOfRange []bool                       // whether an index out of range got the call's ctx back
}

func (h *spanHandOffs) note(ctx context.Context, req turn.Request) {
	h.spanMu.Lock()
	defer h.spanMu.Unlock()
	h.spans[req.ID] = trace.SpanContextFromContext(ctx)
}

func (h *spanHandOffs) Handle(ctx context.Context, req turn.Request) (*turn.Result, error) {
	h.note(ctx, req)
	return h.handOffs.Handle(ctx, req)
}

func (h *spanHandOffs) HandleBatch(ctx context.Context, reqs []turn.Request) error {
	h.spanMu.Lock()
	h.outOfRange = append(h.outOfRange, consumer.BatchRequestContext(ctx, len(reqs)) == ctx, consumer.BatchRequestContext(ctx, -1) == ctx)
	h.spanMu.Unlock()
	for i, req := range reqs {
		h.note(consumer.BatchRequestContext(ctx, i), req)
	}
	return h.handOffs.HandleBatch(ctx, reqs)
}

// With tracing on, what a BatchHandler does for each request of a batch can run under that
// request's own process span (BatchRequestContext), as under Handle: one context could not
// carry the spans of several records. Without telemetry, or outside a batch, the context is
// the one given.
func TestBatchRequestContextCarriesEachRecordsSpan(t *testing.T) {
	t.Parallel()
	require.Equal(t, context.Background(), consumer.BatchRequestContext(context.Background(), 0), "no batch: ctx as it is")
	e := setup(t, 1, 1)
	tp, exp := tracer(t)
	h := &spanHandOffs{handOffs: handOffs{hold: make(chan struct{})}, spans: map[string]trace.SpanContext{}}
	m := e.start(memberOpts{handler: h, tune: func(cfg *consumer.Config) {
		cfg.MaxBatch = 4
		cfg.Telemetry = turnotel.Options{TracerProvider: tp}
	}})
	const n = 9
	want := produceKeys(e, []string{"trace-batch"}, n)
	eventually(t, func() bool { return m.c.Stats().PeakBuffered == n }, "every record in the window")
	close(h.hold)
	eventually(t, func() bool { return m.c.Stats().Records == n }, "every record done")
	require.Positive(t, m.c.Stats().Batches)

	process := map[string]trace.SpanContext{} // the process span of each request, by id
	eventually(t, func() bool {
		for _, s := range exp.GetSpans() {
			if s.Name != "process "+e.requests {
				continue
			}
			set := attribute.NewSet(s.Attributes...)
			if v, ok := set.Value(turnotel.AttrRequestID); ok {
				process[v.AsString()] = s.SpanContext
			}
		}
		return len(process) == n
	}, "a process span for each record")
	h.spanMu.Lock()
	defer h.spanMu.Unlock()
	require.NotEmpty(t, h.outOfRange)
	require.NotContains(t, h.outOfRange, false, "an index out of range gets the call's ctx back")
	for _, id := range want["trace-batch"] {
		got := h.spans[id]
		require.True(t, got.IsValid(), "request %s handed off under a span", id)
		require.Equal(t, process[id].SpanID(), got.SpanID(), "request %s handed off under its own process span", id)
		require.Equal(t, process[id].TraceID(), got.TraceID(), "request %s in its record's trace", id)
	}
}
