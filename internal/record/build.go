package record

import (
	"strconv"
	"strings"

	"github.com/IBM/sarama"

	"github.com/turnstile-go/turnstile/turn"
)

// MaxHeaderValue is the most bytes Clip keeps of a header value (4 KiB), so that a long
// error text cannot make a dead letter too large.
const MaxHeaderValue = 4 << 10

// Clip bounds a header value to MaxHeaderValue bytes: a longer s is cut there, at a rune
// boundary (an incomplete rune at the cut is dropped, as is any invalid UTF-8 in the kept
// part), and ends with "…".
func Clip(s string) string {
	if len(s) <= MaxHeaderValue {
		return s
	}
	return strings.ToValidUTF8(s[:MaxHeaderValue], "") + "…"
}

// Header returns the record header named k with value v.
func Header(k, v string) sarama.RecordHeader {
	return sarama.RecordHeader{Key: []byte(k), Value: []byte(v)}
}

// The names of a result's headers as bytes, shared by every result record (the producer only
// reads them).
var (
	requestIDKey      = []byte(HeaderRequestID)
	conversationIDKey = []byte(HeaderConversationID)
	attemptKey        = []byte(HeaderAttempt)
)

// ResultHeaders returns the headers of req's result: HeaderRequestID, HeaderConversationID
// and HeaderAttempt (attempt, the inbox's attempt count), in a slice with room for extra
// more (forwarded headers, a trace context). The three values share one allocation; the
// names are shared by every result, so a caller must not write into them.
func ResultHeaders(req *turn.Request, attempt, extra int) []sarama.RecordHeader {
	id, conv := len(req.ID), len(req.ID)+len(req.ConversationID)
	values := append(append(make([]byte, 0, conv+20), req.ID...), req.ConversationID...)
	values = strconv.AppendInt(values, int64(attempt), 10)
	hs := make([]sarama.RecordHeader, len(resultNames), len(resultNames)+max(extra, 0))
	hs[0] = sarama.RecordHeader{Key: requestIDKey, Value: values[:id:id]}
	hs[1] = sarama.RecordHeader{Key: conversationIDKey, Value: values[id:conv:conv]}
	hs[2] = sarama.RecordHeader{Key: attemptKey, Value: values[conv:]}
	return hs
}

// Forward appends to hs the headers of from (a request's headers, turn.Request.Headers) named
// in names (the consumer's Config.ForwardHeaders), in the order of names, skipping a name that
// from lacks or that hs already has: a result record carries them after ResultHeaders.
func Forward(hs []sarama.RecordHeader, from map[string]string, names []string) []sarama.RecordHeader {
	if len(from) == 0 {
		return hs
	}
	for _, name := range names {
		if v, ok := from[name]; ok && !has(hs, name) {
			hs = append(hs, Header(name, v))
		}
	}
	return hs
}

// has reports whether hs has a header named name.
func has(hs []sarama.RecordHeader, name string) bool {
	for _, h := range hs {
		if string(h.Key) == name {
			return true
		}
	}
	return false
}

// DeadLetter is what turnstile's headers on a dead letter say (DeadLetter.Headers writes them,
// Parse reads them back).
type DeadLetter struct {
	// Reason says in one line why the record was dead-lettered (HeaderReason, clipped).
	Reason string
	// Error is the last error's text (HeaderError, clipped); empty when there was none, and
	// then the header is left out.
	Error string
	// Attempts is the number of attempts spent (HeaderAttempts).
	Attempts int
	// Kind is the turn.Kind of the error that dead-lettered the record (HeaderKind);
	// turn.KindNone (not known: a dead letter of an earlier delivery, answered from the inbox)
	// leaves the header out.
	Kind turn.Kind
	// Source locates the request record (HeaderSourceTopic, HeaderSourcePartition,
	// HeaderSourceOffset: its own offset, not the next to read). Parse sets Offset to -1 when
	// the headers do not say.
	Source turn.Source
	// RequestID and ConversationID are the request's ids (HeaderRequestID,
	// HeaderConversationID); empty when the record did not decode, and then each header is
	// left out.
	RequestID, ConversationID string
	// Origin is HeaderOrigin (OriginSubmit, OriginGap), WorkflowID HeaderWorkflowID and
	// Sequence HeaderSequence; each header is left out when its field is empty (zero).
	Origin, WorkflowID string
	Sequence           int64
}

// ErrorText returns err's text for DeadLetter.Error: empty when err is nil.
func ErrorText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// maxOurs is the most headers DeadLetter.Headers writes of its own.
const maxOurs = 12

// Headers returns the headers of d's dead letter: the request record's own headers (own, as
// sarama's ConsumerMessage.Headers has them) in order, but nil ones and those named like a
// dead-letter header (IsDeadLetterHeader: a producer cannot forge a reason or a drop note),
// then turnstile's, in the order of DeadLetterHeaderNames. Reason and Error are clipped (Clip).
func (d *DeadLetter) Headers(own []*sarama.RecordHeader) []sarama.RecordHeader {
	hs := make([]sarama.RecordHeader, 0, len(own)+maxOurs)
	for _, h := range own {
		if h != nil && !IsDeadLetterHeader(string(h.Key)) {
			hs = append(hs, *h)
		}
	}
	hs = append(hs, Header(HeaderReason, Clip(d.Reason)), Header(HeaderAttempts, strconv.Itoa(d.Attempts)),
		Header(HeaderSourceTopic, d.Source.Topic),
		Header(HeaderSourcePartition, strconv.FormatInt(int64(d.Source.Partition), 10)),
		Header(HeaderSourceOffset, strconv.FormatInt(d.Source.Offset, 10)))
	if d.Kind != turn.KindNone {
		hs = append(hs, Header(HeaderKind, d.Kind.String()))
	}
	if d.Error != "" {
		hs = append(hs, Header(HeaderError, Clip(d.Error)))
	}
	if d.RequestID != "" {
		hs = append(hs, Header(HeaderRequestID, d.RequestID))
	}
	if d.ConversationID != "" {
		hs = append(hs, Header(HeaderConversationID, d.ConversationID))
	}
	if d.Origin != "" {
		hs = append(hs, Header(HeaderOrigin, d.Origin))
	}
	if d.WorkflowID != "" {
		hs = append(hs, Header(HeaderWorkflowID, d.WorkflowID))
	}
	if d.Sequence != 0 {
		hs = append(hs, Header(HeaderSequence, strconv.FormatInt(d.Sequence, 10)))
	}
	return hs
}
