package turnotel

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/turnstile-go/turnstile/turn"
)

// The compaction span and metrics (turn.Runner.ContextBudget: a compaction folds the oldest
// turns of a conversation into a summary, stored as a checkpoint).
const (
	// SpanCompaction is the span around a compaction's summarizer call.
	SpanCompaction = "compaction.Summarize"
	// MetricCompactions counts compactions whose summarizer ran, by turnstile.error.kind
	// ("none": the summary was written). A compaction answered from the turn's journal runs
	// none and is not counted: this is what compactions cost.
	MetricCompactions = "turnstile.compactions"
	// MetricCompactionSummaryTokens is a histogram of the tokens of the summaries written.
	MetricCompactionSummaryTokens = "turnstile.compaction.summary_tokens"

	AttrCompactionFrom           = attribute.Key("turnstile.compaction.from")            // the first seq folded
	AttrCompactionThrough        = attribute.Key("turnstile.compaction.through")         // the last seq the summary covers
	AttrCompactionEvents         = attribute.Key("turnstile.compaction.events")          // events folded (checkpoints left out)
	AttrCompactionPolicy         = attribute.Key("turnstile.compaction.policy")          // turn.Runner.CompactionPolicy
	AttrCompactionPreviousPolicy = attribute.Key("turnstile.compaction.previous_policy") // the previous summary's, when it differs
	AttrCompactionSummaryTokens  = attribute.Key("turnstile.compaction.summary_tokens")  // the summary's tokens
)

// compactions are the compaction span's tracer and the compaction instruments, and the
// counter of the summaries' tokens (the Runner's).
type compactions struct {
	tracer  trace.Tracer
	count   metric.Int64Counter   // nil without a MeterProvider
	tokens  metric.Int64Histogram // nil without a MeterProvider
	counter turn.TokenCounter
}

// newCompactions makes the instruments of o; counter counts summaries, nil for
// turn.EstimateTokens.
func newCompactions(o Options, counter turn.TokenCounter) *compactions {
	if counter == nil {
		counter = turn.TokenCounterFunc(turn.EstimateTokens)
	}
	c := &compactions{tracer: o.Tracer(), counter: counter}
	if meter := o.Meter(); meter != nil {
		count, err := meter.Int64Counter(MetricCompactions, metric.WithUnit("{compaction}"),
			metric.WithDescription("Compactions whose summarizer ran, by the kind of their error (none: the summary was written)."))
		if err == nil {
			c.count = count
		}
		tokens, err := meter.Int64Histogram(MetricCompactionSummaryTokens, metric.WithUnit("{token}"),
			metric.WithDescription("Tokens of the summaries compactions wrote."))
		if err == nil {
			c.tokens = tokens
		}
	}
	return c
}

// summarizer is a turn.Summarizer with a compaction span and metrics around s.
type summarizer struct {
	s turn.Summarizer
	c *compactions
}

// Summarize implements turn.Summarizer: the span, then s's summary, then the measurements
// (the summary's tokens counted only when something records them).
func (s *summarizer) Summarize(ctx context.Context, in turn.SummaryInput) (string, error) {
	c := s.c
	var span trace.Span
	if c.tracer != nil {
		cp := in.Checkpoint
		attrs := []attribute.KeyValue{
			AttrConversationID.String(in.Request.ConversationID), AttrRequestID.String(in.Request.ID),
			AttrStep.Int(in.Step.Ordinal),
			AttrCompactionFrom.Int64(cp.From), AttrCompactionThrough.Int64(cp.Through),
			AttrCompactionEvents.Int(len(in.Events)), AttrCompactionPolicy.String(cp.Policy),
		}
		if cp.PreviousPolicy != "" {
			attrs = append(attrs, AttrCompactionPreviousPolicy.String(cp.PreviousPolicy))
		}
		ctx, span = c.tracer.Start(ctx, SpanCompaction, trace.WithAttributes(attrs...))
	}
	summary, err := s.s.Summarize(ctx, in)
	if err == nil && (span != nil || c.tokens != nil) {
		n := c.counter.CountTokens(summary)
		if span != nil {
			span.SetAttributes(AttrCompactionSummaryTokens.Int(n))
		}
		if c.tokens != nil {
			c.tokens.Record(ctx, int64(n))
		}
	}
	if c.count != nil {
		c.count.Add(ctx, 1, metric.WithAttributes(AttrKind.String(turn.Classify(err).String())))
	}
	end(span, err)
	return summary, err
}
