package main

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/turnstile-go/turnstile/turn/turnotel"
)

// telemetry exports traces and metrics with the OpenTelemetry SDK's stdout exporters, one JSON
// document per span batch and per metric collection, to one writer: what a host would send to
// a collector instead. Each member (and the producer) gets providers of its own whose
// resource names it (service.instance.id), so one request's spans show which member ran it,
// and a request redone after the rebalance shows both.
type telemetry struct {
	w         io.Writer
	mu        sync.Mutex
	shutdowns []func(context.Context) error
}

func newTelemetry(w io.Writer) *telemetry { return &telemetry{w: &lockedWriter{w: w}} }

// options returns the providers of one member (or "producer").
func (t *telemetry) options(instance string) (turnotel.Options, error) {
	if t == nil {
		return turnotel.Options{}, nil
	}
	res := resource.NewSchemaless(attribute.String("service.name", "turnstile-quickstart"),
		attribute.String("service.instance.id", instance))
	spans, err := stdouttrace.New(stdouttrace.WithWriter(t.w))
	if err != nil {
		return turnotel.Options{}, err
	}
	metrics, err := stdoutmetric.New(stdoutmetric.WithWriter(t.w))
	if err != nil {
		return turnotel.Options{}, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(spans), sdktrace.WithResource(res))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithResource(res),
		sdkmetric.WithReader(sdkmetric.NewPeriodicReader(metrics, sdkmetric.WithInterval(5*time.Second))))
	t.mu.Lock()
	t.shutdowns = append(t.shutdowns, tp.Shutdown, mp.Shutdown)
	t.mu.Unlock()
	return turnotel.Options{TracerProvider: tp, MeterProvider: mp}, nil
}

// close flushes and stops every provider.
func (t *telemetry) close(ctx context.Context) error {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var errs []error
	for _, f := range t.shutdowns {
		errs = append(errs, f(ctx))
	}
	t.shutdowns = nil
	return errors.Join(errs...)
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// traceSend starts the producer's span of a request record and writes its traceparent into
// the record's headers, as an instrumented producer would; nil when tracing is off.
func traceSend(tr trace.Tracer, msg *sarama.ProducerMessage) trace.Span {
	if tr == nil {
		return nil
	}
	ctx, span := tr.Start(context.Background(), "send "+msg.Topic, trace.WithSpanKind(trace.SpanKindProducer))
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	for k, v := range carrier {
		msg.Headers = append(msg.Headers, sarama.RecordHeader{Key: []byte(k), Value: []byte(v)})
	}
	return span
}
