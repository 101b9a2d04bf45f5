package consumer

import (
	"github.com/IBM/sarama"

	rec "github.com/turnstile-go/turnstile/internal/record"
	"github.com/turnstile-go/turnstile/turn"
)

// Header names on result and dead-letter records (package internal/record owns the format;
// these are its names). Values are UTF-8 text; numbers in decimal.
const (
	// HeaderRequestID carries the request id (results and dead letters, when known).
	HeaderRequestID = rec.HeaderRequestID
	// HeaderConversationID carries the conversation id (results and dead letters, when known).
	HeaderConversationID = rec.HeaderConversationID
	// HeaderAttempt carries the inbox's attempt count when the result was produced (results).
	HeaderAttempt = rec.HeaderAttempt
	// HeaderReason says in one line why a record was dead-lettered (dead letters).
	HeaderReason = rec.HeaderReason
	// HeaderError carries the last error's text, when there was one (dead letters).
	HeaderError = rec.HeaderError
	// HeaderAttempts carries the number of attempts spent (dead letters).
	HeaderAttempts = rec.HeaderAttempts
	// HeaderSourceTopic, HeaderSourcePartition and HeaderSourceOffset locate the original
	// record, its own offset (dead letters).
	HeaderSourceTopic     = rec.HeaderSourceTopic
	HeaderSourcePartition = rec.HeaderSourcePartition
	HeaderSourceOffset    = rec.HeaderSourceOffset
	// HeaderValueDropped says that a dead letter carries no value because the record as it
	// came was refused by the dead-letter topic (too large), with the original size; the
	// source headers locate the original, which stays on the requests topic until retention.
	HeaderValueDropped = rec.HeaderValueDropped
	// HeaderHeadersDropped says that a dead letter carries none of the record's own headers
	// because, with them, it was still refused without its value: "N headers, B bytes".
	HeaderHeadersDropped = rec.HeaderHeadersDropped
	// HeaderKeyDropped says that a dead letter carries no key because, with it, it was still
	// refused without its value and headers: "B bytes" (the key's size). Such a dead letter
	// keeps the request's partition when the dead-letter topic has as many partitions.
	HeaderKeyDropped = rec.HeaderKeyDropped
	// HeaderKind carries the turn.Kind (its String, turn.ParseKind reads it back) of the error
	// that dead-lettered the record: "permanent" (a record that is not a valid request, another
	// user's conversation, a turn.Permanent error, an answer too large to publish), "attempt"
	// (the attempts ran out, panics included) or "rate_limited" (Config.MaxRateLimits), so
	// that an operator can tell a bad record from a failing dependency without parsing the
	// reason (dead letters).
	HeaderKind = rec.HeaderKind
	// HeaderOrigin says where a dead letter's request came from when it was not a record of
	// the requests topic (Temporal mode): "submit" (Bridge.Submit) or "gap" (a sequence that
	// never arrived, skipped by a release; there is no request). Absent otherwise.
	HeaderOrigin = rec.HeaderOrigin
	// HeaderWorkflowID carries the id of the conversation workflow that dead-lettered the
	// request (Temporal mode).
	HeaderWorkflowID = rec.HeaderWorkflowID
	// HeaderSequence carries the request's Sequence, or a gap dead letter's skipped sequence
	// (Temporal mode).
	HeaderSequence = rec.HeaderSequence
)

// newPartitioner places results and dead letters (record.NewPartitioner): on the request's
// partition index when the target topic has as many partitions as the requests topic
// (co-partitioned), else where a Java producer would put the key (murmur2).
var newPartitioner sarama.PartitionerConstructor = rec.NewPartitioner

// Placement returns where ob's request came from, for record.NewPartitioner: its partition and
// the requests topic's partition count when the outcome was built.
func (ob *outbound) Placement() rec.Placement {
	return rec.Placement{Partition: ob.r.msg.Partition, Partitions: ob.partitions}
}

// ResultLimit returns the turn.ResultLimit of req's turn for a results producer whose
// Producer.MaxMessageBytes is maxMessageBytes (sarama refuses a larger record,
// ProducerMessage.ByteSize): that limit less the room the result record's key and headers
// take, with the request headers named in forward copied onto it (Config.ForwardHeaders) and
// a trace context injected (record.ResultLimit, the one rule). The consumer puts it in every
// Handler call's context; the Temporal activity does the same with its publisher's limit.
func ResultLimit(maxMessageBytes int, req *turn.Request, forward []string) turn.ResultLimit {
	return rec.ResultLimit(maxMessageBytes, req, forward)
}

// resultLimit is ResultLimit for this consumer's producer, with the source text made once in
// New rather than per record.
func (c *Consumer) resultLimit(req *turn.Request) turn.ResultLimit {
	return turn.ResultLimit{Bytes: c.maxRecordBytes - rec.ResultRoom(req, c.cfg.ForwardHeaders), Source: c.resultLimitSource}
}
