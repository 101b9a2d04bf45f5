// Package turnotel instruments a turn.Runner with OpenTelemetry: a span per store call, per
// model call and per compaction, and the model's duration and the compactions as metrics.
// It uses the OpenTelemetry API only (go.opentelemetry.io/otel/trace and /metric); the host
// brings the SDK and its exporters and hands their providers in Options.
//
// The consumer (consumer.Config.Telemetry) and the Temporal worker
// (workflow.WorkerOptions.Telemetry) apply it to the Runner they are given, so a host sets
// the providers once. The decorators wrap the Runner's ModelClient, session.Store and
// inbox.Inbox the way Watermill's decorators wrap a publisher: they keep the optional
// interfaces the Runner looks for (session.TxAppender, inbox.TxCompleter, CheckConcurrency,
// and on the model turn.Summarizer and turn.TokenCounter), so the joint append-and-complete
// transaction still happens and a compaction summarizes and counts as it would unwrapped.
//
// Spans, each a child of the span in the caller's context (the consumer's "process" span):
//
//	inbox.Begin, inbox.Complete, inbox.Fail, inbox.MarkDead   the dedup table
//	session.Get, session.Create, session.FindTurn              the session load
//	session.Append (or session.AppendTx with inbox.CompleteTx inside it)
//	model.Respond                                              the host's model call
//	compaction.Summarize                                       a compaction (turn.CompactStep)
//
// A compaction's span carries the conversation and request ids, the seqs it folds, the
// events folded, the policy and the summary's tokens, and is counted in MetricCompactions
// (with MetricCompactionSummaryTokens); a compaction the journal answers (the turn ran again
// after it) runs no summarizer and makes neither.
//
// A failed call records its error and sets the span's status to Error. Texts of requests
// and replies are never put on spans.
package turnotel

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
)

// ScopeName is the instrumentation scope of turnstile's tracers and meters.
const ScopeName = "github.com/turnstile-go/turnstile"

// Options say where telemetry goes. The zero value turns it off: no span, no measurement and
// no allocation for it on the hot path.
type Options struct {
	// TracerProvider, when set, records spans (the host's SDK provider, e.g.
	// go.opentelemetry.io/otel/sdk/trace.NewTracerProvider, or otel.GetTracerProvider()).
	TracerProvider trace.TracerProvider
	// MeterProvider, when set, records metrics.
	MeterProvider metric.MeterProvider
	// Propagator reads a trace context from record headers and writes it on results and dead
	// letters; default propagation.TraceContext{} (W3C traceparent and tracestate).
	Propagator propagation.TextMapPropagator
}

// Enabled reports whether o records anything.
func (o Options) Enabled() bool { return o.TracerProvider != nil || o.MeterProvider != nil }

// Tracer returns turnstile's tracer, nil when tracing is off.
func (o Options) Tracer() trace.Tracer {
	if o.TracerProvider == nil {
		return nil
	}
	return o.TracerProvider.Tracer(ScopeName)
}

// Meter returns turnstile's meter, nil when metrics are off.
func (o Options) Meter() metric.Meter {
	if o.MeterProvider == nil {
		return nil
	}
	return o.MeterProvider.Meter(ScopeName)
}

// TextMapPropagator returns o.Propagator, or the W3C trace context propagator.
func (o Options) TextMapPropagator() propagation.TextMapPropagator {
	if o.Propagator != nil {
		return o.Propagator
	}
	return propagation.TraceContext{}
}

// Runner returns a copy of r whose Model, Sessions and Inbox are instrumented (Model,
// Sessions, Inbox), or r itself when o is off or r is nil. r is not changed. Its
// compactions get a span and metrics (compaction.Summarize) whoever summarizes: the wrapped
// Model as Model says, or r.Summarizer, wrapped the same way, when r has one; the summary's
// tokens on them are counted with r's counter (r.Tokens, else the Model's).
func Runner(r *turn.Runner, o Options) *turn.Runner {
	if r == nil || !o.Enabled() {
		return r
	}
	cp := *r
	counter := r.Tokens
	if counter == nil && r.Model != nil {
		counter = turn.ModelTokenCounter(r.Model)
	}
	var c *compactions
	if r.Model != nil {
		im := newModel(r.Model, o, counter)
		cp.Model, c = im, im.compactions
	}
	if r.Summarizer != nil {
		if c == nil {
			c = newCompactions(o, counter)
		}
		cp.Summarizer = &summarizer{s: r.Summarizer, c: c}
	}
	cp.Sessions = Sessions(r.Sessions, o)
	cp.Inbox = Inbox(r.Inbox, o)
	return &cp
}

