package deadletter_test

import (
	"testing"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/deadletter"
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
