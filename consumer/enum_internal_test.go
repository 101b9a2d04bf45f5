package consumer

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turn/turnotel"
)

// missing returns the entries of want that table has no value for, in want's order.
func missing[K comparable, V any](table map[K]V, want []K) []K {
	var out []K
	for _, k := range want {
		if _, ok := table[k]; !ok {
			out = append(out, k)
		}
	}
	return out
}

// Every turn.Kind and every outcome has its metric attribute set, built from the one list of
// each; a value added to the list without its entry is caught, as the test shows by building
// the tables the metrics once had.
func TestEveryKindAndOutcomeHasItsMetricAttributes(t *testing.T) {
	t.Parallel()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	c := &Consumer{cfg: Config{GroupID: "g", Telemetry: turnotel.Options{MeterProvider: mp}}}
	m, err := newMeters(c)
	require.NoError(t, err)
	t.Cleanup(m.close)
	require.Empty(t, missing(m.kinds, turn.Kinds()), "a turn.Kind without its attempts attribute set")
	require.Empty(t, missing(m.outcomes, Outcomes()), "an outcome without its attribute set")
	for _, k := range turn.Kinds() {
		require.NotNil(t, m.kind(k))
	}
	require.NotNil(t, m.kind(turn.Kind(len(turn.Kinds()))), "a value outside the list still gets attributes, never nil")

	// The check fails where it should: the list the metrics had by hand before KindRunAlone
	// (whose missing entry put a group in a panic loop), and a kind added after today's.
	handWritten := map[turn.Kind]bool{turn.KindNone: true, turn.KindAttempt: true, turn.KindPermanent: true,
		turn.KindRateLimited: true, turn.KindUnavailable: true, turn.KindAbandoned: true}
	require.Equal(t, []turn.Kind{turn.KindRunAlone}, missing(handWritten, turn.Kinds()))
	added := turn.Kind(len(turn.Kinds()))
	require.Equal(t, []turn.Kind{added}, missing(m.kinds, append(turn.Kinds(), added)))

	// outcomeOf, walked over every kind of outbound, says only outcomes of the list.
	for _, ob := range []*outbound{nil, {kind: outResult}, {kind: outResult, replayed: true}, {kind: outDeadLetter},
		{kind: outBareDeadLetter}, {kind: outHeaderlessDeadLetter}, {kind: outKeylessDeadLetter}, {kind: outNothing}} {
		for _, ok := range []bool{true, false} {
			require.Contains(t, Outcomes(), outcomeOf(ob, ok))
		}
	}
	seen := map[string]bool{}
	for _, o := range Outcomes() {
		require.False(t, seen[o], "outcome %q twice", o)
		seen[o] = true
	}
}
