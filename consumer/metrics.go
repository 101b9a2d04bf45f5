package consumer

import (
	"context"
	"fmt"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"

	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turn/turnotel"
)

// meters are the consumer's OpenTelemetry instruments; nil on the Consumer when
// Config.Telemetry has no MeterProvider. Every measurement carries the consumer group
// (messaging.consumer.group.name); per-partition ones the topic and partition too. The
// attribute sets are built once, so a measurement allocates nothing for them.
type meters struct {
	turns          metric.Int64Counter
	turnDuration   metric.Float64Histogram
	attempts       metric.Int64Counter
	dedupHits      metric.Int64Counter
	pauses         metric.Int64Counter
	rebalances     metric.Int64Counter
	commitDuration metric.Float64Histogram

	group    attribute.KeyValue
	base     metric.MeasurementOption            // the group alone
	outcomes map[string]metric.MeasurementOption // by Outcome*
	kinds    map[turn.Kind]metric.MeasurementOption
	reg      metric.Registration
}

// Metric names. Durations are in seconds, per OpenTelemetry's conventions.
const (
	MetricTurns             = "turnstile.turns"             // counter, by turnstile.outcome
	MetricTurnDuration      = "turnstile.turn.duration"     // histogram (s), from a record's start to its outcome, by turnstile.outcome
	MetricAttempts          = "turnstile.attempts"          // counter of Handler calls, by turnstile.error.kind ("none" for success)
	MetricDedupHits         = "turnstile.inbox.dedup_hits"  // counter: results answered from the inbox (requests done before)
	MetricRateLimitPauses   = "turnstile.rate_limit.pauses" // counter: pauses of every partition after turn.RetryAfter
	MetricRebalances        = "turnstile.rebalances"        // counter: group sessions started (each rebalance starts one)
	MetricCommitDuration    = "turnstile.commit.duration"   // histogram (s) of offset commits
	MetricInFlight          = "turnstile.turns.in_flight"   // gauge: turns running, at most MaxInFlight
	MetricBuffered          = "turnstile.records.buffered"  // gauge per partition: records in its window (MaxBuffered)
	MetricPartitionsOwned   = "turnstile.partitions.owned"  // gauge: partitions of the requests topic this member owns
	MetricPartitionsPaused  = "turnstile.partitions.paused" // gauge: owned partitions paused, by turnstile.pause.reason
	MetricConsumerLag       = "turnstile.consumer.lag"      // gauge per partition: high-water mark minus committed offset
	AttrPauseReason         = attribute.Key("turnstile.pause.reason")
	PauseReasonRateLimit    = "rate_limit"   // every partition, after turn.RetryAfter
	PauseReasonBackpressure = "backpressure" // one partition, its window at MaxBuffered
)

// newMeters makes the consumer's instruments and registers the gauges' callback; it returns
// nil when Config.Telemetry has no MeterProvider.
func newMeters(c *Consumer) (*meters, error) {
	meter := c.cfg.Telemetry.Meter()
	if meter == nil {
		return nil, nil
	}
	m := newMeterAttrs(c.cfg.GroupID)
	mk := &instruments{meter: meter}
	m.turns = mk.counter(MetricTurns, "{turn}", "Turns brought to an outcome, by outcome.")
	m.turnDuration = mk.seconds(MetricTurnDuration, "Time from a record's turn starting to its outcome being ready to publish.")
	m.attempts = mk.counter(MetricAttempts, "{attempt}", "Handler calls, by the kind of their error (none: success).")
	m.dedupHits = mk.counter(MetricDedupHits, "{request}", "Requests done before, answered from the inbox.")
	m.pauses = mk.counter(MetricRateLimitPauses, "{pause}", "Pauses of every partition after a rate-limited model.")
	m.rebalances = mk.counter(MetricRebalances, "{rebalance}", "Consumer group sessions started, one per rebalance.")
	m.commitDuration = mk.seconds(MetricCommitDuration, "Duration of offset commits.")
	g := newGauges(mk)
	if mk.err != nil {
		return nil, fmt.Errorf("consumer: Telemetry.MeterProvider: %w", mk.err)
	}
	var err error
	m.reg, err = meter.RegisterCallback(m.observe(c, g), g.inFlight, g.buffered, g.owned, g.paused, g.lag)
	if err != nil {
		return nil, fmt.Errorf("consumer: Telemetry.MeterProvider: %w", err)
	}
	return m, nil
}

// newMeterAttrs returns meters with the attribute sets of the consumer group groupID made, the
// sets of every outcome and turn.Kind among them, so that a measurement allocates none.
func newMeterAttrs(groupID string) *meters {
	m := &meters{group: semconv.MessagingConsumerGroupName(groupID)}
	m.base = metric.WithAttributeSet(attribute.NewSet(m.group))
	m.outcomes = map[string]metric.MeasurementOption{}
	for _, o := range Outcomes() {
		m.outcomes[o] = metric.WithAttributeSet(attribute.NewSet(m.group, turnotel.AttrOutcome.String(o)))
	}
	m.kinds = map[turn.Kind]metric.MeasurementOption{}
	for _, k := range turn.Kinds() {
		m.kinds[k] = metric.WithAttributeSet(attribute.NewSet(m.group, turnotel.AttrKind.String(k.String())))
	}
	return m
}

