package workflow

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/deadletter"
	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/internal/record"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turn/turnotel"
	"github.com/turnstile-go/turnstile/turntest"
)

// kafkaClient returns a sarama client on the stack's cluster, closed when the test ends.
func (s *stack) kafkaClient() sarama.Client {
	s.t.Helper()
	c, err := sarama.NewClient(s.cluster.Brokers(), s.cluster.Config())
	require.NoError(s.t, err)
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

// resultsOf counts the result records per request id.
func (s *stack) resultsOf() map[string]int {
	s.t.Helper()
	got := map[string]int{}
	n := s.cluster.RecordCount(s.t, s.results)
	for _, m := range s.cluster.ReadAll(s.t, s.results, int(n), wait) {
		got[turntest.HeaderMap(m)[consumer.HeaderRequestID]]++
	}
	return got
}

// The acceptance line, re-drive in Temporal mode: a request dead-lettered by its workflow (it
// came from the requests topic through the consumer and the bridge) and one dead-lettered from
// Bridge.Submit, re-driven after the fix: one new turn each, one result each, inbox entries
// done; the dry run says what the real run does (same actions, same partitions, the Submit's
// on its key's partition; without a requests topic both refuse the Submit's); a second
// re-drive is a no-op.
func TestDevServerRedriveBridgeAndSubmit(t *testing.T) {
	t.Parallel()
	s := newStack(t, 3)
	var broken atomic.Bool
	broken.Store(true)
	s.model.errFunc = func(in turn.Input) error {
		if strings.Contains(in.Request.Text, "bug 42") && broken.Load() {
			return turn.Permanent(errors.New("bug 42"))
		}
		return nil
	}
	s.startWorker(nil)
	b := s.bridge(BridgeOptions{})
	s.startMember(b, nil)

	fromTopic, submitConv := s.cluster.Unique("topic"), s.cluster.Unique("submit")
	bad, next := request(fromTopic, 1, "hits bug 42"), request(fromTopic, 2, "fine")
	s.produce(bad, nil)
	s.produce(next, nil)
	viaSubmit := request(submitConv, 0, "submit hits bug 42")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	_, err := b.Submit(ctx, viaSubmit)
	require.Equal(t, turn.KindPermanent, turn.Classify(err), "the submit is dead-lettered: %v", err)
	s.waitApplied(b, fromTopic, 2)

	client := s.kafkaClient()
	var letters []deadletter.Letter
	require.Eventually(t, func() bool {
		letters, err = deadletter.Read(ctx, client, s.dlq, deadletter.Filter{Reason: "bug 42"})
		return err == nil && len(letters) == 2
	}, wait, 100*time.Millisecond)
	byID := map[string]deadletter.Letter{}
	for _, l := range letters {
		byID[l.RequestID] = l
	}
	fromSubmit, fromBridge := byID[viaSubmit.ID], byID[bad.ID]
	require.Equal(t, deadletter.OriginSubmit, fromSubmit.Origin, "a Submit's dead letter says it came from Submit")
	require.Equal(t, b.WorkflowID(submitConv), fromSubmit.WorkflowID, "and which workflow")
	require.Equal(t, submitConv, fromSubmit.ConversationID)
	require.Empty(t, fromBridge.Origin)
	require.Equal(t, b.WorkflowID(fromTopic), fromBridge.WorkflowID)
	require.Equal(t, s.requests, fromBridge.Source.Topic)
	require.Equal(t, int64(1), fromBridge.Sequence)

	broken.Store(false) // the fix
	opts := deadletter.Options{Client: client, Inbox: s.inbox, Note: "fixed", Logger: discardLogger()}

	// Without a requests topic the Submit's cannot go anywhere: the dry run and the real run say so alike.
	dry := opts
	dry.DryRun = true
	dryNoTopic, err := deadletter.Redrive(ctx, dry, []deadletter.Letter{fromSubmit})
	require.NoError(t, err)
	realNoTopic, err := deadletter.Redrive(ctx, opts, []deadletter.Letter{fromSubmit})
	require.NoError(t, err)
	require.Error(t, dryNoTopic[0].Err)
	require.Equal(t, dryNoTopic[0].Err, realNoTopic[0].Err)
	require.Contains(t, realNoTopic[0].Err.Error(), "Bridge.Submit")

	opts.RequestsTopic, dry.RequestsTopic = s.requests, s.requests
	planned, err := deadletter.Redrive(ctx, dry, letters)
	require.NoError(t, err)
	done, err := deadletter.Redrive(ctx, opts, letters)
	require.NoError(t, err)
	keyPartition, err := sarama.NewMurmur2Partitioner(s.requests).Partition(&sarama.ProducerMessage{Key: sarama.StringEncoder(submitConv)}, 3)
	require.NoError(t, err)
	for i := range letters {
		require.NoError(t, planned[i].Err)
		require.NoError(t, done[i].Err)
		require.Equal(t, deadletter.Redriven, planned[i].Action, "the dry run")
		require.Equal(t, planned[i].Action, done[i].Action, "the dry run and the real run agree")
		require.Equal(t, planned[i].Topic, done[i].Topic)
		require.Equal(t, planned[i].Partition, done[i].Partition)
		want := fromBridge.Source.Partition
		if letters[i].RequestID == viaSubmit.ID {
			want = keyPartition
		}
		require.Equal(t, want, done[i].Partition, "request %s published on its partition", letters[i].RequestID)
	}

	for _, req := range []turn.Request{bad, viaSubmit} {
		require.Eventually(t, func() bool {
			e, err := s.inbox.Get(ctx, s.runner(nil).InboxKey(req))
			return err == nil && e.Status == inbox.StatusDone
		}, wait, 100*time.Millisecond, "the inbox entry of %s ends done", req.ID)
	}
	s.committedAll(3)
	results := s.resultsOf()
	require.Equal(t, 1, results[bad.ID], "one result for the re-driven request")
	require.Equal(t, 1, results[viaSubmit.ID], "one result for the re-driven submit")
	require.Equal(t, 1, results[next.ID])
	calls := map[string]int{}
	for _, id := range s.model.ids() {
		calls[id]++
	}
	require.Equal(t, 2, calls[bad.ID], "one new turn after the fix")
	require.Equal(t, 2, calls[viaSubmit.ID], "one new turn after the fix")

	// A second re-drive is a no-op, dry or not.
	published := s.cluster.RecordCount(t, s.requests)
	for _, o := range []deadletter.Options{dry, opts} {
		again, err := deadletter.Redrive(ctx, o, letters)
		require.NoError(t, err)
		for _, a := range again {
			require.NoError(t, a.Err)
			require.Equal(t, deadletter.SkippedDone, a.Action)
		}
	}
	require.Equal(t, published, s.cluster.RecordCount(t, s.requests), "the second re-drive published nothing")
	st, err := s.status(ctx, b, fromTopic)
	require.NoError(t, err)
	require.Equal(t, int64(2), st.LastAppliedSequence)
	require.Zero(t, st.Pending)
}

// gaugeValues reads the held gauges from reader.
func gaugeValues(t *testing.T, reader *sdkmetric.ManualReader) map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	out := map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					out[m.Name] = float64(p.Value)
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					out[m.Name] = p.Value
				}
			}
		}
	}
	return out
}

