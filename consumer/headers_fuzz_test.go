package consumer

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"
)

// fuzzHeaders splits raw into record headers: parts separated by NUL, alternately name and
// value; a name of the single byte 0xff stands for a nil header (sarama never returns one,
// but the code must not trust that).
func fuzzHeaders(raw []byte) []*sarama.RecordHeader {
	parts := bytes.Split(raw, []byte{0})
	var hs []*sarama.RecordHeader
	for i := 0; i < len(parts); i += 2 {
		if bytes.Equal(parts[i], []byte{0xff}) {
			hs = append(hs, nil)
			continue
		}
		h := &sarama.RecordHeader{Key: parts[i]}
		if i+1 < len(parts) {
			h.Value = parts[i+1]
		}
		hs = append(hs, h)
	}
	return hs
}

// FuzzDeadLetterHeaders checks the header handling of dead letters on any record headers and
// any reason: no panic; turnstile's headers come last, once each, with their values; no header
// of the producer named like one of turnstile's survives (none can forge a reason or a note of
// what was dropped); the producer's other headers keep their order; the reason is bounded; and
// stripping the producer's headers (a refused dead letter) keeps exactly turnstile's and
// counts the rest. Its seeds (f.Add and testdata/fuzz/FuzzDeadLetterHeaders) run as ordinary
// tests; `go test -run '^$' -fuzz FuzzDeadLetterHeaders ./consumer` explores.
func FuzzDeadLetterHeaders(f *testing.F) {
	f.Add([]byte("traceparent\x0000-abc-def-01\x00tenant\x00acme"), "turn: bad request: not JSON: invalid character 'h' looking for beginning of value, at byte 1 of 5")
	f.Add([]byte("reason\x00all good, really\x00value-dropped\x00no\x00key-dropped\x00"), "")
	f.Add([]byte("\xff\x00\x00\x00\x00x"), strings.Repeat("é", 3000))
	f.Add([]byte("error\x00forged\x00request-id\x00"+strings.Repeat("a", 100)), "bad \xff reason")
	f.Add([]byte{}, "x")
	f.Fuzz(func(t *testing.T, raw []byte, reason string) {
		theirs := fuzzHeaders(raw)
		ours := []sarama.RecordHeader{
			header(HeaderReason, clip(reason)), header(HeaderAttempts, "1"),
			header(HeaderSourceTopic, "requests"), header(HeaderSourcePartition, "0"), header(HeaderSourceOffset, "7"),
		}
		if len(raw)%2 == 0 { // sometimes an error and the request's ids too
			ours = append(ours, header(HeaderError, clip(reason)), header(HeaderRequestID, "id"), header(HeaderConversationID, "c"))
		}
		c := clip(reason)
		require.LessOrEqual(t, len(c), 4<<10+len("…"))
		if utf8.ValidString(reason) {
			require.True(t, utf8.ValidString(c))
		}

		hs := deadLetterHeaders(theirs, ours)
		require.GreaterOrEqual(t, len(hs), len(ours))
		require.Equal(t, ours, hs[len(hs)-len(ours):], "ours last, once each")
		var kept []sarama.RecordHeader
		for _, h := range theirs {
			if h != nil && !DeadLetterHeader(string(h.Key)) {
				kept = append(kept, *h)
			}
		}
		require.Equal(t, len(kept), len(hs)-len(ours))
		for i, h := range kept {
			require.Equal(t, h, hs[i], "the producer's headers in order")
		}

		stripped, n, size := splitOurs(hs)
		require.Equal(t, ours, stripped, "stripping keeps exactly ours")
		require.Equal(t, len(kept), n)
		want := 0
		for _, h := range kept {
			want += len(h.Key) + len(h.Value)
		}
		require.Equal(t, want, size)
		require.True(t, slices.IndexFunc(stripped, func(h sarama.RecordHeader) bool { return !DeadLetterHeader(string(h.Key)) }) < 0)
	})
}
