package turnotel_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turn/turnotel"
)

// agentModel is a model that summarizes and counts tokens itself, as turn/agent's Agent and
// both shipped clients do. Its count (one token a word) differs from turn.EstimateTokens, so
// a test sees whose count the Runner used. It fails its next answer to a turn (not to the
// Runner asking it to summarize) when failFirst is set.
type agentModel struct {
	mu        sync.Mutex
	responds  []string // the request texts Respond was given
	summaries int
	failFirst bool
}

func (m *agentModel) Respond(_ context.Context, in turn.Input) (turn.Output, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.responds = append(m.responds, in.Request.Text)
	if m.failFirst && !strings.HasPrefix(in.Request.Text, turn.DefaultSummaryInstruction) { // not asked to summarize
		m.failFirst = false
		return turn.Output{}, errors.New("model: HTTP 500")
	}
	return turn.Output{Events: []session.Event{{Author: "assistant", Text: "answer to " + in.Request.Text}}}, nil
}

func (m *agentModel) Summarize(_ context.Context, in turn.SummaryInput) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.summaries++
	return fmt.Sprintf("summary of %d events in three words", len(in.Events)), nil
}

func (m *agentModel) CountTokens(text string) int { return len(strings.Fields(text)) }

// plainModel is a model that is neither a Summarizer nor a TokenCounter: the Runner asks it
// to summarize as a turn of its own.
type plainModel struct{ a agentModel }

func (m *plainModel) Respond(ctx context.Context, in turn.Input) (turn.Output, error) {
	return m.a.Respond(ctx, in)
}

// telemetry is an SDK tracer provider with an in-memory exporter and a meter provider with a
// manual reader.
type telemetry struct {
	spans  *tracetest.InMemoryExporter
	reader *sdkmetric.ManualReader
	opts   turnotel.Options
}

func newTelemetry() *telemetry {
	t := &telemetry{spans: tracetest.NewInMemoryExporter(), reader: sdkmetric.NewManualReader()}
	t.opts = turnotel.Options{
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSyncer(t.spans)),
		MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(t.reader)),
	}
	return t
}

// compactionSpans returns the compaction spans ended so far.
func (tel *telemetry) compactionSpans() []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range tel.spans.GetSpans() {
		if s.Name == turnotel.SpanCompaction {
			out = append(out, s)
		}
	}
	return out
}

// metric returns the data of the named metric, nil when nothing was recorded.
func (tel *telemetry) metric(t *testing.T, name string) metricdata.Aggregation {
	var rm metricdata.ResourceMetrics
	require.NoError(t, tel.reader.Collect(context.Background(), &rm))
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m.Data
			}
		}
	}
	return nil
}

func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	out := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		out[kv.Key] = kv.Value
	}
	return out
}

