package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"time"

	"github.com/IBM/sarama"
	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turn/turnotel"
	"github.com/turnstile-go/turnstile/turntest"
)

// telemetryScenario: instant model, memory stores, every record carrying a W3C traceparent;
// turnstile with tracing and metrics on (the OpenTelemetry SDK, every span sampled and
// batched to an exporter that drops them, metrics read every second by a periodic reader
// whose exporter discards them) against turnstile with them off, on the same records, sides
// alternating.
func telemetryScenario(ctx context.Context, o options) error {
	n := orDefault(o.records, 100_000)
	cluster, err := turntest.Start(turntest.Options{})
	if err != nil {
		return err
	}
	defer cluster.Close()
	brokers := cluster.Brokers()
	model, what := turn.ModelClient(turn.ModelFunc(instant)), "instant model"
	if o.modelDelay > 0 {
		model, what = sleeper(o.modelDelay, false), fmt.Sprintf("%v model", o.modelDelay)
	}
	fmt.Printf("telemetry: %d records with a traceparent, %d partitions, %d keys, %s, memory stores\n", n, o.partitions, o.keys, what)
	row("run", "off records/s", "on records/s", "ratio on/off", "spans")
	var ratios []float64
	for run := 1; run <= o.runs; run++ {
		var rates [2]float64
		var spans int64
		for side := range 2 {
			requests, results, err := topics(ctx, brokers, o.partitions)
			if err != nil {
				return err
			}
			if _, err := produce(brokers, requests, n, o.keys, 0, traceparent); err != nil {
				return err
			}
			m := member{model: model}
			var (
				shutdown func()
				counted  *countingExporter
			)
			if side == 1 {
				var tel turnotel.Options
				tel, counted, shutdown, err = sdkTelemetry()
				if err != nil {
					return err
				}
				m.tune = func(c *consumer.Config) { c.Telemetry = tel }
			}
			d, _, err := runTurnstile(ctx, brokers, requests, results, n, m)
			if shutdown != nil {
				shutdown()
				spans = counted.n
			}
			if err != nil {
				return err
			}
			rates[side] = float64(n) / d.Seconds()
		}
		ratios = append(ratios, rates[1]/rates[0])
		row(run, fmt.Sprintf("%.0f", rates[0]), fmt.Sprintf("%.0f", rates[1]), fmt.Sprintf("%.2f", rates[1]/rates[0]), spans)
	}
	fmt.Printf("ratio on/off: median %.2f\n", median(ratios))
	return nil
}

// traceparent gives each benchmark record a W3C traceparent of a trace of its own, as an
// instrumented producer would.
func traceparent() []sarama.RecordHeader {
	v := fmt.Sprintf("00-%016x%016x-%016x-01", rand.Uint64(), rand.Uint64()|1, rand.Uint64()|1)
	return []sarama.RecordHeader{{Key: []byte("traceparent"), Value: []byte(v)}}
}

// sdkTelemetry returns OpenTelemetry SDK providers that sample every span and export to
// nowhere, the exporter that counts the spans, and a func that shuts the providers down.
func sdkTelemetry() (turnotel.Options, *countingExporter, func(), error) {
	spans := &countingExporter{}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(spans))
	metrics, err := stdoutmetric.New(stdoutmetric.WithWriter(io.Discard))
	if err != nil {
		return turnotel.Options{}, nil, nil, err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewPeriodicReader(metrics, sdkmetric.WithInterval(time.Second))))
	shutdown := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "consumerbench: tracer shutdown:", err)
		}
		if err := mp.Shutdown(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "consumerbench: meter shutdown:", err)
		}
	}
	tel := turnotel.Options{TracerProvider: tp, MeterProvider: mp}
	switch os.Getenv("CONSUMERBENCH_TELEMETRY") { // for looking into the figure: one of the two alone
	case "traces":
		tel.MeterProvider = nil
	case "metrics":
		tel.TracerProvider = nil
	}
	return tel, spans, shutdown, nil
}

// countingExporter drops spans, counting them: the SDK's whole path without an exporter's
// cost.
type countingExporter struct{ n int64 }

func (e *countingExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.n += int64(len(spans)) // the batcher exports from one goroutine
	return nil
}

func (e *countingExporter) Shutdown(context.Context) error { return nil }
