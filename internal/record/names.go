// Package record owns the format of the records turnstile writes to Kafka: the header names of
// results and dead letters, building their headers, the shrinking of a dead letter that the
// dead-letter topic refuses, where results and dead letters land (the partitioner), the room
// a result record keeps for its key and headers, and reading a dead letter's headers back.
//
// The consumer (direct mode), the Temporal publisher (package workflow) and package deadletter
// all use it, so that both modes write the same records and the reader parses what they write.
// It imports only sarama, google/uuid and package turn. Header values are UTF-8 text; numbers in decimal.
package record

import "slices"

// Header names on result and dead-letter records.
const (
	// HeaderRequestID carries the request id (results, and dead letters when known). A gap
	// dead letter (OriginGap), which has no request, carries GapRequestID of its workflow and
	// sequence instead: the same on every copy, so a reader dedups on it.
	HeaderRequestID = "request-id"
	// HeaderConversationID carries the conversation id (results, and dead letters when known).
	HeaderConversationID = "conversation-id"
	// HeaderAttempt carries the inbox's attempt count when the result was produced (results).
	HeaderAttempt = "attempt"
	// HeaderReason says in one line why a record was dead-lettered (dead letters).
	HeaderReason = "reason"
	// HeaderError carries the last error's text, when there was one (dead letters).
	HeaderError = "error"
	// HeaderAttempts carries the number of attempts spent (dead letters).
	HeaderAttempts = "attempts"
	// HeaderSourceTopic, HeaderSourcePartition and HeaderSourceOffset locate the request
	// record, by its own offset (dead letters).
	HeaderSourceTopic     = "source-topic"
	HeaderSourcePartition = "source-partition"
	HeaderSourceOffset    = "source-offset"
	// HeaderValueDropped says that a dead letter carries no value because the record as it
	// came was refused by the dead-letter topic (too large): "B bytes; refused: ERROR", with
	// the value's size. The source headers locate the original, which stays on the requests
	// topic until retention (Shrink).
	HeaderValueDropped = "value-dropped"
	// HeaderHeadersDropped says that a dead letter carries none of the record's own headers
	// because, with them, it was still refused without its value: "N headers, B bytes"
	// (Shrink).
	HeaderHeadersDropped = "headers-dropped"
	// HeaderKeyDropped says that a dead letter carries no key because, with it, it was still
	// refused without its value and headers: "B bytes", the key's size. Such a dead letter
	// keeps the request's partition when the dead-letter topic has as many partitions
	// (Shrink, NewPartitioner).
	HeaderKeyDropped = "key-dropped"
	// HeaderKind carries the turn.Kind (its String; turn.ParseKind reads it back) of the error
	// that dead-lettered the record: "permanent" (a record that is not a valid request, another
	// user's conversation, a turn.Permanent error, an answer too large to publish), "attempt"
	// (the attempts ran out, panics included) or "rate_limited" (the rate limits ran out), so
	// that an operator can tell a bad record from a failing dependency without parsing the
	// reason (dead letters).
	HeaderKind = "kind"
	// HeaderRedrivenFrom is the header package deadletter's Redrive adds to a re-published
	// request: the dead letter it came from, as "TOPIC/PARTITION/OFFSET". It is not a
	// dead-letter header: a re-driven request that is dead-lettered again keeps it as one of
	// the record's own headers, and Parse leaves it out of Parsed.Own so that a second
	// re-drive does not carry two.
	HeaderRedrivenFrom = "redriven-from"
	// HeaderReplayedFrom is the header the CLI's replay (turnstile replay) adds to each
	// request record it copies into a sandbox topic: the original, as "TOPIC/PARTITION/OFFSET".
	// Replay reads it back to tell a sandbox's copies from production records.
	HeaderReplayedFrom = "replayed-from"
	// HeaderOrigin ("request-origin", not "origin", which producers use for their own) says
	// where a dead letter's request came from when it was not a record of
	// the requests topic: OriginSubmit (Bridge.Submit of package workflow: the source headers
	// say nothing) or OriginGap (a sequence that never arrived, skipped by a release: there is
	// no request). Absent on a dead letter of a record (dead letters).
	HeaderOrigin = "request-origin"
	// HeaderWorkflowID carries the id of the conversation workflow that dead-lettered the
	// request (Temporal mode's dead letters).
	HeaderWorkflowID = "workflow-id"
	// HeaderSequence carries the request's Sequence when it has one, and on a gap dead letter
	// the skipped sequence (Temporal mode's dead letters).
	HeaderSequence = "request-sequence"
)

// Values of HeaderOrigin.
const (
	// OriginSubmit: the request came from Bridge.Submit (an update), not from a record; it is
	// re-driven to the requests topic on its key's partition.
	OriginSubmit = "submit"
	// OriginGap: no request; the dead letter reports a sequence a release skipped
	// (HeaderSequence), identified by GapRequestID in HeaderRequestID. There is nothing to
	// re-drive.
	OriginGap = "gap"
)

// resultNames and deadLetterNames are the one list of each record's headers, in the order
// ResultHeaders and DeadLetter.Headers write them (the drop notes last).
var (
	resultNames     = [...]string{HeaderRequestID, HeaderConversationID, HeaderAttempt}
	deadLetterNames = [...]string{HeaderReason, HeaderAttempts, HeaderSourceTopic, HeaderSourcePartition,
		HeaderSourceOffset, HeaderKind, HeaderError, HeaderRequestID, HeaderConversationID,
		HeaderOrigin, HeaderWorkflowID, HeaderSequence,
		HeaderValueDropped, HeaderHeadersDropped, HeaderKeyDropped}
)

// ResultHeaderNames returns the names of the headers turnstile sets on a result record (a new
// slice each call), in the order ResultHeaders writes them. Forwarded headers (Forward) and a
// trace context come after them and are not turnstile's.
func ResultHeaderNames() []string { return slices.Clone(resultNames[:]) }

// DeadLetterHeaderNames returns the names of the headers turnstile sets on a dead letter (a
// new slice each call): those DeadLetter.Headers writes, in its order, then the notes Shrink
// adds. Every one is IsDeadLetterHeader.
func DeadLetterHeaderNames() []string { return slices.Clone(deadLetterNames[:]) }

// IsDeadLetterHeader reports a header name that turnstile sets on dead letters (every name of
// DeadLetterHeaderNames; HeaderAttempt, which only results carry, is not one). A dead letter
// never copies a record's own header of such a name (a producer cannot forge a reason or a
// note of what was dropped), and Parse reads those names as turnstile's.
func IsDeadLetterHeader(name string) bool { return slices.Contains(deadLetterNames[:], name) }
