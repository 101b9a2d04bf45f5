package consumer

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// failingMeter refuses its first Int64Counter and counts the instruments asked of it.
type failingMeter struct {
	noop.Meter
	asked int
}

var errRefused = errors.New("refused")

func (m *failingMeter) Int64Counter(name string, opts ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	m.asked++
	if m.asked == 1 {
		return nil, errRefused
	}
	return m.Meter.Int64Counter(name, opts...)
}

func (m *failingMeter) Float64Histogram(name string, opts ...metric.Float64HistogramOption) (metric.Float64Histogram, error) {
	m.asked++
	return m.Meter.Float64Histogram(name, opts...)
}

// An instrument that fails stops the making: mk.err, which newMeters reports, is the first
// failure, and no instrument is asked of the meter after it.
func TestInstrumentsStopAtTheFirstFailure(t *testing.T) {
	t.Parallel()
	meter := &failingMeter{}
	mk := &instruments{meter: meter}
	require.Nil(t, mk.counter(MetricTurns, "{turn}", "turns"))
	require.Nil(t, mk.seconds(MetricTurnDuration, "duration"))
	require.Nil(t, mk.counter(MetricAttempts, "{attempt}", "attempts"))
	require.ErrorIs(t, mk.err, errRefused)
	require.Equal(t, 1, meter.asked)

	ok := &instruments{meter: noop.Meter{}}
	require.NotNil(t, ok.counter(MetricTurns, "{turn}", "turns"))
	require.NotNil(t, ok.seconds(MetricTurnDuration, "duration"))
	require.NotNil(t, ok.gauge(MetricInFlight, "{turn}", "in flight"))
	require.NoError(t, ok.err)
}
