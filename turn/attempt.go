package turn

import "fmt"

// AttemptError is what Runner.Run returns for an attempt that ran and failed without
// dead-lettering the request: a failed attempt the inbox counted (Classify: KindAttempt), or
// one it gave back (KindRateLimited, KindUnavailable, KindAbandoned). Classify sees through it
// to Err. The Runner does not log it: the caller that decides what happens next (the
// consumer's retry, the Temporal activity's) logs it once, with Attempt.
type AttemptError struct {
	RequestID string
	// Attempt is the inbox's 1-based attempt count of this delivery.
	Attempt int
	// Err is the attempt's error.
	Err error
}

// Error formats "turn REQUEST_ID attempt N: ERR".
func (e *AttemptError) Error() string {
	return fmt.Sprintf("turn %s attempt %d: %v", e.RequestID, e.Attempt, e.Err)
}

// Unwrap returns Err.
func (e *AttemptError) Unwrap() error { return e.Err }
