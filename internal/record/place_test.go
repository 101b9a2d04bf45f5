package record_test

import (
	"strings"
	"testing"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/internal/record"
	"github.com/turnstile-go/turnstile/turn"
)

// placer is a Placer of its own, as the consumer's outbound record is.
type placer struct{ at record.Placement }

func (p *placer) Placement() record.Placement { return p.at }

func TestPartitioner(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		key  string // "" for none
		meta any
		n    int32
		want int32 // -1: any partition
	}{
		// What a Java producer's default partitioner picks for these keys on 12 partitions.
		{"murmur2 without a placement", "user-42", nil, 12, 4},
		{"murmur2, another key", "order-1001", nil, 12, 6},
		{"co-partitioned", "user-42", record.Placement{Partition: 9, Partitions: 12}, 12, 9},
		{"co-partitioned through a Placer", "user-42", &placer{record.Placement{Partition: 0, Partitions: 12}}, 12, 0},
		{"murmur2 when the counts differ", "user-42", record.Placement{Partition: 1, Partitions: 6}, 12, 4},
		{"murmur2 for a partition out of range", "order-1001", record.Placement{Partition: 12, Partitions: 12}, 12, 6},
		{"murmur2 for a negative partition", "order-1001", record.Placement{Partition: -1, Partitions: 12}, 12, 6},
		{"murmur2 for Metadata that is no Placer", "order-1001", "not a placement", 12, 6},
		{"keyless, co-partitioned", "", record.Placement{Partition: 5, Partitions: 12}, 12, 5},
		{"keyless, no placement", "", nil, 12, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := record.NewPartitioner("results")
			msg := &sarama.ProducerMessage{Topic: "results", Metadata: tc.meta}
			if tc.key != "" {
				msg.Key = sarama.StringEncoder(tc.key)
			}
			got, err := p.Partition(msg, tc.n)
			require.NoError(t, err)
			if tc.want < 0 {
				require.GreaterOrEqual(t, got, int32(0))
				require.Less(t, got, tc.n)
			} else {
				require.Equal(t, tc.want, got)
			}
			require.True(t, p.RequiresConsistency())
			dyn, ok := p.(sarama.DynamicConsistencyPartitioner)
			require.True(t, ok)
			require.Equal(t, tc.key != "" || tc.meta != nil, dyn.MessageRequiresConsistency(msg))
		})
	}
}

// ResultRoom counts the key, turnstile's headers and the forwarded ones; a result whose
// encoding is exactly the limit, with the forwarded headers and the largest trace context
// telemetry injects, is a record that the producer accepts (sarama's ProducerMessage.ByteSize).
func TestResultRoom(t *testing.T) {
	t.Parallel()
	const max = 1 << 20
	req := turn.Request{ID: "req-1", ConversationID: "conv-1", Headers: map[string]string{"tenant": "acme", "other": "x"}}
	for _, tc := range []struct {
		name    string
		forward []string
		want    int
	}{
		{"nothing forwarded", nil, 728 + 6 + len("request-id") + 5 + len("conversation-id") + 6 + len("attempt") + 20},
		{"one forwarded", []string{"tenant"}, 728 + 6 + len("request-id") + 5 + len("conversation-id") + 6 + len("attempt") + 20 + 6 + 4 + 10},
		{"one missing", []string{"traceparent"}, 728 + 6 + len("request-id") + 5 + len("conversation-id") + 6 + len("attempt") + 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, record.ResultRoom(&req, tc.forward))
			limit := record.ResultLimit(max, &req, tc.forward)
			require.Equal(t, max-tc.want, limit.Bytes)
			require.Equal(t, record.ResultLimitSource(max), limit.Source)
			require.Contains(t, limit.Source, "1048576 bytes")

			hs := record.Forward(record.ResultHeaders(&req, 1<<62, len(tc.forward)+2), req.Headers, tc.forward)
			hs = append(hs, record.Header("traceparent", "00-"+strings.Repeat("a", 32)+"-"+strings.Repeat("b", 16)+"-01"),
				record.Header("tracestate", strings.Repeat("s", 512)))
			msg := &sarama.ProducerMessage{Key: sarama.StringEncoder(req.ConversationID),
				Value: sarama.ByteEncoder(make([]byte, limit.Bytes)), Headers: hs}
			require.LessOrEqual(t, msg.ByteSize(2), max)
		})
	}
}
