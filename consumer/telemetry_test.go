package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turn/turnotel"
	"github.com/turnstile-go/turnstile/turntest"
)

// tracer is an SDK tracer provider whose spans land in an in-memory exporter as they end.
func tracer(t *testing.T) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, exp
}

// spanTree indexes ended spans of one trace by name.
func spansOf(exp *tracetest.InMemoryExporter, traceID trace.TraceID) map[string][]tracetest.SpanStub {
	out := map[string][]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		if s.SpanContext.TraceID() == traceID {
			out[s.Name] = append(out[s.Name], s)
		}
	}
	return out
}

// A request produced by kcat with a traceparent header: its spans form one tree under that
// trace (process, then inbox, session, model, append and send under it), and its result
// record carries a traceparent of the same trace, naming the send span.
func TestTraceContinuesFromKcat(t *testing.T) {
	t.Parallel()
	turntest.NeedKcat(t)
	e := setup(t, 3, 3)
	tp, exp := tracer(t)
	e.start(memberOpts{tune: func(cfg *consumer.Config) { cfg.Telemetry = turnotel.Options{TracerProvider: tp} }})

	traceID, parentID := "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	req := request("kcat-trace", "hello from kcat")
	data, err := req.Encode()
	require.NoError(t, err)
	turntest.KcatInput(t, []byte(req.ConversationID+"\t"+string(data)+"\n"), "-P", "-b", e.cluster.BrokerList(),
		"-t", e.requests, "-K", "\t", "-H", "traceparent=00-"+traceID+"-"+parentID+"-01", "-H", "tracestate=vendor=x")

	res := e.resultsByID(1)[req.ID]
	require.Len(t, res, 1)
	h := turntest.HeaderMap(res[0])
	parts := strings.Split(h["traceparent"], "-")
	require.Len(t, parts, 4, "result traceparent %q", h["traceparent"])
	require.Equal(t, traceID, parts[1], "the result continues the producer's trace")
	require.Equal(t, "vendor=x", h["tracestate"])

	tid, err := trace.TraceIDFromHex(traceID)
	require.NoError(t, err)
	var spans map[string][]tracetest.SpanStub
	eventually(t, func() bool { spans = spansOf(exp, tid); return len(spans["send "+e.results]) == 1 }, "send span ended")
	process := spans["process "+e.requests]
	require.Len(t, process, 1)
	require.Equal(t, parentID, process[0].Parent.SpanID().String(), "process span's parent is the producer's span")
	require.Equal(t, trace.SpanKindConsumer, process[0].SpanKind)
	attrs := attribute.NewSet(process[0].Attributes...)
	for k, want := range map[attribute.Key]string{"turnstile.request_id": req.ID, "turnstile.conversation_id": req.ConversationID,
		"messaging.destination.name": e.requests, "turnstile.outcome": consumer.OutcomeDone, "messaging.system": "kafka"} {
		v, ok := attrs.Value(k)
		require.True(t, ok, "process span attribute %s", k)
		require.Equal(t, want, v.AsString(), "process span attribute %s", k)
	}
	for _, k := range []attribute.Key{"messaging.destination.partition.id", "messaging.kafka.offset", "turnstile.attempt"} {
		_, ok := attrs.Value(k)
		require.True(t, ok, "process span attribute %s", k)
	}
	for _, name := range []string{"inbox.Begin", "session.Get", "session.Create", "model.Respond", "session.Append", "inbox.Complete", "send " + e.results} {
		require.Len(t, spans[name], 1, "span %s", name)
		require.Equal(t, process[0].SpanContext.SpanID(), spans[name][0].Parent.SpanID(), "span %s is a child of the process span", name)
	}
	require.Equal(t, spans["send "+e.results][0].SpanContext.SpanID().String(), parts[2], "the result's traceparent names the send span")
	require.Equal(t, trace.SpanKindProducer, spans["send "+e.results][0].SpanKind)
}

