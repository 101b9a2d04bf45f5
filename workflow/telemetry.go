package workflow

import (
	"context"
	"fmt"
	"maps"

	"github.com/IBM/sarama"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/client"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/internal/record"
	"github.com/turnstile-go/turnstile/turn/turnotel"
)

// TemporalScopeName is the instrumentation scope of the Temporal SDK's spans and metrics
// that ClientOptions sets up.
const TemporalScopeName = "go.temporal.io/sdk"

// ClientOptions returns opts set up for tracing, metrics and turnstile's header propagation:
// with tel.TracerProvider, Temporal's OpenTelemetry tracing interceptor
// (go.temporal.io/sdk/contrib/opentelemetry), which carries the trace through every signal,
// workflow and activity in Temporal headers; with tel.MeterProvider, the SDK's metrics
// (workflow task and activity latencies, replay and cache figures) through that package's
// metrics handler; and a ContextPropagator when opts has none. Give the bridge's and the
// workers' clients the same. Errors: the interceptor's.
func ClientOptions(opts client.Options, tel turnotel.Options) (client.Options, error) {
	if tel.TracerProvider != nil {
		ti, err := temporalotel.NewTracingInterceptor(temporalotel.TracerOptions{
			Tracer: tel.TracerProvider.Tracer(TemporalScopeName),
		})
		if err != nil {
			return opts, fmt.Errorf("workflow: tracing interceptor: %w", err)
		}
		opts.Interceptors = append([]interceptor.ClientInterceptor{ti}, opts.Interceptors...)
	}
	if tel.MeterProvider != nil {
		opts.MetricsHandler = temporalotel.NewMetricsHandler(temporalotel.MetricsHandlerOptions{
			Meter: tel.MeterProvider.Meter(TemporalScopeName),
		})
	}
	hasOurs := false
	for _, p := range opts.ContextPropagators {
		if _, ok := p.(*ContextPropagator); ok {
			hasOurs = true
		}
	}
	if !hasOurs {
		opts.ContextPropagators = append(opts.ContextPropagators, NewContextPropagator())
	}
	return opts, nil
}

// injectTrace writes the trace context of ctx's span (the consumer's process span) into h, a
// request's propagated headers, in place of the producer's: the turn's spans then hang under
// the span that handed the request off. h is returned, made when nil; unchanged when ctx has
// no valid span.
func injectTrace(ctx context.Context, prop propagation.TextMapPropagator, h map[string]string) map[string]string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return h
	}
	h = maps.Clone(h)
	if h == nil {
		h = map[string]string{}
	}
	prop.Inject(ctx, propagation.MapCarrier(h))
	return h
}

// startTurn starts the activity's turn span: a child of the trace in the request's headers
// (the bridge's, carried in the Envelope), linked to the span Temporal's interceptor started
// for the activity when that is another. Without a trace in the headers it is a child of the
// activity's span. It returns ctx and nil when tracing is off.
func (a *worker) startTurn(ctx context.Context, env Envelope) (context.Context, trace.Span) {
	tr := a.opts.Telemetry.Tracer()
	if tr == nil {
		return ctx, nil
	}
	parent := ctx
	var opts []trace.SpanStartOption
	if len(env.Headers) > 0 {
		carried := a.opts.Telemetry.TextMapPropagator().Extract(context.Background(), propagation.MapCarrier(env.Headers))
		if sc := trace.SpanContextFromContext(carried); sc.IsValid() {
			parent = trace.ContextWithRemoteSpanContext(ctx, sc)
			if own := trace.SpanContextFromContext(ctx); own.IsValid() && own.TraceID() != sc.TraceID() {
				opts = append(opts, trace.WithLinks(trace.Link{SpanContext: own}))
			}
		}
	}
	opts = append(opts, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(
		turnotel.AttrRequestID.String(env.Request.ID), turnotel.AttrConversationID.String(env.Request.ConversationID)))
	return tr.Start(parent, "turn "+ActivityName, opts...)
}

// endTurn ends the activity's turn span with its outcome.
func endTurn(span trace.Span, out Outcome, err error) {
	switch {
	case err != nil:
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	case out.DeadLettered:
		span.SetAttributes(turnotel.AttrOutcome.String(consumer.OutcomeDeadLettered))
		span.SetStatus(codes.Error, out.Reason)
	default:
		span.SetAttributes(turnotel.AttrOutcome.String(consumer.OutcomeDone))
	}
	span.End()
}

// traceHeaders writes the trace context of ctx's span (the activity's turn span) into a
// result or dead letter's headers, replacing those of the same names.
func traceHeaders(ctx context.Context, hs []sarama.RecordHeader) []sarama.RecordHeader {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return hs
	}
	m := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, m)
	for k, v := range m {
		replaced := false
		for i := range hs {
			if string(hs[i].Key) == k {
				hs[i].Value, replaced = []byte(v), true
			}
		}
		if !replaced {
			hs = append(hs, record.Header(k, v))
		}
	}
	return hs
}
