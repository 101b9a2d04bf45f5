package consumer

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	rec "github.com/turnstile-go/turnstile/internal/record"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turn/turnotel"
)

// DefaultForwardHeaders are the request record headers copied onto its result record when
// Config.ForwardHeaders is nil: the W3C trace context (https://www.w3.org/TR/trace-context/).
var DefaultForwardHeaders = []string{"traceparent", "tracestate"}

// Outcomes of a turn, the values of the turnstile.outcome attribute of the
// turnstile.turns counter and the turnstile.turn.duration histogram.
const (
	OutcomeDone         = "done"          // a result published (or a Handler's nil Result)
	OutcomeReplayed     = "replayed"      // the stored result of a request done before, published again
	OutcomeDeadLettered = "dead_lettered" // the record published to the dead-letter topic
	OutcomeAbandoned    = "abandoned"     // revoked or shut down mid-turn; the next owner redoes it
)

// Outcomes returns every outcome of a turn (the Outcome* constants), the one list that the
// metrics' attribute sets are built from; outcomeOf returns only these, which a test checks.
func Outcomes() []string {
	return []string{OutcomeDone, OutcomeReplayed, OutcomeDeadLettered, OutcomeAbandoned}
}

// tracing is the consumer's tracer; nil on the Consumer when Config.Telemetry has no
// TracerProvider, and then the hot path does no span work at all.
type tracing struct {
	tracer    trace.Tracer
	prop      propagation.TextMapPropagator
	group     attribute.KeyValue
	process   string    // the process span's name
	partition sync.Map  // int32 -> trace.SpanStartOption: the process span's fixed attributes
	send      [2]string // the send spans' names: results, dead letters
	sendOpts  [2]trace.SpanStartOption
	consumer  trace.SpanStartOption
}

func newTracing(cfg *Config) *tracing {
	tr := cfg.Telemetry.Tracer()
	if tr == nil {
		return nil
	}
	t := &tracing{tracer: tr, prop: cfg.Telemetry.TextMapPropagator(),
		group:    semconv.MessagingConsumerGroupName(cfg.GroupID),
		process:  "process " + cfg.RequestsTopic,
		send:     [2]string{"send " + cfg.ResultsTopic, "send " + cfg.DeadLetterTopic},
		consumer: trace.WithSpanKind(trace.SpanKindConsumer)}
	for i, topic := range []string{cfg.ResultsTopic, cfg.DeadLetterTopic} {
		t.sendOpts[i] = trace.WithAttributes(semconv.MessagingSystemKafka, semconv.MessagingOperationTypeSend,
			semconv.MessagingDestinationName(topic))
	}
	return t
}

// startProcess starts a record's "process" span, a child of the trace context in its headers
// (a producer's traceparent) when there is one. The attributes that are the same for every
// record of a partition are built once.
func (t *tracing) startProcess(ctx context.Context, msg *sarama.ConsumerMessage) (context.Context, trace.Span) {
	if len(msg.Headers) > 0 {
		ctx = t.prop.Extract(ctx, consumerHeaders(msg.Headers))
	}
	fixed, ok := t.partition.Load(msg.Partition)
	if !ok {
		fixed, _ = t.partition.LoadOrStore(msg.Partition, trace.WithAttributes(semconv.MessagingSystemKafka,
			semconv.MessagingOperationTypeProcess, semconv.MessagingDestinationName(msg.Topic),
			semconv.MessagingDestinationPartitionID(strconv.Itoa(int(msg.Partition))), t.group))
	}
	return t.tracer.Start(ctx, t.process, t.consumer, fixed.(trace.SpanStartOption),
		trace.WithAttributes(semconv.MessagingKafkaOffset(int(msg.Offset))))
}

// request adds the decoded request's ids to the process span.
func request(span trace.Span, req *turn.Request) {
	span.SetAttributes(turnotel.AttrRequestID.String(req.ID), turnotel.AttrConversationID.String(req.ConversationID))
}

