package record_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/internal/record"
	"github.com/turnstile-go/turnstile/turn"
)

// Parse gives back every field DeadLetter.Headers wrote, for every kind, decoded or not, with
// or without an error, whole and at every step of Shrink; it lists the record's own headers
// (never turnstile's, never a forged one, never redriven-from) as long as they are there.
// Redriven-from is one of the record's own headers all the same: Shrink counts it when it
// drops them.
func TestParseRoundTrip(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("r", 2*record.MaxHeaderValue)
	own := []*sarama.RecordHeader{hdr("traceparent", "00-abc"), hdr(record.HeaderReason, "forged"),
		hdr(record.HeaderRedrivenFrom, "dlq/0/3"), nil, hdr("tenant", "acme")}
	wantOwn := []sarama.RecordHeader{*hdr("traceparent", "00-abc"), *hdr("tenant", "acme")}
	var cases []record.DeadLetter
	for _, kind := range turn.Kinds() {
		for _, decoded := range []bool{true, false} {
			dl := record.DeadLetter{Reason: "why: " + kind.String(), Attempts: int(kind) + 1, Kind: kind,
				Source: turn.Source{Topic: "requests", Partition: int32(kind), Offset: 1 << 40}}
			if decoded {
				dl.Error, dl.RequestID, dl.ConversationID = "boom", "req-"+kind.String(), "conv"
			}
			cases = append(cases, dl)
		}
	}
	cases = append(cases, record.DeadLetter{Reason: long, Error: long, Source: turn.Source{Offset: 0}},
		record.DeadLetter{Reason: "submit", RequestID: "r", ConversationID: "c", Origin: record.OriginSubmit, WorkflowID: "turnstile-c", Sequence: 3},
		record.DeadLetter{Reason: "gap", ConversationID: "c", Origin: record.OriginGap, WorkflowID: "turnstile-c", Sequence: 2})
	for _, dl := range cases {
		want := dl
		want.Reason, want.Error = record.Clip(dl.Reason), record.Clip(dl.Error)
		msg := &sarama.ProducerMessage{Key: sarama.StringEncoder("conv"), Value: sarama.StringEncoder("v"), Headers: dl.Headers(own)}
		dropped := map[record.Part]bool{}
		for part := record.PartNone; msg != nil; msg, part = record.Shrink(msg, errors.New("too large")) {
			dropped[part] = true
			p := record.Parse(pointers(msg.Headers))
			require.Equal(t, want, p.DeadLetter, "%s, after dropping the %s", dl.Reason, part)
			require.Equal(t, dropped[record.PartValue], strings.HasPrefix(p.ValueDropped, "1 bytes; refused: too large"), part)
			require.Equal(t, dropped[record.PartHeaders], p.HeadersDropped == "3 headers, 47 bytes", part)
			require.Equal(t, dropped[record.PartKey], p.KeyDropped == "4 bytes", part)
			if dropped[record.PartHeaders] {
				require.Empty(t, p.Own)
			} else {
				require.Equal(t, wantOwn, p.Own, "only the producer's own headers listed as its")
			}
		}
	}
}

// Parse never fails: missing or malformed headers leave their fields at zero (the source
// offset at -1), an unknown kind reads as none, nil headers are skipped, a repeated name keeps
// its last value.
func TestParseMalformed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		hs   []*sarama.RecordHeader
		want record.Parsed
	}{
		{"nothing", nil, record.Parsed{DeadLetter: record.DeadLetter{Source: turn.Source{Offset: -1}}}},
		{"nil header", []*sarama.RecordHeader{nil}, record.Parsed{DeadLetter: record.DeadLetter{Source: turn.Source{Offset: -1}}}},
		{"malformed numbers and kind", []*sarama.RecordHeader{hdr(record.HeaderAttempts, "three"),
			hdr(record.HeaderSourcePartition, "1e9999"), hdr(record.HeaderSourceOffset, "-"), hdr(record.HeaderKind, "no such kind")},
			record.Parsed{DeadLetter: record.DeadLetter{Source: turn.Source{Offset: -1}}}},
		{"last value wins", []*sarama.RecordHeader{hdr(record.HeaderReason, "one"), hdr(record.HeaderReason, "two"),
			hdr(record.HeaderSourceOffset, "0")},
			record.Parsed{DeadLetter: record.DeadLetter{Reason: "two"}}},
		{"another tool's dead letter", []*sarama.RecordHeader{hdr("x-error", "e"), hdr(record.HeaderAttempt, "2")},
			record.Parsed{DeadLetter: record.DeadLetter{Source: turn.Source{Offset: -1}},
				Own: []sarama.RecordHeader{*hdr("x-error", "e"), *hdr(record.HeaderAttempt, "2")}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, record.Parse(tc.hs))
		})
	}
}
