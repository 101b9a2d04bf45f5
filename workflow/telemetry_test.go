package workflow

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	tworker "go.temporal.io/sdk/worker"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turn/turnotel"
	"github.com/turnstile-go/turnstile/turntest"
)

// The acceptance line, Temporal mode: a request produced with a traceparent header is
// handed off by a traced consumer and bridge and applied by a traced worker; the consumer's
// process span, the bridge's signal, the workflow's activity, the turn and its model span all
// share the producer's trace, the turn hangs under the hand-off, and the result record carries
// a traceparent of that trace. The Temporal SDK's own metrics reach the same meter provider.
func TestDevServerTraceAcrossTemporal(t *testing.T) {
	t.Parallel()
	s, exp, reader, start := tracedStack(t, 1)
	start()

	traceID, parentID := "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	req := request(s.taskQueue+"-traced", 1, "hello through Temporal")
	s.produce(req, map[string]string{"traceparent": "00-" + traceID + "-" + parentID + "-01", "tenant": "acme"})

	results := s.cluster.ReadAll(t, s.results, 1, wait)
	h := turntest.HeaderMap(results[0])
	require.Equal(t, req.ID, h[consumer.HeaderRequestID])
	parts := strings.Split(h["traceparent"], "-")
	require.Len(t, parts, 4, "result traceparent %q", h["traceparent"])
	require.Equal(t, traceID, parts[1], "the result continues the producer's trace")

	tid, err := trace.TraceIDFromHex(traceID)
	require.NoError(t, err)
	byName := map[string][]tracetest.SpanStub{}
	require.Eventually(t, func() bool {
		byName = map[string][]tracetest.SpanStub{}
		for _, sp := range exp.GetSpans() {
			if sp.SpanContext.TraceID() == tid {
				byName[sp.Name] = append(byName[sp.Name], sp)
			}
		}
		return len(byName["turn "+ActivityName]) == 1 && len(byName["RunActivity:"+ActivityName]) == 1
	}, wait, 20*time.Millisecond, "turn and activity spans in the producer's trace")
	for _, name := range []string{"process " + s.requests, "SignalWithStartWorkflow:" + WorkflowName,
		"RunActivity:" + ActivityName, "turn " + ActivityName, "model.Respond", "inbox.Begin", "session.Append"} {
		require.NotEmpty(t, byName[name], "span %s in the producer's trace", name)
	}
	process := byName["process "+s.requests][0]
	require.Equal(t, parentID, process.Parent.SpanID().String())
	require.Equal(t, process.SpanContext.SpanID(), byName["SignalWithStartWorkflow:"+WorkflowName][0].Parent.SpanID(), "the bridge's signal under the process span")
	turnSpan := byName["turn "+ActivityName][0]
	require.Equal(t, process.SpanContext.SpanID(), turnSpan.Parent.SpanID(), "the turn hangs under the hand-off")
	require.Equal(t, turnSpan.SpanContext.SpanID(), byName["model.Respond"][0].Parent.SpanID(), "the model span under the turn")
	require.Equal(t, turnSpan.SpanContext.SpanID().String(), parts[2], "the result's traceparent names the turn span")

	calls := callsOf(s.model, func(in turn.Input) turn.Input { return in })
	require.Len(t, calls, 1)
	require.Equal(t, "acme", calls[0].Request.Headers["tenant"], "the tenant header reaches the model in Temporal mode")
	requireEveryRequestAnswered(t, s.answered(), req)

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	names := map[string]bool{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			names[sm.Scope.Name+" "+m.Name] = true
		}
	}
	require.True(t, names[TemporalScopeName+" temporal_activity_execution_latency"], "the SDK's metrics reach the meter: %v", names)
	require.True(t, names[turnotel.ScopeName+" turnstile.model.duration"], "turnstile's metrics reach the meter: %v", names)
}

