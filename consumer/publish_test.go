package consumer_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/internal/record"
)

func TestResultPlacement(t *testing.T) {
	t.Parallel()
	t.Run("co-partitioned", func(t *testing.T) {
		t.Parallel()
		e := setup(t, 6, 6)
		e.start(memberOpts{})
		want := map[string]int32{}
		for i := range 24 {
			r := request(fmt.Sprintf("conv-%d", i), "hi")
			data, err := r.Encode()
			require.NoError(t, err)
			// An upstream partitioner that is not murmur2: round robin by hand.
			e.cluster.ProduceTo(t, e.requests, int32(i%6), r.ConversationID, data, nil)
			want[r.ID] = int32(i % 6)
		}
		for id, msgs := range e.resultsByID(24) {
			require.Equal(t, want[id], msgs[0].Partition, "result of %s", id)
		}
	})
	t.Run("murmur2 when partition counts differ", func(t *testing.T) {
		t.Parallel()
		e := setup(t, 5, 12)
		e.start(memberOpts{})
		e.produce(request("user-42", "hi"), request("order-1001", "hi"))
		got := map[string]int32{}
		for _, msgs := range e.resultsByID(2) {
			got[string(msgs[0].Key)] = msgs[0].Partition
		}
		// What a Java producer's default partitioner picks for these keys on 12 partitions.
		require.Equal(t, map[string]int32{"user-42": 4, "order-1001": 6}, got)
	})
}

// consumer.DeadLetterHeader is the record format's list (record.IsDeadLetterHeader), and the
// exported Header* names are its names.
func TestHeaderNamesAreTheRecordFormats(t *testing.T) {
	t.Parallel()
	for _, name := range append(record.DeadLetterHeaderNames(), record.ResultHeaderNames()...) {
		require.Equal(t, record.IsDeadLetterHeader(name), consumer.DeadLetterHeader(name), name)
	}
	require.False(t, consumer.DeadLetterHeader(consumer.HeaderAttempt), "results only")
	require.Equal(t, record.ResultHeaderNames(), []string{consumer.HeaderRequestID, consumer.HeaderConversationID, consumer.HeaderAttempt})
	require.Equal(t, record.DeadLetterHeaderNames(), []string{consumer.HeaderReason, consumer.HeaderAttempts, consumer.HeaderSourceTopic,
		consumer.HeaderSourcePartition, consumer.HeaderSourceOffset, consumer.HeaderKind, consumer.HeaderError, consumer.HeaderRequestID,
		consumer.HeaderConversationID, consumer.HeaderOrigin, consumer.HeaderWorkflowID, consumer.HeaderSequence,
		consumer.HeaderValueDropped, consumer.HeaderHeadersDropped, consumer.HeaderKeyDropped})
}