// Each compaction of a Runner wrapped for telemetry has a compaction.Summarize span with its
// range, events, policy and summary tokens (the same figures its checkpoint stores) and is
// counted in the compaction metrics, whoever summarizes: a Model that summarizes and counts
// itself (the wrapper forwards both, so the Runner still uses them), a plain Model (asked as
// a turn, as unwrapped), the Runner's own Summarizer, the Runner's own TokenCounter. A
// compaction the journal answers (the turn's model failed after it, and the turn ran again)
// runs no summarizer and makes neither span nor count.
func TestCompactionSpanAndMetrics(t *testing.T) {
	t.Parallel()
	words := turn.TokenCounterFunc(func(s string) int { return len(strings.Fields(s)) })
	for _, tc := range []struct {
		name string
		// model and the Runner's own Summarizer and Tokens.
		model      func() turn.ModelClient
		summarizer turn.Summarizer
		tokens     turn.TokenCounter
		// counter is the count the Runner must have used; askedToSummarize whether the
		// model's Respond wrote the summary.
		counter          turn.TokenCounter
		askedToSummarize bool
	}{
		{name: "model summarizes and counts", model: func() turn.ModelClient { return &agentModel{} }, counter: words},
		{name: "plain model", model: func() turn.ModelClient { return &plainModel{} },
			counter: turn.TokenCounterFunc(turn.EstimateTokens), askedToSummarize: true},
		{name: "runner's summarizer and counter", model: func() turn.ModelClient { return &plainModel{} },
			summarizer: &agentModel{}, tokens: words, counter: words},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			tel := newTelemetry()
			m := tc.model()
			sessions := session.NewMemoryStore()
			r := &turn.Runner{Model: m, Sessions: sessions, Inbox: inbox.NewMemoryInbox(), HistoryLimit: 2,
				Summarizer: tc.summarizer, Tokens: tc.tokens}
			traced := turnotel.Runner(r, tel.opts)
			require.Equal(t, tc.summarizer, r.Summarizer, "the Runner given is not changed")

			// Two turns, then a third whose four uncovered events are over HistoryLimit: it
			// compacts, its model fails once after the compaction, and it runs again.
			var reqs []turn.Request
			for i := range 3 {
				reqs = append(reqs, turn.Request{Schema: turn.SchemaVersion, ID: uuid.NewString(), ConversationID: "c-1", UserID: "u-1", Text: fmt.Sprintf("message %d", i+1)})
			}
			for _, req := range reqs[:2] {
				_, err := traced.Run(ctx, req)
				require.NoError(t, err)
			}
			require.Empty(t, tel.compactionSpans(), "no compaction in two turns")
			setFail(m)
			_, err := traced.Run(ctx, reqs[2])
			require.Error(t, err, "the model fails after the compaction")
			_, err = traced.Run(ctx, reqs[2])
			require.NoError(t, err)

			sess, err := sessions.Get(ctx, r.Key(reqs[2]), 100)
			require.NoError(t, err)
			cp, idx, err := session.LatestCheckpoint(sess.Events)
			require.NoError(t, err)
			require.Positive(t, idx, "the third turn stored a checkpoint")
			require.Equal(t, reqs[2].ID, sess.Events[idx].RequestID)
			require.EqualValues(t, 1, cp.From)
			require.EqualValues(t, 4, cp.Through)
			require.Equal(t, tc.counter.CountTokens(cp.Summary), cp.Tokens, "the Runner counted with the model's or its own counter")
			if tc.askedToSummarize {
				require.Contains(t, cp.Summary, "answer to "+turn.DefaultSummaryInstruction[:20], "the plain model was asked as a turn")
			} else {
				require.Contains(t, cp.Summary, "summary of 4 events")
			}

			spans := tel.compactionSpans()
			require.Len(t, spans, 1, "one compaction: the second run took it from the journal")
			a := attrs(spans[0])
			require.Equal(t, "c-1", a[turnotel.AttrConversationID].AsString())
			require.Equal(t, reqs[2].ID, a[turnotel.AttrRequestID].AsString())
			require.EqualValues(t, 1, a[turnotel.AttrStep].AsInt64(), "the compaction is the turn's first step")
			require.Equal(t, cp.From, a[turnotel.AttrCompactionFrom].AsInt64())
			require.Equal(t, cp.Through, a[turnotel.AttrCompactionThrough].AsInt64())
			require.EqualValues(t, 4, a[turnotel.AttrCompactionEvents].AsInt64())
			require.Equal(t, r.CompactionPolicy(), a[turnotel.AttrCompactionPolicy].AsString())
			require.Equal(t, cp.Policy, a[turnotel.AttrCompactionPolicy].AsString())
			require.EqualValues(t, cp.Tokens, a[turnotel.AttrCompactionSummaryTokens].AsInt64())
			require.NotContains(t, a, turnotel.AttrCompactionPreviousPolicy)

			count, ok := tel.metric(t, turnotel.MetricCompactions).(metricdata.Sum[int64])
			require.True(t, ok, "the compaction counter")
			require.Len(t, count.DataPoints, 1)
			require.EqualValues(t, 1, count.DataPoints[0].Value)
			kind, _ := count.DataPoints[0].Attributes.Value(turnotel.AttrKind)
			require.Equal(t, "none", kind.AsString())
			hist, ok := tel.metric(t, turnotel.MetricCompactionSummaryTokens).(metricdata.Histogram[int64])
			require.True(t, ok, "the summary tokens' histogram")
			require.Len(t, hist.DataPoints, 1)
			require.EqualValues(t, 1, hist.DataPoints[0].Count)
			require.EqualValues(t, cp.Tokens, hist.DataPoints[0].Sum)
		})
	}
}

