package record

import (
	"strconv"

	"github.com/IBM/sarama"

	"github.com/turnstile-go/turnstile/turn"
)

// Parsed is a dead letter's headers read back (Parse).
type Parsed struct {
	// DeadLetter is what DeadLetter.Headers wrote.
	DeadLetter
	// ValueDropped, HeadersDropped and KeyDropped are Shrink's notes (HeaderValueDropped,
	// HeaderHeadersDropped, HeaderKeyDropped); empty when that part is there.
	ValueDropped, HeadersDropped, KeyDropped string
	// Own are the request record's own headers, in order: every header but turnstile's
	// (IsDeadLetterHeader) and HeaderRedrivenFrom.
	Own []sarama.RecordHeader
}

// Parse reads a dead letter's headers (as sarama's ConsumerMessage.Headers has them; nil ones
// are skipped). A header that is missing or malformed leaves its field at its zero value
// (Source.Offset at -1, Kind at turn.KindNone for a name turn.ParseKind does not know); Parse
// never fails, so that a dead letter written by another tool, or by an older turnstile, is
// still read. A repeated name keeps its last value.
func Parse(hs []*sarama.RecordHeader) Parsed {
	p := Parsed{DeadLetter: DeadLetter{Source: turn.Source{Offset: -1}}}
	for _, h := range hs {
		if h == nil {
			continue
		}
		k, v := string(h.Key), string(h.Value)
		if k == HeaderRedrivenFrom {
			continue
		}
		if !IsDeadLetterHeader(k) {
			p.Own = append(p.Own, sarama.RecordHeader{Key: h.Key, Value: h.Value})
			continue
		}
		p.field(k, v)
	}
	return p
}

// field sets the field of the dead-letter header k to v.
func (p *Parsed) field(k, v string) {
	switch k {
	case HeaderRequestID:
		p.RequestID = v
	case HeaderConversationID:
		p.ConversationID = v
	case HeaderReason:
		p.Reason = v
	case HeaderError:
		p.Error = v
	case HeaderAttempts:
		if n, err := strconv.Atoi(v); err == nil {
			p.Attempts = n
		}
	case HeaderSourceTopic:
		p.Source.Topic = v
	case HeaderSourcePartition:
		if n, err := strconv.ParseInt(v, 10, 32); err == nil {
			p.Source.Partition = int32(n)
		}
	case HeaderSourceOffset:
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			p.Source.Offset = n
		}
	case HeaderKind:
		if kind, ok := turn.ParseKind(v); ok {
			p.Kind = kind
		}
	case HeaderOrigin:
		p.Origin = v
	case HeaderWorkflowID:
		p.WorkflowID = v
	case HeaderSequence:
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			p.Sequence = n
		}
	case HeaderValueDropped:
		p.ValueDropped = v
	case HeaderHeadersDropped:
		p.HeadersDropped = v
	case HeaderKeyDropped:
		p.KeyDropped = v
	}
}
