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

func newMeters(c *Consumer) (*meters, error) {
	meter := c.cfg.Telemetry.Meter()
	if meter == nil {
		return nil, nil
	}
	m := &meters{group: semconv.MessagingConsumerGroupName(c.cfg.GroupID)}
	m.base = metric.WithAttributeSet(attribute.NewSet(m.group))
	m.outcomes = map[string]metric.MeasurementOption{}
	for _, o := range Outcomes() {
		m.outcomes[o] = metric.WithAttributeSet(attribute.NewSet(m.group, turnotel.AttrOutcome.String(o)))
	}
	m.kinds = map[turn.Kind]metric.MeasurementOption{}
	for _, k := range turn.Kinds() {
		m.kinds[k] = metric.WithAttributeSet(attribute.NewSet(m.group, turnotel.AttrKind.String(k.String())))
	}
	var err error
	counter := func(name, unit, desc string) metric.Int64Counter {
		var v metric.Int64Counter
		if err == nil {
			v, err = meter.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		}
		return v
	}
	seconds := func(name, desc string) metric.Float64Histogram {
		var v metric.Float64Histogram
		if err == nil {
			v, err = meter.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc))
		}
		return v
	}
	m.turns = counter(MetricTurns, "{turn}", "Turns brought to an outcome, by outcome.")
	m.turnDuration = seconds(MetricTurnDuration, "Time from a record's turn starting to its outcome being ready to publish.")
	m.attempts = counter(MetricAttempts, "{attempt}", "Handler calls, by the kind of their error (none: success).")
	m.dedupHits = counter(MetricDedupHits, "{request}", "Requests done before, answered from the inbox.")
	m.pauses = counter(MetricRateLimitPauses, "{pause}", "Pauses of every partition after a rate-limited model.")
	m.rebalances = counter(MetricRebalances, "{rebalance}", "Consumer group sessions started, one per rebalance.")
	m.commitDuration = seconds(MetricCommitDuration, "Duration of offset commits.")
	var inFlight, buffered, owned, paused, lag metric.Int64ObservableGauge
	gauge := func(name, unit, desc string) metric.Int64ObservableGauge {
		var v metric.Int64ObservableGauge
		if err == nil {
			v, err = meter.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		}
		return v
	}
	inFlight = gauge(MetricInFlight, "{turn}", "Turns running now.")
	buffered = gauge(MetricBuffered, "{record}", "Records in a partition's window: received and not yet committable.")
	owned = gauge(MetricPartitionsOwned, "{partition}", "Partitions of the requests topic this member owns.")
	paused = gauge(MetricPartitionsPaused, "{partition}", "Owned partitions whose fetching is paused, by reason.")
	lag = gauge(MetricConsumerLag, "{record}", "A partition's high-water mark minus the offset this member last committed.")
	if err != nil {
		return nil, fmt.Errorf("consumer: Telemetry.MeterProvider: %w", err)
	}
	rateLimited := metric.WithAttributeSet(attribute.NewSet(m.group, AttrPauseReason.String(PauseReasonRateLimit)))
	backpressure := metric.WithAttributeSet(attribute.NewSet(m.group, AttrPauseReason.String(PauseReasonBackpressure)))
	m.reg, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(inFlight, int64(len(c.sem)), m.base)
		parts := c.owned()
		o.ObserveInt64(owned, int64(len(parts)), m.base)
		var byRate, byFull int64
		for _, op := range parts {
			attrs := metric.WithAttributes(m.group, semconv.MessagingDestinationName(op.p.t.topic),
				semconv.MessagingDestinationPartitionID(strconv.Itoa(int(op.p.t.partition))))
			window, _, _ := op.p.buffered()
			o.ObserveInt64(buffered, int64(window), attrs)
			if l, ok := op.lag(); ok {
				o.ObserveInt64(lag, l, attrs)
			}
			switch c.pauses.reason(op.p.t) {
			case PauseReasonRateLimit:
				byRate++
			case PauseReasonBackpressure:
				byFull++
			}
		}
		o.ObserveInt64(paused, byRate, rateLimited)
		o.ObserveInt64(paused, byFull, backpressure)
		return nil
	}, inFlight, buffered, owned, paused, lag)
	if err != nil {
		return nil, fmt.Errorf("consumer: Telemetry.MeterProvider: %w", err)
	}
	return m, nil
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
