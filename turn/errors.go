package turn

import (
	"errors"
	"fmt"
	"time"

	"github.com/turnstile-go/turnstile/session"
)

// ErrTurnTimeout is the cause of a turn that ran past the Runner's TurnTimeout. It counts as a
// failed attempt: the next delivery tries again, up to the attempt limit (G5).
var ErrTurnTimeout = errors.New("turn: whole-turn deadline exceeded")

// ErrAbandoned marks a turn whose caller's context ended (a revoked partition, a shutdown)
// before it finished. It is not the request's fault: no attempt is spent, and the record is
// served again by the partition's next owner. A bare context.Canceled or DeadlineExceeded
// from a model or store whose caller is still waiting (an HTTP client's own timeout, say) is
// not abandonment: it counts as a failed attempt.
var ErrAbandoned = errors.New("turn: abandoned by its caller")

// Kind says what a caller of Runner.Run should do with an error.
type Kind int

const (
	// KindNone: no error.
	KindNone Kind = iota
	// KindAttempt: the attempt failed and was counted in the inbox; retry after a backoff.
	// The Runner dead-letters the request itself once the attempts run out.
	KindAttempt
	// KindPermanent: never retry. From Runner.Run this is a *DeadLetterError: publish the
	// request to the dead-letter topic, then commit its offset.
	KindPermanent
	// KindRateLimited: the model is rate limited (RetryAfter); pause and retry after
	// RetryDelay. No attempt was spent.
	KindRateLimited
	// KindUnavailable: an infrastructure failure (a store unreachable, a version conflict with
	// another writer); retry after a backoff. No attempt was spent.
	KindUnavailable
	// KindAbandoned: the caller's context ended (shutdown, revoked partition): ErrAbandoned.
	// The turn was abandoned, not failed, and no attempt was spent. Do not commit the record.
	KindAbandoned
	// KindRunAlone: ErrRunAlone. The request's last attempt ended with its process while
	// other turns ran beside it; run it again with no other turn in flight in the process,
	// passing WithCrashIsolation(ctx, true). No attempt was spent.
	KindRunAlone

	// numKinds counts the kinds above; a kind added before it must get its name in kindNames,
	// which TestEveryKindIsNamed checks, and so reaches every user built from Kinds.
	numKinds
)

// KindCanceled is the former name of KindAbandoned.
//
// Deprecated: use KindAbandoned.
const KindCanceled = KindAbandoned

// kindNames is the one list of the kinds' names, indexed by Kind; String reads it and Kinds
// walks it, so that a user of every kind (metric attributes, log text, Temporal's error types)
// built from Kinds cannot miss one.
var kindNames = [numKinds]string{
	KindNone:        "none",
	KindAttempt:     "attempt",
	KindPermanent:   "permanent",
	KindRateLimited: "rate_limited",
	KindUnavailable: "unavailable",
	KindAbandoned:   "abandoned",
	KindRunAlone:    "run_alone",
}

// Kinds returns every Kind, in declaration order (KindNone first). Code that keeps something
// per kind (a metric attribute set, a label, an error type) builds it from this list, so that
// a kind added later has its entry without anyone remembering to add it.
func Kinds() []Kind {
	ks := make([]Kind, numKinds)
	for i := range ks {
		ks[i] = Kind(i)
	}
	return ks
}

