package record_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/internal/record"
	"github.com/turnstile-go/turnstile/turn"
)

// Every header name turnstile writes, walked: each is on the records the table says (and no
// other), the lists say so, and what the builders write uses exactly the listed names.
func TestEveryHeaderName(t *testing.T) {
	t.Parallel()
	const result, deadLetter, redriven = 1, 2, 4
	all := map[string]int{
		record.HeaderRequestID:       result | deadLetter,
		record.HeaderConversationID:  result | deadLetter,
		record.HeaderAttempt:         result,
		record.HeaderReason:          deadLetter,
		record.HeaderError:           deadLetter,
		record.HeaderAttempts:        deadLetter,
		record.HeaderSourceTopic:     deadLetter,
		record.HeaderSourcePartition: deadLetter,
		record.HeaderSourceOffset:    deadLetter,
		record.HeaderValueDropped:    deadLetter,
		record.HeaderHeadersDropped:  deadLetter,
		record.HeaderKeyDropped:      deadLetter,
		record.HeaderKind:            deadLetter,
		record.HeaderOrigin:          deadLetter,
		record.HeaderWorkflowID:      deadLetter,
		record.HeaderSequence:        deadLetter,
		record.HeaderRedrivenFrom:    redriven,
		record.HeaderReplayedFrom:    redriven, // on request copies, like redriven-from
	}
	require.Len(t, all, 18, "the names are distinct")
	for name, on := range all {
		require.Equal(t, on&result != 0, slices.Contains(record.ResultHeaderNames(), name), name)
		require.Equal(t, on&deadLetter != 0, slices.Contains(record.DeadLetterHeaderNames(), name), name)
		require.Equal(t, on&deadLetter != 0, record.IsDeadLetterHeader(name), name)
	}
	for _, name := range append(record.ResultHeaderNames(), record.DeadLetterHeaderNames()...) {
		require.Contains(t, all, name, "listed but not walked")
	}
	for _, name := range []string{"", "traceparent", "Reason", "request_id", "reason "} {
		require.False(t, record.IsDeadLetterHeader(name), name)
	}

	// What the builders write: a result's headers, and a dead letter with every field set,
	// shrunk until nothing is left to drop.
	req := turn.Request{ID: "r", ConversationID: "c"}
	require.Equal(t, record.ResultHeaderNames(), names(record.ResultHeaders(&req, 1, 0)))
	dl := record.DeadLetter{Reason: "why", Error: "boom", Attempts: 1, Kind: turn.KindAttempt, RequestID: "r", ConversationID: "c",
		Origin: record.OriginSubmit, WorkflowID: "turnstile-c", Sequence: 7}
	msg := &sarama.ProducerMessage{Key: sarama.StringEncoder("c"), Value: sarama.StringEncoder("v"), Headers: dl.Headers(nil)}
	for {
		next, _ := record.Shrink(msg, errors.New("too large"))
		if next == nil {
			break
		}
		msg = next
	}
	require.Equal(t, record.DeadLetterHeaderNames(), names(msg.Headers), "every dead-letter header written, in the listed order")

	// The lists are copies.
	ns := record.DeadLetterHeaderNames()
	ns[0] = "changed"
	require.True(t, record.IsDeadLetterHeader(record.HeaderReason))
	require.Equal(t, record.HeaderReason, record.DeadLetterHeaderNames()[0])
}
