package workflow

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/deadletter"
	"github.com/turnstile-go/turnstile/internal/record"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turntest"
)

// publishWait bounds a read of what a publisher wrote: a stuck test, never an assertion about
// speed.
const publishWait = time.Minute

// A dead letter the topic refuses is shrunk as the consumer's is (record.Shrink): without its
// value, then the propagated headers, then its key, stopping at the first that is accepted;
// it stays on the request's partition (co-partitioned topics), and deadletter.Parse reads it
// with no turnstile header listed as the producer's. No Temporal: the publisher alone, on an
// in-process broker, with a producer limit of 4 KiB (sarama's own check refuses larger).
func TestKafkaPublisherShrinksARefusedDeadLetter(t *testing.T) {
	t.Parallel()
	cluster := turntest.NewCluster(t, turntest.Options{})
	requests := cluster.CreateTopic(t, "requests", 3)
	big := strings.Repeat("x", 8<<10)
	for _, tc := range []struct {
		name    string
		conv    string
		text    string
		headers map[string]string
		dropped []record.Part
	}{
		{"whole", "c-small", "hi", map[string]string{"tenant": "acme"}, nil},
		{"value", "c-value", big, map[string]string{"tenant": "acme"}, []record.Part{record.PartValue}},
		{"value and headers", "c-headers", big, map[string]string{"tenant": "acme", "pasted-log": big},
			[]record.Part{record.PartValue, record.PartHeaders}},
		// The key and the conversation-id header fit one at a time, not together.
		{"value, headers and key", strings.Repeat("k", 2500), "hi", map[string]string{"tenant": "acme"},
			[]record.Part{record.PartValue, record.PartHeaders, record.PartKey}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dlq := cluster.CreateTopic(t, "dlq", 3)
			sc := cluster.Config()
			sc.Producer.MaxMessageBytes = 4 << 10
			pub, err := NewKafkaPublisher(cluster.Brokers(), sc, cluster.CreateTopic(t, "results", 3), dlq)
			require.NoError(t, err)
			t.Cleanup(func() { _ = pub.Close() })
			req := request(tc.conv, 1, tc.text)
			env := Envelope{Request: req, Source: turn.Source{Topic: requests, Partition: 2, Offset: 41}, Headers: tc.headers}
			dl := DeadLetter{Reason: "why", Attempts: 3, Err: errors.New("boom"), Kind: turn.KindAttempt}
			require.NoError(t, pub.PublishDeadLetter(context.Background(), env, dl))

			got := cluster.ReadAll(t, dlq, 1, publishWait)
			require.Len(t, got, 1)
			require.Equal(t, int32(2), got[0].Partition, "the request's partition")
			l := deadletter.Parse(got[0])
			for _, h := range l.Headers {
				require.False(t, record.IsDeadLetterHeader(string(h.Key)), "%s listed as the producer's", h.Key)
			}
			require.Equal(t, [6]any{req.ID, req.ConversationID, "why", "boom", 3, turn.KindAttempt},
				[6]any{l.RequestID, l.ConversationID, l.Reason, l.Error, l.Attempts, l.Kind})
			require.Equal(t, env.Source, l.Source)
			has := func(p record.Part) bool { return len(tc.dropped) > 0 && tc.dropped[len(tc.dropped)-1] >= p }
			require.Equal(t, has(record.PartValue), l.ValueDropped != "", l.ValueDropped)
			require.Equal(t, has(record.PartHeaders), l.HeadersDropped != "", l.HeadersDropped)
			require.Equal(t, has(record.PartKey), l.KeyDropped != "", l.KeyDropped)
			if has(record.PartValue) {
				require.Empty(t, got[0].Value)
				require.Contains(t, l.ValueDropped, "refused")
			} else {
				decoded, err := turn.Decode(got[0].Value)
				require.NoError(t, err)
				require.Equal(t, req.ID, decoded.ID, "the value is the request's envelope")
			}
			if has(record.PartHeaders) {
				require.Empty(t, l.Headers)
			} else {
				require.Equal(t, []sarama.RecordHeader{record.Header("tenant", "acme")}, l.Headers)
			}
			if has(record.PartKey) {
				require.Empty(t, got[0].Key)
				require.Equal(t, "2500 bytes", l.KeyDropped)
			} else {
				require.Equal(t, tc.conv, string(got[0].Key))
			}
		})
	}
	t.Run("not even turnstile's headers fit", func(t *testing.T) {
		t.Parallel()
		sc := cluster.Config()
		sc.Producer.MaxMessageBytes = 4 << 10
		pub, err := NewKafkaPublisher(cluster.Brokers(), sc, cluster.CreateTopic(t, "results", 1), cluster.CreateTopic(t, "dlq", 1))
		require.NoError(t, err)
		t.Cleanup(func() { _ = pub.Close() })
		env := Envelope{Request: request("c", 1, "hi"), Source: turn.Source{Topic: requests}}
		err = pub.PublishDeadLetter(context.Background(), env, DeadLetter{Reason: big, Err: errors.New(big)})
		require.ErrorIs(t, err, ErrRefused)
	})
}

// A result carries the record format's headers (record.ResultHeaders) and the forwarded ones,
// on the request's partition.
func TestKafkaPublisherResultHeaders(t *testing.T) {
	t.Parallel()
	cluster := turntest.NewCluster(t, turntest.Options{})
	requests, results := cluster.CreateTopic(t, "requests", 3), cluster.CreateTopic(t, "results", 3)
	pub, err := NewKafkaPublisher(cluster.Brokers(), cluster.Config(), results, cluster.CreateTopic(t, "dlq", 3))
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	pub.ForwardHeaders = []string{"tenant"}
	req := request("c-1", 1, "hi")
	env := Envelope{Request: req, Source: turn.Source{Topic: requests, Partition: 1}, Headers: map[string]string{"tenant": "acme", "other": "x"}}
	require.NoError(t, pub.PublishResult(context.Background(), env, turn.Result{RequestID: req.ID, ConversationID: req.ConversationID, Attempt: 2}))
	got := cluster.ReadAll(t, results, 1, publishWait)
	require.Len(t, got, 1)
	require.Equal(t, int32(1), got[0].Partition)
	want := append(record.ResultHeaders(&req, 2, 1), record.Header("tenant", "acme"))
	hs := make([]sarama.RecordHeader, len(got[0].Headers))
	for i, h := range got[0].Headers {
		hs[i] = *h
	}
	require.Equal(t, want, hs)
}