// tracedStack starts a stack whose consumer (Config.MaxBatch maxBatch), bridge and worker
// share one tracer provider (its spans in the exporter returned) and one meter provider (its
// reader returned); start runs the consumer and returns it.
func tracedStack(t *testing.T, maxBatch int) (s *stack, exp *tracetest.InMemoryExporter, reader *sdkmetric.ManualReader, start func() *consumer.Consumer) {
	s = newStack(t, 2)
	exp = tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	reader = sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	tel := turnotel.Options{TracerProvider: tp, MeterProvider: mp}

	opts, err := ClientOptions(client.Options{HostPort: needServer(t), Namespace: "default",
		Logger: tlog.NewStructuredLogger(slog.New(s.logs))}, tel)
	require.NoError(t, err)
	c, err := client.Dial(opts)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	pub, err := NewKafkaPublisher(s.cluster.Brokers(), s.cluster.Config(), s.results, s.dlq)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	w := tworker.New(c, s.taskQueue, tworker.Options{})
	require.NoError(t, Register(w, WorkerOptions{Runner: s.runner(s.model), Publisher: pub, Logger: slog.New(s.logs), Telemetry: tel}))
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)
	b, err := NewBridge(c, BridgeOptions{TaskQueue: s.taskQueue, IDPrefix: s.taskQueue + "-", Logger: slog.New(s.logs), Telemetry: tel})
	require.NoError(t, err)
	cons, err := consumer.New(consumer.Config{
		Brokers: s.cluster.Brokers(), GroupID: s.group, RequestsTopic: s.requests, ResultsTopic: s.results,
		DeadLetterTopic: s.dlq, Sarama: s.cluster.Config(), Logger: slog.New(s.logs), CommitInterval: 100 * time.Millisecond,
		Telemetry: tel, MaxBatch: maxBatch,
	}, b)
	require.NoError(t, err)
	return s, exp, reader, func() *consumer.Consumer {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- cons.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		return cons
	}
}

// With Config.MaxBatch, a conversation's waiting records go to its workflow in one signal,
// and each request's turn still hangs under its own record's process span, in its own
// producer's trace (consumer.BatchRequestContext), not under another record's of the batch.
func TestDevServerBatchedHandOffKeepsEachTrace(t *testing.T) {
	t.Parallel()
	s, exp, _, start := tracedStack(t, 8)
	const n = 4
	conv := s.taskQueue + "-batched"
	var (
		reqs   []turn.Request
		traces []trace.TraceID
	)
	for i := range n { // all in the topic before the member joins: the first starts, the rest wait
		req := request(conv, int64(i+1), "hello")
		tid := trace.TraceID{0x0a, byte(i + 1), 0x51, 0x91, 0x6c, 0xd4, 0x3d, 0xd8, 0x44, 0x8e, 0xb2, 0x11, 0xc8, 0x03, 0x19, 0x9c}
		s.produce(req, map[string]string{"traceparent": "00-" + tid.String() + "-b7ad6b7169203331-01"})
		reqs, traces = append(reqs, req), append(traces, tid)
	}
	cons := start()
	results := s.cluster.ReadAll(t, s.results, n, wait)
	require.Len(t, results, n)
	require.Positive(t, cons.Stats().Batches, "some of the records handed off in one signal")
	for i, tid := range traces {
		var process, turnSpan []tracetest.SpanStub
		require.Eventually(t, func() bool {
			process, turnSpan = nil, nil
			for _, sp := range exp.GetSpans() {
				switch {
				case sp.SpanContext.TraceID() != tid:
				case sp.Name == "process "+s.requests:
					process = append(process, sp)
				case sp.Name == "turn "+ActivityName:
					turnSpan = append(turnSpan, sp)
				}
			}
			return len(process) == 1 && len(turnSpan) == 1
		}, wait, 20*time.Millisecond, "request %d: one process span and one turn span in its producer's trace", i+1)
		require.Equal(t, process[0].SpanContext.SpanID(), turnSpan[0].Parent.SpanID(), "request %d: its turn hangs under its own process span", i+1)
	}
	processes := map[trace.SpanID]bool{}
	var signals []tracetest.SpanStub
	for _, sp := range exp.GetSpans() {
		switch sp.Name {
		case "process " + s.requests:
			processes[sp.SpanContext.SpanID()] = true
		case "SignalWithStartWorkflow:" + WorkflowName:
			signals = append(signals, sp)
		}
	}
	require.Less(t, len(signals), n, "fewer signals than requests")
	for _, sp := range signals {
		require.True(t, processes[sp.Parent.SpanID()], "each signal, batched or not, under a record's process span")
	}
	requireEveryRequestAnswered(t, s.answered(), reqs...)
}
