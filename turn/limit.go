package turn

import (
	"context"
	"fmt"
)

// ResultLimit bounds the encoded size of the Result a caller of Runner.Run can publish: a
// Kafka producer refuses a record larger than its Producer.MaxMessageBytes, and a broker one
// larger than the topic's max.message.bytes (Kafka's topic configuration). With a limit in the
// context (WithResultLimit), the Runner checks the Result's encoding against it before it
// appends the turn to the session, so that an answer nobody can be given never becomes part
// of the conversation's history; the request is dead-lettered instead (a *ResultTooLargeError
// in a KindPermanent error). The consumer sets it from its producer's configuration.
type ResultLimit struct {
	// Bytes is the largest encoding of a Result, in bytes, that can be published: the record's
	// limit less the room its key and headers take. Zero or less means no limit.
	Bytes int
	// Source names the limit for the dead-letter reason, such as "the producer's
	// Producer.MaxMessageBytes of 1000000 bytes, less 412 bytes of key and headers".
	Source string
}

type resultLimitKey struct{}

// WithResultLimit returns ctx carrying l, which Runner.Run checks a new turn's Result against
// before appending it (see ResultLimit).
func WithResultLimit(ctx context.Context, l ResultLimit) context.Context {
	return context.WithValue(ctx, resultLimitKey{}, l)
}

// ResultLimitOf returns the ResultLimit that ctx carries; ok is false when it carries none (or
// one of zero Bytes).
func ResultLimitOf(ctx context.Context) (l ResultLimit, ok bool) {
	l, ok = ctx.Value(resultLimitKey{}).(ResultLimit)
	return l, ok && l.Bytes > 0
}

// ResultTooLargeError is a Result whose encoding exceeds the ResultLimit of its turn's
// context. The Runner returns it wrapped in a *DeadLetterError (KindPermanent), before the
// turn is appended: the session holds no turn of the request.
type ResultTooLargeError struct {
	RequestID string
	// Size is the Result's encoding in bytes; Limit is ResultLimit.Bytes.
	Size, Limit int
	// Source is ResultLimit.Source.
	Source string
}

// Error returns "result of request ID is N bytes encoded, over the limit of M bytes (SOURCE)".
func (e *ResultTooLargeError) Error() string {
	msg := fmt.Sprintf("result of request %s is %d bytes encoded, over the limit of %d bytes", e.RequestID, e.Size, e.Limit)
	if e.Source != "" {
		msg += " (" + e.Source + ")"
	}
	return msg
}

// resultSizeBound is an upper bound of the size of req's Result encoded with text as its
// answer: JSON escapes a byte to at most six ("\u00XX"), and the other fields are bounded.
func resultSizeBound(req Request, text string) int {
	n := len(text) + len(req.ID) + len(req.ConversationID) + len(req.UserID) + len(req.ReplyTo)
	for k, v := range req.Metadata {
		n += len(k) + len(v) + 1
	}
	const fixed = 256 // field names, the schema, the sequence, the event count and the time
	return 6*n + 6*len(req.Metadata) + fixed
}