// instruments makes instruments of meter until one fails: err is the first failure, and the
// instruments asked for after it are nil, so that newMeters checks once.
type instruments struct {
	meter metric.Meter
	err   error
}

// counter makes an Int64Counter.
func (mk *instruments) counter(name, unit, desc string) metric.Int64Counter {
	return instrument[metric.Int64CounterOption](mk, mk.meter.Int64Counter, name,
		metric.WithUnit(unit), metric.WithDescription(desc))
}

// seconds makes a Float64Histogram of durations in seconds.
func (mk *instruments) seconds(name, desc string) metric.Float64Histogram {
	return instrument[metric.Float64HistogramOption](mk, mk.meter.Float64Histogram, name,
		metric.WithUnit("s"), metric.WithDescription(desc))
}

// gauge makes an Int64ObservableGauge.
func (mk *instruments) gauge(name, unit, desc string) metric.Int64ObservableGauge {
	return instrument[metric.Int64ObservableGaugeOption](mk, mk.meter.Int64ObservableGauge, name,
		metric.WithUnit(unit), metric.WithDescription(desc))
}

// instrument makes an instrument with newInst, one of the meter's methods, unless an instrument
// made before failed (then it returns the zero instrument and leaves mk.err as it is).
func instrument[O, T any](mk *instruments, newInst func(string, ...O) (T, error), name string, opts ...O) T {
	var v T
	if mk.err == nil {
		v, mk.err = newInst(name, opts...)
	}
	return v
}

// gauges are the consumer's observable gauges, which meters.observe reads out.
type gauges struct {
	inFlight, buffered, owned, paused, lag metric.Int64ObservableGauge
}

// newGauges makes the gauges with mk.
func newGauges(mk *instruments) gauges {
	return gauges{
		inFlight: mk.gauge(MetricInFlight, "{turn}", "Turns running now."),
		buffered: mk.gauge(MetricBuffered, "{record}", "Records in a partition's window: received and not yet committable."),
		owned:    mk.gauge(MetricPartitionsOwned, "{partition}", "Partitions of the requests topic this member owns."),
		paused:   mk.gauge(MetricPartitionsPaused, "{partition}", "Owned partitions whose fetching is paused, by reason."),
		lag:      mk.gauge(MetricConsumerLag, "{record}", "A partition's high-water mark minus the offset this member last committed."),
	}
}

// observe returns the callback that observes g for c: the member's turns in flight and
// partitions owned and paused (by reason), each partition's window and lag.
func (m *meters) observe(c *Consumer, g gauges) metric.Callback {
	rateLimited := metric.WithAttributeSet(attribute.NewSet(m.group, AttrPauseReason.String(PauseReasonRateLimit)))
	backpressure := metric.WithAttributeSet(attribute.NewSet(m.group, AttrPauseReason.String(PauseReasonBackpressure)))
	return func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(g.inFlight, int64(len(c.sem)), m.base)
		parts := c.owned()
		o.ObserveInt64(g.owned, int64(len(parts)), m.base)
		var byRate, byFull int64
		for _, op := range parts {
			attrs := metric.WithAttributes(m.group, semconv.MessagingDestinationName(op.p.t.topic),
				semconv.MessagingDestinationPartitionID(strconv.Itoa(int(op.p.t.partition))))
			window, _, _ := op.p.buffered()
			o.ObserveInt64(g.buffered, int64(window), attrs)
			if l, ok := op.lag(); ok {
				o.ObserveInt64(g.lag, l, attrs)
			}
			switch c.pauses.reason(op.p.t) {
			case PauseReasonRateLimit:
				byRate++
			case PauseReasonBackpressure:
				byFull++
			}
		}
		o.ObserveInt64(g.paused, byRate, rateLimited)
		o.ObserveInt64(g.paused, byFull, backpressure)
		return nil
	}
}

// kind returns the attributes of an attempt of kind k. Every turn.Kinds entry has its set;
// a value outside the list (never made by turn.Classify) gets one made on the spot rather
// than a nil option, which the SDK would dereference.
func (m *meters) kind(k turn.Kind) metric.MeasurementOption {
	if o, ok := m.kinds[k]; ok {
		return o
	}
	return metric.WithAttributeSet(attribute.NewSet(m.group, turnotel.AttrKind.String(k.String())))
}

// outcomeAttrs returns the attributes of outcome o, one of Outcomes (else made on the spot,
// as kind does).
func (m *meters) outcomeAttrs(o string) metric.MeasurementOption {
	if a, ok := m.outcomes[o]; ok {
		return a
	}
	return metric.WithAttributeSet(attribute.NewSet(m.group, turnotel.AttrOutcome.String(o)))
}

// outcome counts a turn's outcome once it is durable (or abandoned).
func (m *meters) outcome(ob *outbound) {
	o := outcomeOf(ob, true)
	m.turns.Add(context.Background(), 1, m.outcomeAttrs(o))
	if o == OutcomeReplayed {
		m.dedupHits.Add(context.Background(), 1, m.base)
	}
}

// close unregisters the gauges' callback.
func (m *meters) close() {
	if m != nil && m.reg != nil {
		_ = m.reg.Unregister()
	}
}
