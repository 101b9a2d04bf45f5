package chaos

import (
	"context"
	"sync/atomic"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/turnstile-go/turnstile/turn/turnotel"
)

// discardSpans is a span exporter that counts the spans it is given and drops them.
type discardSpans struct{ n atomic.Int64 }

func (d *discardSpans) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	d.n.Add(int64(len(spans)))
	return nil
}

func (d *discardSpans) Shutdown(context.Context) error { return nil }

// sdkTelemetry returns telemetry on the OpenTelemetry SDK for a member of CellByKeyOTel:
// every span sampled and batched to an exporter that drops it, and a meter provider whose
// manual reader is collected every 500 ms (so that the consumer's instruments and their
// callbacks really run) and the data dropped. shutdown ends both.
func sdkTelemetry() (tel turnotel.Options, shutdown func()) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithBatcher(&discardSpans{}, sdktrace.WithBatchTimeout(200*time.Millisecond)))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				var rm metricdata.ResourceMetrics
				_ = reader.Collect(context.Background(), &rm)
			}
		}
	}()
	return turnotel.Options{TracerProvider: tp, MeterProvider: mp}, func() {
		close(stop)
		<-done
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = tp.Shutdown(ctx)
		_ = mp.Shutdown(ctx)
	}
}
