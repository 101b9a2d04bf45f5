package record

import (
	"fmt"

	"github.com/IBM/sarama"
)

// Part is the part of a dead letter that Shrink dropped.
type Part uint8

// The parts Shrink drops, in its order.
const (
	PartNone    Part = iota // nothing: no smaller dead letter is left
	PartValue               // the record's value (HeaderValueDropped)
	PartHeaders             // the record's own headers (HeaderHeadersDropped)
	PartKey                 // the record's key (HeaderKeyDropped)
)

// String returns "none", "value", "headers" or "key".
func (p Part) String() string {
	switch p {
	case PartValue:
		return "value"
	case PartHeaders:
		return "headers"
	case PartKey:
		return "key"
	}
	return "none"
}

// Shrink returns what to publish instead of the dead letter msg, which the dead-letter topic
// refused with err (Refused): msg without one more part, and that part. The parts go in
// order, each noted in a header so that the reader knows and the next Shrink sees how far
// msg went: first the value (HeaderValueDropped: "B bytes; refused: ERROR", err clipped), then
// the record's own headers, keeping turnstile's (HeaderHeadersDropped: "N headers, B bytes",
// names and values; a trace context goes too), then the key (HeaderKeyDropped: "B bytes").
// The dead letter keeps turnstile's headers, which locate the original by topic, partition
// and offset. When msg has dropped all three, Shrink returns nil and PartNone: not even
// turnstile's own headers fit. msg is not changed; the new record has msg's topic and
// Metadata (its placement, NewPartitioner) and no Partition yet.
func Shrink(msg *sarama.ProducerMessage, err error) (*sarama.ProducerMessage, Part) {
	headers, key := msg.Headers[:len(msg.Headers):len(msg.Headers)], msg.Key
	var part Part
	switch {
	case !has(msg.Headers, HeaderValueDropped):
		part, headers = PartValue, append(headers,
			Header(HeaderValueDropped, fmt.Sprintf("%d bytes; refused: %s", length(msg.Value), Clip(ErrorText(err)))))
	case !has(msg.Headers, HeaderHeadersDropped):
		var ours []sarama.RecordHeader
		n, size := 0, 0
		for _, h := range msg.Headers {
			if IsDeadLetterHeader(string(h.Key)) {
				ours = append(ours, h)
			} else {
				n, size = n+1, size+len(h.Key)+len(h.Value)
			}
		}
		part, headers = PartHeaders, append(ours, Header(HeaderHeadersDropped, fmt.Sprintf("%d headers, %d bytes", n, size)))
	case !has(msg.Headers, HeaderKeyDropped):
		part, key, headers = PartKey, nil, append(headers, Header(HeaderKeyDropped, fmt.Sprintf("%d bytes", length(msg.Key))))
	default:
		return nil, PartNone
	}
	return &sarama.ProducerMessage{Topic: msg.Topic, Key: key, Headers: headers, Metadata: msg.Metadata}, part
}

// length is e's length in bytes, 0 for nil.
func length(e sarama.Encoder) int {
	if e == nil {
		return 0
	}
	return e.Length()
}
