package deadletter_test

import (
	"testing"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/deadletter"
	"github.com/turnstile-go/turnstile/internal/record"
	"github.com/turnstile-go/turnstile/turn"
)

func hdr(k, v string) *sarama.RecordHeader {
	return &sarama.RecordHeader{Key: []byte(k), Value: []byte(v)}
}

// Parse reads every turn.Kind back from the kind header (the enumeration walked, so that a
// kind added to turn reaches the CLI's label), and every header the consumer writes on a dead
// letter is parsed, never listed as the producer's.
func TestParseReadsEveryKindAndHeader(t *testing.T) {
	t.Parallel()
	for _, k := range turn.Kinds() {
		l := deadletter.Parse(&sarama.ConsumerMessage{Headers: []*sarama.RecordHeader{hdr(consumer.HeaderKind, k.String())}})
		require.Equal(t, k, l.Kind)
		require.Empty(t, l.Headers)
	}
	l := deadletter.Parse(&sarama.ConsumerMessage{Headers: []*sarama.RecordHeader{
		hdr(consumer.HeaderKind, "no such kind"), hdr(consumer.HeaderHeadersDropped, "3 headers, 90 bytes"),
		hdr(consumer.HeaderKeyDropped, "2000000 bytes"), hdr("traceparent", "00-abc"), hdr(consumer.HeaderReason, "why"),
	}})
	require.Equal(t, turn.KindNone, l.Kind, "an unknown kind reads as none")
	require.Equal(t, "3 headers, 90 bytes", l.HeadersDropped)
	require.Equal(t, "2000000 bytes", l.KeyDropped)
	require.Equal(t, "why", l.Reason)
	require.Equal(t, []sarama.RecordHeader{*hdr("traceparent", "00-abc")}, l.Headers, "only the producer's own header is listed as its")
	for _, name := range []string{consumer.HeaderReason, consumer.HeaderError, consumer.HeaderAttempts, consumer.HeaderSourceTopic,
		consumer.HeaderSourcePartition, consumer.HeaderSourceOffset, consumer.HeaderRequestID, consumer.HeaderConversationID,
		consumer.HeaderValueDropped, consumer.HeaderHeadersDropped, consumer.HeaderKeyDropped, consumer.HeaderKind} {
		require.True(t, consumer.DeadLetterHeader(name), name)
	}
	require.False(t, consumer.DeadLetterHeader(consumer.HeaderAttempt), "results only")
}

// Every dead letter turnstile writes (both modes build them with record.DeadLetter.Headers and
// shrink a refused one with record.Shrink): for every kind, decoded or not, whole and at every
// shrink step, Parse lists no turnstile header as the producer's and reads every field back.
func TestParseEveryDeadLetterWritten(t *testing.T) {
	t.Parallel()
	own := []*sarama.RecordHeader{hdr("traceparent", "00-abc"), hdr(record.HeaderKind, "forged"), hdr(deadletter.HeaderRedrivenFrom, "dlq/0/1")}
	for _, kind := range turn.Kinds() {
		for _, decoded := range []bool{true, false} {
			dl := record.DeadLetter{Reason: "why", Attempts: 2, Kind: kind, Source: turn.Source{Topic: "requests", Partition: 1, Offset: 9}}
			if decoded {
				dl.Error, dl.RequestID, dl.ConversationID = "boom", "req", "conv"
			}
			msg := &sarama.ProducerMessage{Key: sarama.StringEncoder("conv"), Value: sarama.StringEncoder("{}"), Headers: dl.Headers(own)}
			for part := record.PartNone; msg != nil; msg, part = record.Shrink(msg, sarama.ErrMessageSizeTooLarge) {
				cm := &sarama.ConsumerMessage{Topic: "dlq", Value: []byte("{}"), Headers: make([]*sarama.RecordHeader, len(msg.Headers))}
				for i := range msg.Headers {
					cm.Headers[i] = &msg.Headers[i]
				}
				l := deadletter.Parse(cm)
				for _, h := range l.Headers {
					require.False(t, record.IsDeadLetterHeader(string(h.Key)), "%s listed as the producer's after dropping the %s", h.Key, part)
					require.NotEqual(t, deadletter.HeaderRedrivenFrom, string(h.Key))
				}
				require.Equal(t, dl.Kind, l.Kind)
				require.Equal(t, dl.Source, l.Source)
				require.Equal(t, [5]any{dl.Reason, dl.Error, dl.Attempts, dl.RequestID, dl.ConversationID},
					[5]any{l.Reason, l.Error, l.Attempts, l.RequestID, l.ConversationID})
				require.Equal(t, part >= record.PartValue, l.ValueDropped != "" && l.Value == nil, part)
				require.Equal(t, part >= record.PartHeaders, l.HeadersDropped != "" && len(l.Headers) == 0, part)
				require.Equal(t, part >= record.PartKey, l.KeyDropped != "", part)
			}
		}
	}
}