// A tenant header on the request reaches the model's input (Request.Headers, and the context
// TurnContextFunc derives from it) and, named in ForwardHeaders, the result record.
func TestTenantHeaderTravels(t *testing.T) {
	t.Parallel()
	e := setup(t, 2, 2)
	type tenantKey struct{}
	var seenHeader, seenContext atomic.Value
	e.start(memberOpts{
		model: func(ctx context.Context, in turn.Input) (turn.Output, error) {
			seenHeader.Store(in.Request.Headers["tenant"])
			if v, ok := ctx.Value(tenantKey{}).(string); ok {
				seenContext.Store(v)
			}
			return echo(in)
		},
		tune: func(cfg *consumer.Config) {
			cfg.ForwardHeaders = []string{"traceparent", "tracestate", "tenant"}
			cfg.TurnContextFunc = func(ctx context.Context, req turn.Request) (context.Context, context.CancelFunc) {
				return context.WithValue(ctx, tenantKey{}, req.Headers["tenant"]), nil
			}
		},
	})
	req := request("tenant-conv", "hi")
	data, err := req.Encode()
	require.NoError(t, err)
	e.cluster.Produce(t, e.requests, req.ConversationID, data, map[string]string{"tenant": "acme", "other": "not forwarded"})

	res := e.resultsByID(1)[req.ID]
	require.Len(t, res, 1)
	h := turntest.HeaderMap(res[0])
	require.Equal(t, "acme", h["tenant"], "the result carries the tenant header")
	require.NotContains(t, h, "other", "only ForwardHeaders are copied")
	require.Equal(t, "acme", seenHeader.Load(), "the model's input carries the record's headers")
	require.Equal(t, "acme", seenContext.Load(), "TurnContextFunc's context reaches the model")
}

// collect reads the metric reader and returns the data points of name, keyed by their
// attributes' encoding.
func collect(t *testing.T, r *sdkmetric.ManualReader, name string) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.Collect(context.Background(), &rm))
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[p.Attributes.Encoded(attribute.DefaultEncoder())] += p.Value
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					out[p.Attributes.Encoded(attribute.DefaultEncoder())] = p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[p.Attributes.Encoded(attribute.DefaultEncoder())] += int64(p.Count)
				}
			}
		}
	}
	return out
}

func attrs(kv ...attribute.KeyValue) string {
	s := attribute.NewSet(kv...)
	return s.Encoded(attribute.DefaultEncoder())
}