// start begins a span named name under ctx's span, or returns ctx and nil when tr is nil.
// The store and model spans carry no ids of their own: the parent span (the consumer's
// process span, the activity's turn span) has them, and attributes on every child would
// cost more than the rest of a fast turn's tracing.
func start(ctx context.Context, tr trace.Tracer, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if tr == nil {
		return ctx, nil
	}
	if len(attrs) == 0 {
		return tr.Start(ctx, name)
	}
	return tr.Start(ctx, name, trace.WithAttributes(attrs...))
}

// end records err on span and ends it; a nil span is ignored.
func end(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// Attribute keys on turnstile's spans and metrics, besides OpenTelemetry's messaging
// semantic conventions.
const (
	AttrRequestID      = attribute.Key("turnstile.request_id")
	AttrConversationID = attribute.Key("turnstile.conversation_id")
	AttrAttempt        = attribute.Key("turnstile.attempt")
	AttrOutcome        = attribute.Key("turnstile.outcome")
	AttrInboxStatus    = attribute.Key("turnstile.inbox.status")
	AttrKind           = attribute.Key("turnstile.error.kind")
	AttrDuplicate      = attribute.Key("turnstile.session.duplicate") // session.Append found the turn stored already
	AttrStep           = attribute.Key("turnstile.step")              // a journal step's ordinal in its turn (inbox.RecordStep)
	AttrStepName       = attribute.Key("turnstile.step.name")         // a journal step's name ("model", "tool:refund")
)

// Model returns m with a model.Respond span around each call and, with a MeterProvider, the
// call's duration in the histogram turnstile.model.duration (seconds) with the attribute
// turnstile.error.kind (turn.Kind's name, "none" on success). m itself when o is off.
//
// The wrapper is a turn.Summarizer and a turn.TokenCounter whatever m is, so that a
// turn.Runner finds on it what it would find on m (a Runner looks for both on its Model):
// CountTokens is turn.ModelTokenCounter(m)'s (m's own count, else turn.EstimateTokens) and
// Summarize is turn.ModelSummarizer(m)'s (m's own summarizer, else m asked as a turn), with
// a compaction.Summarize span and the compaction metrics around it (MetricCompactions). A
// Runner wrapped by Runner gets the same, and spans for its own Summarizer too.
func Model(m turn.ModelClient, o Options) turn.ModelClient {
	if m == nil || !o.Enabled() {
		return m
	}
	return newModel(m, o, nil)
}

// newModel wraps m; counter counts the summaries' tokens for the compaction span and
// metrics, nil for the wrapper's own count (m's, as a Runner counts by default).
func newModel(m turn.ModelClient, o Options, counter turn.TokenCounter) *model {
	im := &model{m: m, tracer: o.Tracer(), tokens: turn.ModelTokenCounter(m)}
	if counter == nil {
		counter = im.tokens
	}
	im.summarize = &summarizer{s: turn.ModelSummarizer(m), c: newCompactions(o, counter)}
	im.compactions = im.summarize.c
	if meter := o.Meter(); meter != nil {
		h, err := meter.Float64Histogram("turnstile.model.duration", metric.WithUnit("s"),
			metric.WithDescription("Duration of the host's model calls (turn.ModelClient.Respond)."))
		if err == nil {
			im.duration = h
		}
	}
	return im
}

type model struct {
	m           turn.ModelClient
	tracer      trace.Tracer
	duration    metric.Float64Histogram
	tokens      turn.TokenCounter // turn.ModelTokenCounter(m)
	summarize   *summarizer       // turn.ModelSummarizer(m), traced
	compactions *compactions
}

var (
	_ turn.Summarizer   = (*model)(nil)
	_ turn.TokenCounter = (*model)(nil)
)

// CountTokens implements turn.TokenCounter: the wrapped model's count, or
// turn.EstimateTokens when it has none, as a Runner counts with the unwrapped model. It
// makes no span: a Runner counts every event of a turn's view.
func (m *model) CountTokens(text string) int { return m.tokens.CountTokens(text) }

// Summarize implements turn.Summarizer: turn.ModelSummarizer of the wrapped model, in a
// compaction.Summarize span with the compaction metrics.
func (m *model) Summarize(ctx context.Context, in turn.SummaryInput) (string, error) {
	return m.summarize.Summarize(ctx, in)
}

func (m *model) Respond(ctx context.Context, in turn.Input) (turn.Output, error) {
	ctx, span := start(ctx, m.tracer, "model.Respond")
	began := time.Now()
	out, err := m.m.Respond(ctx, in)
	if m.duration != nil {
		m.duration.Record(ctx, time.Since(began).Seconds(), metric.WithAttributes(AttrKind.String(turn.Classify(err).String())))
	}
	end(span, err)
	return out, err
}

// Sessions returns s with a span around each call; it implements session.TxAppender and
// session.Retention when s does (and only then). s itself when tracing is off.
func Sessions(s session.Store, o Options) session.Store {
	tr := o.Tracer()
	if s == nil || tr == nil {
		return s
	}
	base := &sessions{Store: s, s: s, tracer: tr}
	tx, isTx := s.(session.TxAppender)
	r, isRetention := s.(session.Retention)
	switch {
	case isTx && isRetention:
		return &txRetentionSessions{&txSessions{sessions: base, tx: tx}, retention{r, tr}}
	case isTx:
		return &txSessions{sessions: base, tx: tx}
	case isRetention:
		return &retentionSessions{base, retention{r, tr}}
	}
	return base
}

// sessions embeds the Store, so a method it gains later passes through, untraced, until a
// span is added here.
type sessions struct {
	session.Store
	s      session.Store
	tracer trace.Tracer
}

// Unwrap returns the wrapped Store, for a caller that needs an optional interface the
// wrapper does not trace (turn.Retention.DeleteUser's session.UserLister).
func (s *sessions) Unwrap() session.Store { return s.s }

func (s *sessions) Get(ctx context.Context, key session.Key, recent int) (session.Session, error) {
	ctx, span := start(ctx, s.tracer, "session.Get")
	v, err := s.s.Get(ctx, key, recent)
	end(span, ignoreNotFound(err))
	return v, err
}

func (s *sessions) Create(ctx context.Context, key session.Key, state json.RawMessage) (session.Session, error) {
	ctx, span := start(ctx, s.tracer, "session.Create")
	v, err := s.s.Create(ctx, key, state)
	end(span, err)
	return v, err
}

func (s *sessions) Append(ctx context.Context, key session.Key, expectedVersion int64, t session.Turn) (session.Appended, error) {
	ctx, span := start(ctx, s.tracer, "session.Append")
	v, err := s.s.Append(ctx, key, expectedVersion, t)
	if span != nil && err == nil && v.Duplicate {
		span.SetAttributes(AttrDuplicate.Bool(true))
	}
	end(span, err)
	return v, err
}

func (s *sessions) FindTurn(ctx context.Context, key session.Key, requestID string) ([]session.Event, error) {
	ctx, span := start(ctx, s.tracer, "session.FindTurn")
	v, err := s.s.FindTurn(ctx, key, requestID)
	end(span, ignoreNotFound(err))
	return v, err
}

func (s *sessions) Delete(ctx context.Context, key session.Key) error {
	ctx, span := start(ctx, s.tracer, "session.Delete", AttrConversationID.String(key.Conversation))
	err := s.s.Delete(ctx, key)
	end(span, err)
	return err
}

// retention traces the bulk deletes of a session.Retention (the wrappers of Sessions over a
// store that has them).
type retention struct {
	r      session.Retention
	tracer trace.Tracer
}

type (
	retentionSessions struct {
		*sessions
		retention
	}
	txRetentionSessions struct {
		*txSessions
		retention
	}
)

// DeleteUser implements session.Retention with a span around the call.
func (r retention) DeleteUser(ctx context.Context, app, user string) (int64, error) {
	ctx, span := start(ctx, r.tracer, "session.DeleteUser")
	n, err := r.r.DeleteUser(ctx, app, user)
	end(span, err)
	return n, err
}

// DeleteIdle implements session.Retention with a span around the call.
func (r retention) DeleteIdle(ctx context.Context, app string, before time.Time) (int64, error) {
	ctx, span := start(ctx, r.tracer, "session.DeleteIdle")
	n, err := r.r.DeleteIdle(ctx, app, before)
	end(span, err)
	return n, err
}

// CheckConcurrency passes the Runner's question on to the store (turn.Runner.CheckConcurrency).
func (s *sessions) CheckConcurrency(n int) error { return checkConcurrency(s.s, n) }

// Location returns the wrapped store's Location, "" when it has none.
func (s *sessions) Location(ctx context.Context) (string, error) { return location(ctx, s.s) }

// ignoreNotFound keeps an expected miss (a new conversation, a turn not stored yet) from
// marking its span as failed.
func ignoreNotFound(err error) error {
	if errors.Is(err, session.ErrNotFound) || errors.Is(err, inbox.ErrNotFound) {
		return nil
	}
	return err
}

// location is v's Location (session/sqlsession's and inbox/sqlinbox's name their tables),
// "" when v has none. A replay (consumer.Replay) compares it with production's stores', so a
// store wrapped here is still recognised.
func location(ctx context.Context, v any) (string, error) {
	if l, ok := v.(interface {
		Location(ctx context.Context) (string, error)
	}); ok {
		return l.Location(ctx)
	}
	return "", nil
}

func checkConcurrency(v any, n int) error {
	if c, ok := v.(interface{ CheckConcurrency(n int) error }); ok {
		return c.CheckConcurrency(n)
	}
	return nil
}
