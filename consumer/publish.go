package consumer

import (
	"strconv"

	"github.com/IBM/sarama"

	"github.com/turnstile-go/turnstile/turn"
)

// Header names on result and dead-letter records. Values are UTF-8 text; numbers in decimal.
const (
	// HeaderRequestID carries the request id (results and dead letters, when known).
	HeaderRequestID = "request-id"
	// HeaderConversationID carries the conversation id (results and dead letters, when known).
	HeaderConversationID = "conversation-id"
	// HeaderAttempt carries the inbox's attempt count when the result was produced (results).
	HeaderAttempt = "attempt"
	// HeaderReason says in one line why a record was dead-lettered (dead letters).
	HeaderReason = "reason"
	// HeaderError carries the last error's text, when there was one (dead letters).
	HeaderError = "error"
	// HeaderAttempts carries the number of attempts spent (dead letters).
	HeaderAttempts = "attempts"
	// HeaderSourceTopic, HeaderSourcePartition and HeaderSourceOffset locate the original
	// record, its own offset (dead letters).
	HeaderSourceTopic     = "source-topic"
	HeaderSourcePartition = "source-partition"
	HeaderSourceOffset    = "source-offset"
	// HeaderValueDropped says that a dead letter carries no value because the record as it
	// came was refused by the dead-letter topic (too large), with the original size; the
	// source headers locate the original, which stays on the requests topic until retention.
	HeaderValueDropped = "value-dropped"
	// HeaderHeadersDropped says that a dead letter carries none of the record's own headers
	// because, with them, it was still refused without its value: "N headers, B bytes".
	HeaderHeadersDropped = "headers-dropped"
	// HeaderKeyDropped says that a dead letter carries no key because, with it, it was still
	// refused without its value and headers: "B bytes" (the key's size). Such a dead letter
	// keeps the request's partition when the dead-letter topic has as many partitions.
	HeaderKeyDropped = "key-dropped"
	// HeaderKind carries the turn.Kind (its String, turn.ParseKind reads it back) of the error
	// that dead-lettered the record: "permanent" (a record that is not a valid request, another
	// user's conversation, a turn.Permanent error, an answer too large to publish), "attempt"
	// (the attempts ran out, panics included) or "rate_limited" (Config.MaxRateLimits), so
	// that an operator can tell a bad record from a failing dependency without parsing the
	// reason (dead letters).
	HeaderKind = "kind"
)

// partitioner places results and dead letters: on the request's partition index when the
// target topic has as many partitions as the requests topic (co-partitioned, whatever
// partitioner the upstream producer used), else where a Java producer would put the key
// (murmur2, sarama.NewMurmur2Partitioner), never on sarama's default FNV-1a hash.
type partitioner struct{ murmur2 sarama.Partitioner }

func newPartitioner(topic string) sarama.Partitioner {
	return &partitioner{murmur2: sarama.NewMurmur2Partitioner(topic)}
}

func (p *partitioner) Partition(msg *sarama.ProducerMessage, numPartitions int32) (int32, error) {
	if ob, ok := msg.Metadata.(*outbound); ok && ob.partitions == numPartitions && ob.r.msg.Partition < numPartitions {
		return ob.r.msg.Partition, nil
	}
	return p.murmur2.Partition(msg, numPartitions)
}

func (p *partitioner) RequiresConsistency() bool { return true }

func (p *partitioner) MessageRequiresConsistency(msg *sarama.ProducerMessage) bool {
	return msg.Key != nil || msg.Metadata != nil
}

// The names of a result's headers as bytes, shared by every result record (the producer
// only reads them).
var (
	requestIDKey      = []byte(HeaderRequestID)
	conversationIDKey = []byte(HeaderConversationID)
	attemptKey        = []byte(HeaderAttempt)
)

// resultHeaders returns the headers of req's result: its request id, its conversation id and
// the attempt, in a slice with room for extra more. The three values share one allocation.
func resultHeaders(req *turn.Request, attempt, extra int) []sarama.RecordHeader {
	id, conv := len(req.ID), len(req.ID)+len(req.ConversationID)
	values := append(append(make([]byte, 0, conv+20), req.ID...), req.ConversationID...)
	values = strconv.AppendInt(values, int64(attempt), 10)
	hs := make([]sarama.RecordHeader, 3, 3+extra)
	hs[0] = sarama.RecordHeader{Key: requestIDKey, Value: values[:id:id]}
	hs[1] = sarama.RecordHeader{Key: conversationIDKey, Value: values[id:conv:conv]}
	hs[2] = sarama.RecordHeader{Key: attemptKey, Value: values[conv:]}
	return hs
}

func header(k, v string) sarama.RecordHeader {
	return sarama.RecordHeader{Key: []byte(k), Value: []byte(v)}
}

func itoa[T int | int32 | int64](v T) string { return strconv.FormatInt(int64(v), 10) }

// resultRecordRoom is the room, in bytes, a result record keeps for what is not the Result's
// encoding: sarama's per-record overhead in a record batch (maximumRecordOverhead, 36 bytes)
// and each header's two length varints (10 bytes), rounded up, plus the trace context that
// telemetry may inject (traceparent and a tracestate of up to 512 bytes, W3C Trace Context).
const resultRecordRoom = 128 + 600

// ResultLimit returns the turn.ResultLimit of req's turn for a results producer whose
// Producer.MaxMessageBytes is maxMessageBytes (sarama refuses a larger record,
// ProducerMessage.ByteSize): that limit less the room the result record's key and headers
// take, with the request headers named in forward copied onto it (Config.ForwardHeaders) and
// a trace context injected. The consumer puts it in every Handler call's context; the
// Temporal activity does the same with its publisher's limit.
func ResultLimit(maxMessageBytes int, req *turn.Request, forward []string) turn.ResultLimit {
	return turn.ResultLimit{Bytes: maxMessageBytes - resultRoom(req, forward), Source: resultLimitSource(maxMessageBytes)}
}

// resultRoom is the room, in bytes, that req's result record keeps for its key and headers.
func resultRoom(req *turn.Request, forward []string) int {
	room := resultRecordRoom + len(req.ConversationID) + // the key
		len(HeaderRequestID) + len(req.ID) + len(HeaderConversationID) + len(req.ConversationID) + len(HeaderAttempt) + 20
	for _, name := range forward {
		if v, ok := req.Headers[name]; ok {
			room += len(name) + len(v) + 10
		}
	}
	return room
}

// resultLimitSource names the limit in a dead letter's reason.
func resultLimitSource(maxMessageBytes int) string {
	return "the producer's Producer.MaxMessageBytes of " + strconv.Itoa(maxMessageBytes) + " bytes, less room for the record's key and headers"
}

// resultLimit is ResultLimit for this consumer's producer, with the source text made once in
// New rather than per record.
func (c *Consumer) resultLimit(req *turn.Request) turn.ResultLimit {
	return turn.ResultLimit{Bytes: c.maxRecordBytes - resultRoom(req, c.cfg.ForwardHeaders), Source: c.resultLimitSource}
}