// After one dead letter, one dedup hit, one rate-limit pause and one rebalance, the metric
// reader reports each counter with the group and the outcome or kind.
func TestMetricsCountWhatHappened(t *testing.T) {
	t.Parallel()
	e := setup(t, 2, 2)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	var limited atomic.Bool
	m := e.start(memberOpts{
		model: func(_ context.Context, in turn.Input) (turn.Output, error) {
			switch in.Request.Text {
			case "poison":
				return turn.Output{}, turn.Permanent(errors.New("cannot answer this"))
			case "slow down":
				if limited.CompareAndSwap(false, true) {
					return turn.Output{}, turn.RetryAfter(10*time.Millisecond, errors.New("429"))
				}
			}
			return echo(in)
		},
		tune: func(cfg *consumer.Config) { cfg.Telemetry = turnotel.Options{MeterProvider: mp} },
	})
	eventually(t, func() bool { return m.c.Health().Ready() }, "member ready")
	ok, poison, limit := request("m-ok", "hello"), request("m-poison", "poison"), request("m-limit", "slow down")
	e.produce(ok, poison, limit)
	e.resultsByID(2)
	e.cluster.ReadAll(t, e.dlq, 1, wait)
	e.produce(ok) // again: answered from the inbox
	eventually(t, func() bool { return m.c.Stats().Replayed == 1 }, "the repeat replayed")

	group := attribute.String("messaging.consumer.group.name", e.group)
	outcome := func(o string) string { return attrs(group, attribute.String("turnstile.outcome", o)) }
	kind := func(k string) string { return attrs(group, attribute.String("turnstile.error.kind", k)) }
	eventually(t, func() bool { return collect(t, reader, consumer.MetricTurns)[outcome(consumer.OutcomeReplayed)] == 1 }, "replayed counted")
	turns := collect(t, reader, consumer.MetricTurns)
	require.Equal(t, map[string]int64{outcome(consumer.OutcomeDone): 2, outcome(consumer.OutcomeDeadLettered): 1,
		outcome(consumer.OutcomeReplayed): 1}, turns)
	require.Equal(t, map[string]int64{attrs(group): 1}, collect(t, reader, consumer.MetricDedupHits))
	require.Equal(t, map[string]int64{attrs(group): 1}, collect(t, reader, consumer.MetricRateLimitPauses))
	require.Equal(t, map[string]int64{attrs(group): 1}, collect(t, reader, consumer.MetricRebalances), "one join, one rebalance")
	require.Equal(t, map[string]int64{kind("none"): 3, kind("permanent"): 1, kind("rate_limited"): 1},
		collect(t, reader, consumer.MetricAttempts))
	durations := collect(t, reader, consumer.MetricTurnDuration)
	require.Equal(t, int64(2), durations[outcome(consumer.OutcomeDone)])
	require.Equal(t, int64(1), durations[outcome(consumer.OutcomeDeadLettered)])
	require.Positive(t, collect(t, reader, consumer.MetricCommitDuration)[attrs(group)])
	require.Equal(t, map[string]int64{attrs(group): 2}, collect(t, reader, consumer.MetricPartitionsOwned))
	model := collect(t, reader, "turnstile.model.duration")
	require.Equal(t, int64(4), model[attrs(attribute.String("turnstile.error.kind", "none"))]+
		model[attrs(attribute.String("turnstile.error.kind", "permanent"))]+model[attrs(attribute.String("turnstile.error.kind", "rate_limited"))],
		"model calls: ok, poison, the 429 and its retry")
}

// The lag gauge of each partition equals the partition's end offset minus the group's
// committed offset, both read independently from the broker, while a turn holds one
// partition's watermark.
func TestLagGaugeMatchesTheBroker(t *testing.T) {
	t.Parallel()
	e := setup(t, 2, 2)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	m := e.start(memberOpts{
		model: func(ctx context.Context, in turn.Input) (turn.Output, error) {
			if in.Request.Text == "hold" {
				select {
				case <-release:
				case <-ctx.Done():
					return turn.Output{}, ctx.Err()
				}
			}
			return echo(in)
		},
		tune: func(cfg *consumer.Config) {
			cfg.Telemetry = turnotel.Options{MeterProvider: mp}
			cfg.Ordering = consumer.OrderByKey // the records above the held one finish
		},
	})
	produceTo := func(partition int32, reqs ...turn.Request) {
		for _, r := range reqs {
			data, err := r.Encode()
			require.NoError(t, err)
			e.cluster.ProduceTo(t, e.requests, partition, r.ConversationID, data, nil)
		}
	}
	produceTo(0, request("lag-a", "one"), request("lag-b", "two"), request("lag-c", "three"))
	produceTo(1, request("lag-d", "four"))
	e.resultsByID(4)
	produceTo(0, request("lag-held", "hold"), request("lag-e", "five"), request("lag-f", "six"))
	e.resultsByID(6)
	// Once the watermark of partition 0 stops below the held turn, a commit carries it.
	commits := m.c.Stats().Commits
	eventually(t, func() bool { return m.c.Stats().Commits > commits+1 }, "two more commits")

	group := attribute.String("messaging.consumer.group.name", e.group)
	lag := collect(t, reader, consumer.MetricConsumerLag)
	for p, want := range map[int32]int64{0: 3, 1: 0} {
		end := endOffset(t, e, e.requests, p)
		committed := e.cluster.CommittedOffset(t, e.group, e.requests, p)
		require.Equal(t, want, end-committed, "partition %d: end %d, committed %d", p, end, committed)
		key := attrs(group, attribute.String("messaging.destination.name", e.requests),
			attribute.String("messaging.destination.partition.id", fmt.Sprint(p)))
		require.Equal(t, end-committed, lag[key], "lag of partition %d", p)
	}
	buffered := collect(t, reader, consumer.MetricBuffered)
	require.Equal(t, int64(3), buffered[attrs(group, attribute.String("messaging.destination.name", e.requests),
		attribute.String("messaging.destination.partition.id", "0"))], "held record and the two done above it")
	require.Equal(t, map[string]int64{attrs(group): 1}, collect(t, reader, consumer.MetricInFlight), "the held turn")
}

