package record

import (
	"strconv"

	"github.com/turnstile-go/turnstile/turn"
)

// resultRecordRoom is the room, in bytes, a result record keeps for what is not the Result's
// encoding nor a header's name and value: sarama's per-record overhead in a record batch
// (maximumRecordOverhead, 36 bytes) and each header's two length varints (10 bytes), rounded
// up, plus the trace context that telemetry may inject (traceparent and a tracestate of up to
// 512 bytes, W3C Trace Context).
const resultRecordRoom = 128 + 600

// ResultRoom returns the room, in bytes, that req's result record keeps for its key (the
// conversation id) and headers: ResultHeaders' names and values (the attempt counted as 20
// digits), the headers of req.Headers named in forward (Forward) with 10 bytes each for their
// length varints, and resultRecordRoom.
func ResultRoom(req *turn.Request, forward []string) int {
	room := resultRecordRoom + len(req.ConversationID) + // the key
		len(HeaderRequestID) + len(req.ID) + len(HeaderConversationID) + len(req.ConversationID) + len(HeaderAttempt) + 20
	for _, name := range forward {
		if v, ok := req.Headers[name]; ok {
			room += len(name) + len(v) + 10
		}
	}
	return room
}

// ResultLimit returns the turn.ResultLimit of req's turn for a results producer whose
// Producer.MaxMessageBytes is maxMessageBytes (sarama refuses a larger record,
// ProducerMessage.ByteSize): that limit less ResultRoom(req, forward), with
// ResultLimitSource(maxMessageBytes) as its Source.
func ResultLimit(maxMessageBytes int, req *turn.Request, forward []string) turn.ResultLimit {
	return turn.ResultLimit{Bytes: maxMessageBytes - ResultRoom(req, forward), Source: ResultLimitSource(maxMessageBytes)}
}

// ResultLimitSource names the limit of a producer whose Producer.MaxMessageBytes is
// maxMessageBytes, for a dead letter's reason (turn.ResultLimit.Source).
func ResultLimitSource(maxMessageBytes int) string {
	return "the producer's Producer.MaxMessageBytes of " + strconv.Itoa(maxMessageBytes) + " bytes, less room for the record's key and headers"
}