// setFail makes the model's next answer fail.
func setFail(m turn.ModelClient) {
	switch m := m.(type) {
	case *agentModel:
		m.mu.Lock()
		m.failFirst = true
		m.mu.Unlock()
	case *plainModel:
		setFail(&m.a)
	}
}

// A failed summary is a failed compaction: its span records the error and the counter counts
// it under its kind; nothing goes to the tokens' histogram (and the turn, whose input still
// fits, goes on without it).
func TestCompactionSpanOfAFailedSummary(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tel := newTelemetry()
	fail := turn.SummarizerFunc(func(context.Context, turn.SummaryInput) (string, error) {
		return "", turn.RetryAfter(0, errors.New("HTTP 429"))
	})
	r := &turn.Runner{Model: &agentModel{}, Sessions: session.NewMemoryStore(), Inbox: inbox.NewMemoryInbox(), HistoryLimit: 1, Summarizer: fail}
	traced := turnotel.Runner(r, tel.opts)
	for i := range 2 {
		_, err := traced.Run(ctx, turn.Request{Schema: turn.SchemaVersion, ID: uuid.NewString(), ConversationID: "c-1", UserID: "u-1", Text: "hi"})
		if i == 0 {
			require.NoError(t, err)
		} else {
			require.NoError(t, err, "the second turn's compaction fails; its input still fits the budget, so the turn goes on without it")
		}
	}
	spans := tel.compactionSpans()
	require.Len(t, spans, 1)
	require.Equal(t, "Error", spans[0].Status.Code.String())
	require.NotContains(t, attrs(spans[0]), turnotel.AttrCompactionSummaryTokens)
	count := tel.metric(t, turnotel.MetricCompactions).(metricdata.Sum[int64])
	require.Len(t, count.DataPoints, 1)
	kind, _ := count.DataPoints[0].Attributes.Value(turnotel.AttrKind)
	require.Equal(t, turn.KindRateLimited.String(), kind.AsString())
	require.Nil(t, tel.metric(t, turnotel.MetricCompactionSummaryTokens), "no summary, no tokens")
}

// The Model wrapper is a turn.Summarizer and a turn.TokenCounter whatever it wraps, and
// answers as the Runner would with the unwrapped model: the model's own count and summary,
// else turn.EstimateTokens and the model asked as a turn.
func TestWrappedModelSummarizesAndCountsAsUnwrapped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o := turnotel.Options{TracerProvider: sdktrace.NewTracerProvider()}
	in := turn.SummaryInput{Request: turn.Request{ID: "r-1", ConversationID: "c-1", UserID: "u-1"}, Instruction: "summarize",
		Events: []session.Event{{Seq: 1, Author: "user", Text: "hello there"}}, MaxTokens: 100}
	for name, m := range map[string]turn.ModelClient{"agent": &agentModel{}, "plain": &plainModel{}} {
		w := turnotel.Model(m, o)
		require.NotSame(t, m, w, name)
		s, ok := w.(turn.Summarizer)
		require.True(t, ok, "%s: the wrapper summarizes", name)
		c, ok := w.(turn.TokenCounter)
		require.True(t, ok, "%s: the wrapper counts", name)
		const text = "four words, twenty-six bytes"
		require.Equal(t, turn.ModelTokenCounter(m).CountTokens(text), c.CountTokens(text), name)
		got, err := s.Summarize(ctx, in)
		require.NoError(t, err, name)
		want, err := turn.ModelSummarizer(m).Summarize(ctx, in)
		require.NoError(t, err, name)
		require.Equal(t, want, got, name)
	}
	require.Equal(t, 4, turnotel.Model(&agentModel{}, o).(turn.TokenCounter).CountTokens("one two three four"))
	require.Equal(t, turn.EstimateTokens("one two three four"), turnotel.Model(&plainModel{}, o).(turn.TokenCounter).CountTokens("one two three four"))
	m := &agentModel{}
	require.Same(t, m, turnotel.Model(m, turnotel.Options{}), "telemetry off: the model itself")
}
