// Package deadletter reads turnstile's dead letters back and re-drives them: for the day
// after go-live, when a request dead-lettered for a bug must run once the bug is fixed.
//
// [Read] lists the dead letters of a dead-letter topic that match a [Filter] (request id,
// reason, source partition and offset, time). [Redrive] makes each one's inbox entry
// runnable again (inbox.Inbox.Redrive, which keeps the earlier reason in the entry's audit)
// and publishes the original record again to the requests topic, on its source partition,
// under its original key and headers; a dead letter whose value was dropped (too large for the
// dead-letter topic: the consumer's value-dropped header) is re-driven from its source record,
// read again by its offset. What can never pass is refused, by a dry run too: a record over
// the producer's or the topic's size limit (ErrTooLarge) and, unless forced, a request the
// consumer refuses (ErrNeverPasses). Re-driving is idempotent: a dead letter re-driven twice
// gives one turn. Of two Redrives of one dead letter, concurrent or not, only one makes the
// entry runnable (inbox.Inbox.Redrive lets one win); the other publishes nothing once the
// request began or finished, and otherwise (the first one's record not consumed yet, or a
// re-drive that stopped before it published) publishes the request again, and the inbox runs
// whichever copy comes first and answers the other from the stored result.
//
// The cmd/turnstile CLI's `dlq list`, `dlq show` and `dlq redrive` are these functions.
package deadletter

import (
	"fmt"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"github.com/turnstile-go/turnstile/internal/record"
	"github.com/turnstile-go/turnstile/turn"
)

// HeaderRedrivenFrom is the header Redrive adds to a re-published request: the dead letter it
// came from, as "TOPIC/PARTITION/OFFSET". Parse leaves it out of Letter.Headers, so that a
// request dead-lettered again after a re-drive is re-driven with one, not two.
const HeaderRedrivenFrom = record.HeaderRedrivenFrom

// Values of Letter.Origin (the request-origin header, consumer.HeaderOrigin).
const (
	// OriginSubmit: the request came from Bridge.Submit of package workflow, not from a record
	// of the requests topic; Redrive sends it to Options.RequestsTopic on its key's partition.
	OriginSubmit = record.OriginSubmit
	// OriginGap: the dead letter reports a sequence that never arrived, skipped by a release
	// of its conversation (reason "gap", Letter.Sequence); there is no request to re-drive.
	// Its Letter.RequestID is the gap's identity, the same on every copy (a retried report
	// publishes the gap again): dedup on it.
	OriginGap = record.OriginGap
)

// Letter is one dead letter as read from the dead-letter topic, with turnstile's headers
// (consumer.HeaderReason and the others) parsed.
type Letter struct {
	// Topic, Partition and Offset locate the dead letter itself; Offset is its own.
	Topic     string
	Partition int32
	Offset    int64
	// Timestamp is the dead letter's record timestamp: when it was dead-lettered.
	Timestamp time.Time
	// Key is the request record's key (the conversation id); Value its value as it came, or
	// nil when ValueDropped says it was dropped.
	Key, Value []byte
	// Headers are the request record's own headers, without the consumer's dead-letter
	// headers.
	Headers []sarama.RecordHeader
	// RequestID and ConversationID are empty when the record did not decode.
	RequestID, ConversationID string
	// Reason says why it was dead-lettered; Error is the last error's text, if any.
	Reason, Error string
	// Attempts is the number of attempts spent.
	Attempts int
	// Kind is the turn.Kind of the error that dead-lettered the request (consumer.HeaderKind):
	// turn.KindPermanent, turn.KindAttempt or turn.KindRateLimited; turn.KindNone when the
	// dead letter does not say (written before the header existed, or by another tool).
	Kind turn.Kind
	// Source locates the request record; Source.Offset is -1 when the headers do not say,
	// and for a dead letter with no source record (Origin OriginSubmit or OriginGap).
	Source turn.Source
	// ValueDropped is the consumer's value-dropped header: why the value is missing (the
	// original size and the broker's refusal); empty when the value is there.
	ValueDropped string
	// HeadersDropped and KeyDropped are the consumer's headers-dropped and key-dropped
	// headers: the record's own headers, then its key, were left out too (still refused
	// without its value); empty when they are there.
	HeadersDropped, KeyDropped string
	// Origin is where the request came from when not from a record of the requests topic
	// (OriginSubmit, OriginGap; the request-origin header); empty for a record's dead letter.
	// WorkflowID is the conversation workflow that dead-lettered it (Temporal mode), and
	// Sequence the request's Sequence, or a gap's skipped sequence, when the dead letter says.
	Origin, WorkflowID string
	Sequence           int64
}

// ID returns "TOPIC/PARTITION/OFFSET" of the dead letter, the form HeaderRedrivenFrom and the
// CLI use.
func (l Letter) ID() string { return fmt.Sprintf("%s/%d/%d", l.Topic, l.Partition, l.Offset) }

// Parse reads a dead-letter record (record.Parse, the reader of what the consumer and the
// Temporal publisher write). Headers that are missing or malformed leave their field at its
// zero value (Source.Offset at -1); Parse never fails, so that a dead letter written by
// another tool is still listed.
func Parse(msg *sarama.ConsumerMessage) Letter {
	p := record.Parse(msg.Headers)
	l := Letter{Topic: msg.Topic, Partition: msg.Partition, Offset: msg.Offset, Timestamp: msg.Timestamp,
		Key: msg.Key, Value: msg.Value, Headers: p.Own, RequestID: p.RequestID, ConversationID: p.ConversationID,
		Reason: p.Reason, Error: p.Error, Attempts: p.Attempts, Kind: p.Kind, Source: p.Source,
		ValueDropped: p.ValueDropped, HeadersDropped: p.HeadersDropped, KeyDropped: p.KeyDropped,
		Origin: p.Origin, WorkflowID: p.WorkflowID, Sequence: p.Sequence}
	if l.ValueDropped != "" {
		l.Value = nil
	}
	if l.Source.Topic == "" {
		// No source record (a gap's or Bridge.Submit's dead letter writes empty source
		// headers): the headers do not say where a request came from.
		l.Source = turn.Source{Offset: -1}
	}
	return l
}

// Filter selects dead letters; the zero value selects all. Set fields must all match.
type Filter struct {
	// RequestID, when set, is the request id (consumer.HeaderRequestID) to match exactly.
	RequestID string
	// Reason, when set, must occur in the reason (case-sensitive).
	Reason string
	// SourcePartition and SourceOffset, when set, match the request record's location.
	SourcePartition *int32
	SourceOffset    *int64
	// Partition and Offset, when set, match the dead letter's own location.
	Partition *int32
	Offset    *int64
	// Since and Until, when set, bound the dead letter's timestamp: Since <= t < Until.
	Since, Until time.Time
}

// Match reports whether l passes f.
func (f Filter) Match(l Letter) bool {
	switch {
	case f.RequestID != "" && l.RequestID != f.RequestID,
		f.Reason != "" && !strings.Contains(l.Reason, f.Reason),
		f.SourcePartition != nil && l.Source.Partition != *f.SourcePartition,
		f.SourceOffset != nil && l.Source.Offset != *f.SourceOffset,
		f.Partition != nil && l.Partition != *f.Partition,
		f.Offset != nil && l.Offset != *f.Offset,
		!f.Since.IsZero() && l.Timestamp.Before(f.Since),
		!f.Until.IsZero() && !l.Timestamp.Before(f.Until):
		return false
	}
	return true
}
