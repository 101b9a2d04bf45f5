package consumer

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	rec "github.com/turnstile-go/turnstile/internal/record"
	"github.com/turnstile-go/turnstile/turn"
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

// FuzzDeadLetterHeaders checks the header handling of the consumer's dead letters
// (record.DeadLetter.Headers, record.Shrink, record.Parse) on any record headers and any
// reason: no panic; turnstile's headers come last, once each, with their values; no header of
// the producer named like one of turnstile's survives (none can forge a reason or a note of
// what was dropped); the producer's other headers keep their order; the reason is bounded;
// stripping the producer's headers (a refused dead letter, shrunk twice) keeps exactly
// turnstile's and counts the rest; and parsing gives back what was built. Its seeds (f.Add
// and testdata/fuzz/FuzzDeadLetterHeaders) run as ordinary tests;
// `go test -run '^$' -fuzz FuzzDeadLetterHeaders ./consumer` explores.
func FuzzDeadLetterHeaders(f *testing.F) {
	f.Add([]byte("traceparent\x0000-abc-def-01\x00tenant\x00acme"), "turn: bad request: not JSON: invalid character 'h' looking for beginning of value, at byte 1 of 5")
	f.Add([]byte("reason\x00all good, really\x00value-dropped\x00no\x00key-dropped\x00"), "")
	f.Add([]byte("\xff\x00\x00\x00\x00x"), strings.Repeat("é", 3000))
	f.Add([]byte("error\x00forged\x00request-id\x00"+strings.Repeat("a", 100)), "bad \xff reason")
	f.Add([]byte{}, "x")
	f.Fuzz(func(t *testing.T, raw []byte, reason string) {
		theirs := fuzzHeaders(raw)
		dl := rec.DeadLetter{Reason: reason, Attempts: 1, Kind: turn.KindPermanent, Source: turn.Source{Topic: "requests", Offset: 7}}
		if len(raw)%2 == 0 { // sometimes an error and the request's ids too
			dl.Error, dl.RequestID, dl.ConversationID = reason, "id", "c"
		}
		c := rec.Clip(reason)
		require.LessOrEqual(t, len(c), 4<<10+len("…"))
		if utf8.ValidString(reason) {
			require.True(t, utf8.ValidString(c))
		}

		ours := dl.Headers(nil)
		hs := dl.Headers(theirs)
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

		bare, part := rec.Shrink(&sarama.ProducerMessage{Headers: hs}, errors.New("too large"))
		require.Equal(t, rec.PartValue, part)
		stripped, part := rec.Shrink(bare, errors.New("too large"))
		require.Equal(t, rec.PartHeaders, part)
		want := 0
		for _, h := range kept {
			want += len(h.Key) + len(h.Value)
		}
		require.Equal(t, append(ours, bare.Headers[len(hs)], rec.Header(HeaderHeadersDropped, fmt.Sprintf("%d headers, %d bytes", len(kept), want))),
			stripped.Headers, "stripping keeps exactly ours")
		require.True(t, slices.IndexFunc(stripped.Headers, func(h sarama.RecordHeader) bool { return !DeadLetterHeader(string(h.Key)) }) < 0)

		parsed := rec.Parse(pointers(hs))
		dl.Reason, dl.Error = rec.Clip(dl.Reason), rec.Clip(dl.Error)
		require.Equal(t, dl, parsed.DeadLetter, "parsed back")
		var own []sarama.RecordHeader
		for _, h := range kept {
			if string(h.Key) != rec.HeaderRedrivenFrom {
				own = append(own, h)
			}
		}
		require.Equal(t, own, parsed.Own)
	})
}

// pointers returns hs as sarama's ConsumerMessage.Headers has them.
func pointers(hs []sarama.RecordHeader) []*sarama.RecordHeader {
	ps := make([]*sarama.RecordHeader, len(hs))
	for i := range hs {
		ps[i] = &hs[i]
	}
	return ps
}
