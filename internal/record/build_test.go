package record_test

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/internal/record"
	"github.com/turnstile-go/turnstile/turn"
)

// hdr is a header as sarama's ConsumerMessage.Headers has it.
func hdr(k, v string) *sarama.RecordHeader {
	h := record.Header(k, v)
	return &h
}

// names returns the names of hs, in order.
func names(hs []sarama.RecordHeader) []string {
	ns := make([]string, len(hs))
	for i, h := range hs {
		ns[i] = string(h.Key)
	}
	return ns
}

// pointers returns hs as sarama's ConsumerMessage.Headers has them.
func pointers(hs []sarama.RecordHeader) []*sarama.RecordHeader {
	ps := make([]*sarama.RecordHeader, len(hs))
	for i := range hs {
		ps[i] = &hs[i]
	}
	return ps
}

func TestClip(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", record.MaxHeaderValue)
	for _, tc := range []struct {
		name, in, want string
	}{
		{"empty", "", ""},
		{"short", "turn: bad request", "turn: bad request"},
		{"exactly the limit", long, long},
		{"one over", long + "b", long + "…"},
		{"cut inside a rune", long[:record.MaxHeaderValue-1] + "é and more", long[:record.MaxHeaderValue-1] + "…"},
		{"invalid UTF-8 kept short", "bad \xff", "bad \xff"},
		{"invalid UTF-8 in a long one", "\xff" + long, long[:record.MaxHeaderValue-1] + "…"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := record.Clip(tc.in)
			require.Equal(t, tc.want, got)
			require.LessOrEqual(t, len(got), record.MaxHeaderValue+len("…"))
			if len(tc.in) > record.MaxHeaderValue {
				require.True(t, utf8.ValidString(got))
			}
		})
	}
}

func TestResultHeaders(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		req      turn.Request
		attempt  int
		extra    int
		wantVals []string
	}{
		{"first attempt", turn.Request{ID: "req-1", ConversationID: "conv-1"}, 1, 0, []string{"req-1", "conv-1", "1"}},
		{"room for forwarded headers", turn.Request{ID: "r", ConversationID: "c"}, 12, 3, []string{"r", "c", "12"}},
		{"empty ids", turn.Request{}, 0, 0, []string{"", "", "0"}},
		{"negative extra is none", turn.Request{ID: "r", ConversationID: "c"}, 2, -1, []string{"r", "c", "2"}},
		{"large attempt", turn.Request{ID: "r", ConversationID: "c"}, 1 << 40, 0, []string{"r", "c", "1099511627776"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			hs := record.ResultHeaders(&tc.req, tc.attempt, tc.extra)
			require.Equal(t, record.ResultHeaderNames(), names(hs))
			vals := make([]string, len(hs))
			for i, h := range hs {
				vals[i] = string(h.Value)
			}
			require.Equal(t, tc.wantVals, vals)
			require.Equal(t, len(hs)+max(tc.extra, 0), cap(hs))
			// The values share one allocation: appending to one must not write into the next.
			hs[0].Value = append(hs[0].Value, 'x')
			require.Equal(t, tc.wantVals[1], string(hs[1].Value))
		})
	}
}

func TestForward(t *testing.T) {
	t.Parallel()
	base := []sarama.RecordHeader{record.Header(record.HeaderRequestID, "r")}
	for _, tc := range []struct {
		name  string
		from  map[string]string
		names []string
		want  []string
	}{
		{"none named", map[string]string{"traceparent": "t"}, nil, []string{record.HeaderRequestID}},
		{"no request headers", nil, []string{"traceparent"}, []string{record.HeaderRequestID}},
		{"in the order of names", map[string]string{"traceparent": "t", "tenant": "acme"}, []string{"tenant", "traceparent"},
			[]string{record.HeaderRequestID, "tenant", "traceparent"}},
		{"a missing one skipped", map[string]string{"tenant": "acme"}, []string{"traceparent", "tenant"},
			[]string{record.HeaderRequestID, "tenant"}},
		{"never twice", map[string]string{record.HeaderRequestID: "forged"}, []string{record.HeaderRequestID},
			[]string{record.HeaderRequestID}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			hs := record.Forward(slices.Clone(base), tc.from, tc.names)
			require.Equal(t, tc.want, names(hs))
			require.Equal(t, "r", string(hs[0].Value))
			for _, h := range hs[1:] {
				require.Equal(t, tc.from[string(h.Key)], string(h.Value))
			}
		})
	}
}

func TestDeadLetterHeaders(t *testing.T) {
	t.Parallel()
	src := turn.Source{Topic: "requests", Partition: 3, Offset: 42}
	for _, tc := range []struct {
		name  string
		dl    record.DeadLetter
		own   []*sarama.RecordHeader
		names []string
	}{
		{"decoded, with an error and a kind",
			record.DeadLetter{Reason: "why", Error: "boom", Attempts: 3, Kind: turn.KindAttempt, Source: src, RequestID: "r", ConversationID: "c"},
			[]*sarama.RecordHeader{hdr("traceparent", "00-abc"), nil, hdr("tenant", "acme")},
			[]string{"traceparent", "tenant", record.HeaderReason, record.HeaderAttempts, record.HeaderSourceTopic,
				record.HeaderSourcePartition, record.HeaderSourceOffset, record.HeaderKind, record.HeaderError,
				record.HeaderRequestID, record.HeaderConversationID}},
		{"undecodable: no ids, no error, kind not known",
			record.DeadLetter{Reason: "malformed JSON", Source: src}, nil,
			[]string{record.HeaderReason, record.HeaderAttempts, record.HeaderSourceTopic, record.HeaderSourcePartition,
				record.HeaderSourceOffset}},
		{"forged names are not copied",
			record.DeadLetter{Reason: "why", Kind: turn.KindPermanent, Source: src},
			[]*sarama.RecordHeader{hdr(record.HeaderReason, "all good"), hdr(record.HeaderValueDropped, "no"),
				hdr(record.HeaderAttempt, "9"), hdr(record.HeaderKeyDropped, "")},
			[]string{record.HeaderAttempt, record.HeaderReason, record.HeaderAttempts, record.HeaderSourceTopic,
				record.HeaderSourcePartition, record.HeaderSourceOffset, record.HeaderKind}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			hs := tc.dl.Headers(tc.own)
			require.Equal(t, tc.names, names(hs))
			got := map[string]string{}
			for _, h := range hs {
				got[string(h.Key)] = string(h.Value)
			}
			require.Equal(t, tc.dl.Reason, got[record.HeaderReason])
			require.Equal(t, "3", got[record.HeaderSourcePartition])
			require.Equal(t, "42", got[record.HeaderSourceOffset])
			require.Equal(t, "requests", got[record.HeaderSourceTopic])
		})
	}
	t.Run("long reason and error are clipped", func(t *testing.T) {
		t.Parallel()
		long := strings.Repeat("x", 3*record.MaxHeaderValue)
		dl := record.DeadLetter{Reason: long, Error: long}
		for _, h := range dl.Headers(nil) {
			require.LessOrEqual(t, len(h.Value), record.MaxHeaderValue+len("…"), string(h.Key))
		}
	})
}

func TestErrorText(t *testing.T) {
	t.Parallel()
	require.Empty(t, record.ErrorText(nil))
	require.Equal(t, "boom", record.ErrorText(errString("boom")))
}

type errString string

func (e errString) Error() string { return string(e) }