// String returns the kind's name in lower case: "none", "attempt", "permanent",
// "rate_limited", "unavailable", "abandoned" or "run_alone"; "Kind(N)" for a value that is not
// a Kind.
func (k Kind) String() string {
	if k >= 0 && k < numKinds && kindNames[k] != "" {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// ParseKind returns the Kind whose String is s; ok is false when no kind has that name.
func ParseKind(s string) (k Kind, ok bool) {
	for i, name := range kindNames {
		if name == s {
			return Kind(i), true
		}
	}
	return 0, false
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return "permanent: " + e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent reports true: the error satisfies interface{ Permanent() bool }, which is how
// inbox.Relay tells a delivery it must not retry.
func (e *permanentError) Permanent() bool { return true }

// Permanent marks err as one that retrying cannot fix (a rejected prompt, a malformed
// request): the Runner dead-letters the request at once instead of spending its attempts, and
// an outbox relay (inbox.Relay) buries an intent whose delivery returns it, as the error
// satisfies interface{ Permanent() bool }. Permanent(nil) returns nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

type retryAfterError struct {
	delay time.Duration
	err   error
}

func (e *retryAfterError) Error() string {
	return fmt.Sprintf("rate limited, retry after %s: %v", e.delay, e.err)
}
func (e *retryAfterError) Unwrap() error { return e.err }

// RetryAfter returns the delay the error asks for: what inbox.Relay reads (through the
// interface{ RetryAfter() time.Duration }, for the inbox package cannot import turn) to wait
// before it delivers an intent again.
func (e *retryAfterError) RetryAfter() time.Duration { return e.delay }

// RetryAfter marks err as a rate limit (an HTTP 429, say) that lifts after d. The consumer
// pauses its partitions and runs the turn again after the delay (or its own backoff, if
// longer) without spending an attempt; inbox.Relay, given it by a Deliver, delivers the intent
// again after the delay (or its backoff, if longer), the attempt counted. A d <= 0 leaves the
// delay to the caller's backoff. RetryAfter(d, nil) returns nil.
func RetryAfter(d time.Duration, err error) error {
	if err == nil {
		return nil
	}
	return &retryAfterError{delay: max(d, 0), err: err}
}

type unavailableError struct{ err error }

func (e *unavailableError) Error() string   { return "unavailable: " + e.err.Error() }
func (e *unavailableError) Unwrap() error   { return e.err }
func (e *unavailableError) Retryable() bool { return true }

// Unavailable marks err as an outage of a dependency that is no fault of the request (a model
// server that refuses connections, answers 503, or restarts): Classify makes it
// KindUnavailable, so the consumer retries after a backoff without spending an attempt. Use it
// only where the request cannot be the cause, or a poison request would retry forever.
// Unavailable(nil) returns nil.
func Unavailable(err error) error {
	if err == nil {
		return nil
	}
	return &unavailableError{err: err}
}

// RetryDelay returns the delay of the RetryAfter error in err's chain, if there is one.
func RetryDelay(err error) (time.Duration, bool) {
	var ra *retryAfterError
	if errors.As(err, &ra) {
		return ra.delay, true
	}
	return 0, false
}

// DeadLetterError is what Runner.Run returns for a request that is dead: a permanent error,
// attempts exhausted, or dead-lettered before. The request is marked dead in the inbox; the
// caller publishes it to the dead-letter topic with Reason and Attempts, then commits.
type DeadLetterError struct {
	RequestID string
	// Reason is a one-line explanation for operators (the dead-letter "reason" header).
	Reason string
	// Attempts is the number of attempts the inbox counted.
	Attempts int
	// Err is the error of the last attempt, when this run saw one.
	Err error
	// Kind says why: KindPermanent (a permanent error, an invalid request, another user's
	// conversation, an answer too large to publish) or KindAttempt (its attempts ran out);
	// KindNone when this run does not know (a request dead-lettered by an earlier delivery,
	// answered from the inbox). The consumer writes it in the dead letter's kind header.
	Kind Kind
}

// Error formats the request id, the attempts and the reason on one line.
func (e *DeadLetterError) Error() string {
	return fmt.Sprintf("turn: request %s dead-lettered after %d attempts: %s", e.RequestID, e.Attempts, e.Reason)
}

// Unwrap returns the last attempt's error (nil when this run saw none).
func (e *DeadLetterError) Unwrap() error { return e.Err }

// retryable is how stores tell infrastructure failures apart without importing this package.
type retryable interface{ Retryable() bool }

// Classify says what to do with an error from Runner.Run or a ModelClient. In order: nil is
// KindNone; Permanent errors, *DeadLetterError, *DecodeError, session.ErrOwnerMismatch and
// session.ErrInvalid are KindPermanent; RetryAfter errors are KindRateLimited; ErrTurnTimeout
// is KindAttempt; ErrAbandoned is KindAbandoned; ErrRunAlone is KindRunAlone; errors with
// a Retryable() bool method that returns true and session.ErrConflict are KindUnavailable;
// anything else is KindAttempt.
func Classify(err error) Kind {
	if err == nil {
		return KindNone
	}
	var (
		perm *permanentError
		dead *DeadLetterError
		dec  *DecodeError
		ra   *retryAfterError
		rt   retryable
	)
	switch {
	case errors.As(err, &perm), errors.As(err, &dead), errors.As(err, &dec),
		errors.Is(err, session.ErrOwnerMismatch), errors.Is(err, session.ErrInvalid):
		return KindPermanent
	case errors.As(err, &ra):
		return KindRateLimited
	case errors.Is(err, ErrTurnTimeout):
		return KindAttempt
	case errors.Is(err, ErrAbandoned):
		return KindAbandoned
	case errors.Is(err, ErrRunAlone):
		return KindRunAlone
	case errors.As(err, &rt) && rt.Retryable(), errors.Is(err, session.ErrConflict):
		return KindUnavailable
	}
	return KindAttempt
}
