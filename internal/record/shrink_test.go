package record_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/internal/record"
	"github.com/turnstile-go/turnstile/turn"
)

// Shrink drops the value, then the record's own headers, then the key, each with its note,
// and then gives up; the message it is given is never changed.
func TestShrink(t *testing.T) {
	t.Parallel()
	refusal := fmt.Errorf("publish: %w", sarama.ErrMessageSizeTooLarge)
	dl := record.DeadLetter{Reason: "why", Attempts: 2, Kind: turn.KindPermanent, Source: turn.Source{Topic: "requests", Offset: 7}}
	ours := dl.Headers(nil)
	own := []*sarama.RecordHeader{hdr("pasted-log", strings.Repeat("l", 100)), hdr("trace", "t-1")}
	meta := record.Placement{Partition: 2, Partitions: 6}
	for _, tc := range []struct {
		name string
		msg  *sarama.ProducerMessage
		// steps are the parts dropped and the note each adds, in order.
		steps []record.Part
		notes []string
	}{
		{"value, headers and key",
			&sarama.ProducerMessage{Topic: "dlq", Key: sarama.StringEncoder("conv-1"), Value: sarama.ByteEncoder(make([]byte, 1000)),
				Headers: dl.Headers(own), Metadata: meta},
			[]record.Part{record.PartValue, record.PartHeaders, record.PartKey},
			[]string{"1000 bytes; refused: publish: " + sarama.ErrMessageSizeTooLarge.Error(), "2 headers, 118 bytes", "6 bytes"}},
		{"no value, no own headers, no key",
			&sarama.ProducerMessage{Topic: "dlq", Headers: dl.Headers(nil)},
			[]record.Part{record.PartValue, record.PartHeaders, record.PartKey},
			[]string{"0 bytes; refused: publish: " + sarama.ErrMessageSizeTooLarge.Error(), "0 headers, 0 bytes", "0 bytes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			msg := tc.msg
			for i, want := range tc.steps {
				before := append([]sarama.RecordHeader(nil), msg.Headers...)
				key, value := msg.Key, msg.Value
				next, part := record.Shrink(msg, refusal)
				require.Equal(t, want, part, "step %d", i)
				require.NotNil(t, next)
				require.Equal(t, before, msg.Headers, "the refused message is not changed")
				require.Equal(t, key, msg.Key)
				require.Equal(t, value, msg.Value)

				require.Nil(t, next.Value, "no value after any step")
				require.Equal(t, msg.Topic, next.Topic)
				require.Equal(t, msg.Metadata, next.Metadata, "the placement stays")
				note := next.Headers[len(next.Headers)-1]
				require.Equal(t, tc.notes[i], string(note.Value), "note of the %s", want)
				if want == record.PartKey {
					require.Nil(t, next.Key)
				} else {
					require.Equal(t, msg.Key, next.Key)
				}
				if want >= record.PartHeaders {
					for _, h := range next.Headers {
						require.True(t, record.IsDeadLetterHeader(string(h.Key)), "only turnstile's left: %s", h.Key)
					}
				}
				require.Equal(t, ours, next.Headers[len(next.Headers)-len(ours)-i-1:len(next.Headers)-i-1],
					"turnstile's headers stay, in order, before the notes")
				msg = next
			}
			next, part := record.Shrink(msg, refusal)
			require.Nil(t, next, "nothing left to drop")
			require.Equal(t, record.PartNone, part)
		})
	}
	t.Run("a clipped refusal", func(t *testing.T) {
		t.Parallel()
		next, _ := record.Shrink(&sarama.ProducerMessage{}, errors.New(strings.Repeat("e", 10*record.MaxHeaderValue)))
		require.Less(t, len(next.Headers[0].Value), record.MaxHeaderValue+100)
	})
}

func TestPartString(t *testing.T) {
	t.Parallel()
	for part, want := range map[record.Part]string{record.PartNone: "none", record.PartValue: "value",
		record.PartHeaders: "headers", record.PartKey: "key", record.Part(99): "none"} {
		require.Equal(t, want, part.String())
	}
}

func TestRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{sarama.ConfigurationError("Attempt to produce message larger than configured Producer.MaxMessageBytes: 2 > 1"), true},
		{sarama.ErrMessageSizeTooLarge, true},
		{fmt.Errorf("send: %w", sarama.ErrMessageSetSizeTooLarge), true},
		{sarama.ErrInvalidRecord, true},
		{sarama.ErrInvalidMessageSize, true},
		{sarama.ErrNotLeaderForPartition, false},
		{sarama.ErrOutOfBrokers, false},
		{errors.New("connection reset"), false},
		{nil, false},
	} {
		require.Equal(t, tc.want, record.Refused(tc.err), "%v", tc.err)
	}
}