// endProcess ends the process span with the turn's outcome.
func endProcess(span trace.Span, ob *outbound, ok bool, attempts int) {
	outcome := outcomeOf(ob, ok)
	span.SetAttributes(turnotel.AttrOutcome.String(outcome), turnotel.AttrAttempt.Int(attempts))
	if outcome == OutcomeDeadLettered {
		span.SetStatus(codes.Error, ob.reason)
	}
	span.End()
}

// startPublish starts the "send" span of an outcome under the process span and writes its
// trace context into the outgoing record's headers, replacing any the request carried.
func (t *tracing) startPublish(ctx context.Context, ob *outbound) {
	i := 0
	if ob.kind != outResult {
		i = 1
	}
	_, span := t.tracer.Start(ctx, t.send[i], trace.WithSpanKind(trace.SpanKindProducer), t.sendOpts[i])
	ob.span = span
	t.prop.Inject(trace.ContextWithSpan(ctx, span), producerHeaders{&ob.pm.Headers})
}

// endPublish ends an outcome's send span, if any, once the broker acknowledged it or it was
// given up.
func (ob *outbound) endPublish(err error) {
	if ob.span == nil {
		return
	}
	if err != nil {
		ob.span.RecordError(err)
		ob.span.SetStatus(codes.Error, err.Error())
	}
	ob.span.End()
}

func outcomeOf(ob *outbound, ok bool) string {
	switch {
	case !ok:
		return OutcomeAbandoned
	case ob == nil || ob.kind == outResult && !ob.replayed:
		return OutcomeDone
	case ob.kind == outResult:
		return OutcomeReplayed
	}
	return OutcomeDeadLettered
}

// consumerHeaders reads a consumed record's headers for a propagator.
type consumerHeaders []*sarama.RecordHeader

func (h consumerHeaders) Get(key string) string {
	for _, rh := range h {
		if rh != nil && string(rh.Key) == key {
			return string(rh.Value)
		}
	}
	return ""
}

func (h consumerHeaders) Set(string, string) {}

func (h consumerHeaders) Keys() []string {
	keys := make([]string, 0, len(h))
	for _, rh := range h {
		if rh != nil {
			keys = append(keys, string(rh.Key))
		}
	}
	return keys
}

// producerHeaders writes an outgoing record's headers for a propagator; Set replaces a
// header of the same name.
type producerHeaders struct{ h *[]sarama.RecordHeader }

func (p producerHeaders) Get(key string) string {
	for _, rh := range *p.h {
		if string(rh.Key) == key {
			return string(rh.Value)
		}
	}
	return ""
}

func (p producerHeaders) Set(key, value string) {
	for i, rh := range *p.h {
		if string(rh.Key) == key {
			(*p.h)[i].Value = []byte(value)
			return
		}
	}
	*p.h = append(*p.h, rec.Header(key, value))
}

func (p producerHeaders) Keys() []string {
	keys := make([]string, 0, len(*p.h))
	for _, rh := range *p.h {
		keys = append(keys, string(rh.Key))
	}
	return keys
}

// recordHeaders returns a record's headers as a map (a repeated name keeps its last value),
// nil when it has none.
func recordHeaders(msg *sarama.ConsumerMessage) map[string]string {
	if len(msg.Headers) == 0 {
		return nil
	}
	h := make(map[string]string, len(msg.Headers))
	for _, rh := range msg.Headers {
		if rh != nil {
			h[string(rh.Key)] = string(rh.Value)
		}
	}
	return h
}

// forward appends the headers of req named in Config.ForwardHeaders to hs (record.Forward).
func (c *Consumer) forward(hs []sarama.RecordHeader, req *turn.Request) []sarama.RecordHeader {
	return rec.Forward(hs, req.Headers, c.cfg.ForwardHeaders)
}

// since returns the seconds from began to now.
func since(began time.Time) float64 { return time.Since(began).Seconds() }