// Health is not ready before the member runs and before its first assignment, ready once it
// owns partitions, not ready while a rate limit pauses every partition, and ready again after.
func TestHealthFollowsAssignmentAndPauses(t *testing.T) {
	t.Parallel()
	e := setup(t, 2, 2)
	var limited atomic.Bool
	m := e.start(memberOpts{
		model: func(_ context.Context, in turn.Input) (turn.Output, error) {
			if limited.Load() {
				return turn.Output{}, turn.RetryAfter(100*time.Millisecond, errors.New("429"))
			}
			return echo(in)
		},
		tune: func(cfg *consumer.Config) { cfg.MaxPause = 300 * time.Millisecond },
	})
	for deadline := time.Now().Add(wait); ; {
		h := m.c.Health() // read first: a claim is counted before it makes Health ready
		claims := m.c.Stats().Claims
		if claims == 0 {
			require.False(t, h.Ready(), "ready before the first assignment: %+v", h)
		}
		// Ready comes with the first claim; sarama starts the claims of one assignment one by
		// one, so wait for both partitions.
		if h.Ready() && len(h.Partitions) == 2 {
			break
		}
		require.True(t, time.Now().Before(deadline), "member not ready with both partitions within %v: %s %v", wait, h.Reason(), h.Partitions)
		time.Sleep(5 * time.Millisecond)
	}
	h := m.c.Health()
	require.True(t, h.Live())
	require.Equal(t, []int32{0, 1}, h.Partitions)
	require.Empty(t, h.Reason())

	limited.Store(true)
	e.produce(request("h-1", "hello"))
	// Check the very report that said not ready: the pause ends and starts again while the
	// model keeps answering 429, so a second read may fall between two pauses.
	eventually(t, func() bool {
		h = m.c.Health()
		return !h.Ready()
	}, "not ready while rate limited")
	require.Equal(t, consumer.PauseReasonRateLimit, h.PauseReason)
	require.Equal(t, h.Partitions, h.Paused)
	require.Contains(t, h.Reason(), "every partition paused")
	limited.Store(false)
	e.resultsByID(1)
	eventually(t, func() bool { return m.c.Health().Ready() }, "ready after the pause")

	// A consumer that never ran is neither ready nor live.
	idle, err := consumer.New(consumer.Config{Brokers: e.cluster.Brokers(), GroupID: "g", RequestsTopic: "a", ResultsTopic: "b", DeadLetterTopic: "c"},
		consumer.HandlerFunc(func(context.Context, turn.Request) (*turn.Result, error) { return nil, nil }))
	require.NoError(t, err)
	require.False(t, idle.Health().Ready())
	require.False(t, idle.Health().Live())
	require.Equal(t, "not running", idle.Health().Reason())
}

// endOffset reads a partition's end offset (high-water mark) from the broker.
func endOffset(t *testing.T, e *env, topic string, partition int32) int64 {
	t.Helper()
	client, err := sarama.NewClient(e.cluster.Brokers(), e.cluster.Config())
	require.NoError(t, err)
	defer client.Close()
	end, err := client.GetOffset(topic, partition, sarama.OffsetNewest)
	require.NoError(t, err)
	return end
}