// gapLettersOn returns the gap dead letters of conversation conv on the stack's dead-letter topic.
func (s *stack) gapLettersOn(client sarama.Client, conv string) []deadletter.Letter {
	s.t.Helper()
	letters, err := deadletter.Read(context.Background(), client, s.dlq, deadletter.Filter{Reason: GapReason})
	require.NoError(s.t, err)
	var out []deadletter.Letter
	for _, l := range letters {
		if l.ConversationID == conv && l.Origin == deadletter.OriginGap {
			out = append(out, l)
		}
	}
	return out
}

// The acceptance line, stuck conversations: sequences 1 and 3 sent, 2 never. The held
// conversation shows in the gauges (WatchHeld) and in Held (the CLI's view) with 2 missing;
// Release skips 2 (a dead letter with reason "gap" naming sequence 2, which cannot be
// re-driven) and 3 applies after 1. With Config.GapTimeout another conversation is released by
// itself once held that long.
func TestDevServerGapVisibleAndReleased(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	s.startWorker(nil)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	b := s.bridge(BridgeOptions{Config: Config{SearchAttributes: true}, Telemetry: turnotel.Options{MeterProvider: mp}})
	timed := s.bridge(BridgeOptions{Config: Config{SearchAttributes: true, GapTimeout: 2 * time.Second}})
	ctx, cancel := context.WithCancel(context.Background())
	watched := make(chan error, 1)
	go func() { watched <- b.WatchHeld(ctx, 200*time.Millisecond) }()
	t.Cleanup(func() { cancel(); require.ErrorIs(t, <-watched, context.Canceled) })

	conv := s.cluster.Unique("held")
	for _, seq := range []int64{1, 3} {
		_, err := b.Handle(ctx, request(conv, seq, "message"))
		require.NoError(t, err)
	}
	var held []HeldConversation
	require.Eventually(t, func() bool {
		var err error
		held, err = b.Held(ctx)
		return err == nil && len(held) == 1
	}, wait, 100*time.Millisecond, "the held conversation is listed")
	require.Equal(t, conv, held[0].ConversationID)
	require.Equal(t, b.WorkflowID(conv), held[0].WorkflowID)
	require.Equal(t, []int64{2}, held[0].Missing)
	require.Equal(t, []int64{3}, held[0].PendingSequences)
	require.Equal(t, int64(1), held[0].LastAppliedSequence)
	require.False(t, held[0].HeldSince.IsZero())
	require.Eventually(t, func() bool {
		g := gaugeValues(t, reader)
		return g[MetricHeldRequests] == 1 && g[MetricHeldConversations] == 1 && g[MetricHeldOldestAge] > 0
	}, wait, 100*time.Millisecond, "the gauges show one request held")

	out, err := b.Release(ctx, conv, "test: sequence 2 is lost")
	require.NoError(t, err)
	require.Equal(t, Released{Skipped: []int64{2}, Count: 1, LastAppliedSequence: 3}, out)
	st, err := s.status(ctx, b, conv)
	require.NoError(t, err)
	require.False(t, st.Held)
	require.Equal(t, int64(1), st.Skipped)
	_, err = b.Release(ctx, conv, "again")
	require.ErrorContains(t, err, "not held at a gap")

	client := s.kafkaClient()
	var gaps []deadletter.Letter
	require.Eventually(t, func() bool { gaps = s.gapLettersOn(client, conv); return len(gaps) == 1 }, wait, 100*time.Millisecond)
	require.Equal(t, int64(2), gaps[0].Sequence, "the skipped sequence is a dead letter with reason gap")
	require.Equal(t, b.WorkflowID(conv), gaps[0].WorkflowID)
	require.Equal(t, record.GapRequestID(b.WorkflowID(conv), 2), gaps[0].RequestID, "the gap's identity")
	require.Contains(t, gaps[0].Error, "test: sequence 2 is lost")
	require.Nil(t, gaps[0].Value)
	refused, err := deadletter.Redrive(ctx, deadletter.Options{Client: client, Inbox: s.inbox, RequestsTopic: s.requests, DryRun: true}, gaps)
	require.NoError(t, err)
	require.ErrorContains(t, refused[0].Err, "no request to re-drive")
	require.Eventually(t, func() bool {
		g := gaugeValues(t, reader)
		return g[MetricHeldRequests] == 0 && g[MetricHeldConversations] == 0
	}, wait, 100*time.Millisecond, "the gauges show nothing held once released")

	// The release option: held, then released after Config.GapTimeout without a command.
	other := s.cluster.Unique("timed")
	for _, seq := range []int64{1, 3, 4} {
		_, err := timed.Handle(ctx, request(other, seq, "message"))
		require.NoError(t, err)
	}
	st = s.waitApplied(timed, other, 3)
	require.Equal(t, int64(4), st.LastAppliedSequence)
	require.Equal(t, int64(1), st.Skipped)
	require.Eventually(t, func() bool { return len(s.gapLettersOn(client, other)) == 1 }, wait, 100*time.Millisecond)
	require.Equal(t, int64(2), s.gapLettersOn(client, other)[0].Sequence)
	require.Contains(t, s.gapLettersOn(client, other)[0].Error, "Config.GapTimeout")

	var seqs []int64
	for _, in := range callsOf(s.model, func(in turn.Input) turn.Request { return in.Request }) {
		if in.ConversationID == other {
			seqs = append(seqs, in.Sequence)
		}
	}
	require.Equal(t, []int64{1, 3, 4}, seqs, "the held requests apply in order")
	seqs = nil
	for _, in := range callsOf(s.model, func(in turn.Input) turn.Request { return in.Request }) {
		if in.ConversationID == conv {
			seqs = append(seqs, in.Sequence)
		}
	}
	require.Equal(t, []int64{1, 3}, seqs, "the held request applies after the release")
}
