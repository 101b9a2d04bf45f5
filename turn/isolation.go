package turn

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/turnstile-go/turnstile/inbox"
)

// ErrRunAlone is what Runner.Run returns, under WithCrashIsolation(ctx, false), for a request
// whose last attempt ended with its process (a crash: killed, out of memory, a fault in a
// native library) while other turns ran beside it. Any of them may have killed the process,
// so that attempt is not held against this request: Run spent no attempt, and the caller
// runs the request again with no other turn in flight, passing WithCrashIsolation(ctx, true).
// Classify makes it KindRunAlone.
var ErrRunAlone = errors.New("turn: run this request alone: its last attempt ended with its process while other turns ran")

type isolationKey struct{}

// isolation is what the caller of Run told it about crash attribution.
type isolation uint8

const (
	isolationNone   isolation = iota // the caller cannot run a request alone: every crash counts
	isolationShared                  // the caller can; this call runs beside other turns
	isolationAlone                   // this call runs with no other turn in the process
)

// WithCrashIsolation returns ctx telling Runner.Run that its caller can run a request alone,
// with no other turn in flight in its process, and whether this call does (alone). The
// consumer passes it on every turn.
//
// With it, a crash (an attempt that ended with no outcome recorded in the inbox) counts
// against a request only when the request ran alone: a crash beside other turns sends the
// request back with ErrRunAlone (KindRunAlone, no attempt spent), and from then on the
// request runs alone, where a crash can only be its own. So a record that kills its process
// is dead-lettered after MaxAttempts crashes while alone (plus the first, beside others, that
// is not counted), and the requests that happened to run beside it are not (G5).
// Without it (Temporal mode, a host's own loop) every attempt that began counts, as the inbox
// has it.
//
// Run keeps what it needs for this in the inbox entry's Reason: it writes, before a lone
// attempt, "turn ID attempt N alone: ...", and after a failed attempt "turn ID attempt N: ..."
// (counted) or "turn ID attempt N (not counted): ..." (refunded). An attempt whose outcome
// is not there (nor its lone mark) ended with its process beside others, or its inbox write
// failed; either way it is not counted.
func WithCrashIsolation(ctx context.Context, alone bool) context.Context {
	iso := isolationShared
	if alone {
		iso = isolationAlone
	}
	return context.WithValue(ctx, isolationKey{}, iso)
}

func isolationOf(ctx context.Context) isolation {
	iso, _ := ctx.Value(isolationKey{}).(isolation)
	return iso
}

// lastEnd is how a request's last attempt ended, as its inbox entry tells.
type lastEnd uint8

const (
	endExplained    lastEnd = iota // failed or refunded with its outcome recorded, or none ran
	endCrashedAlone                // ran alone and ended with no outcome recorded: counted
	endCrashed                     // ended with no outcome recorded, not alone: not counted
)

// Reason marks of the attempts, parsed back by lastAttemptEnd.
const (
	markCounted = ":"
	markRefund  = " (not counted):"
	markAlone   = " alone:"
)

// attemptReason is the inbox reason of attempt n of request id, with its mark and the detail.
func attemptReason(id string, n int, mark, detail string) string {
	return "turn " + id + " attempt " + strconv.Itoa(n) + mark + " " + detail
}

// lastAttemptEnd tells how the attempt before this delivery ended. Begin has counted this
// delivery, so the last attempt is number e.Attempts-1 when it was counted and e.Attempts
// when it was refunded.
func lastAttemptEnd(id string, e inbox.Entry) lastEnd {
	if e.Status != inbox.StatusInProgress || e.Attempts < 2 {
		return endExplained // a new request, or only refunded attempts before this one
	}
	rest, ok := strings.CutPrefix(e.Reason, "turn "+id+" attempt ")
	if !ok {
		return endCrashed
	}
	digits := len(rest) - len(strings.TrimLeft(rest, "0123456789"))
	n, err := strconv.Atoi(rest[:digits])
	if err != nil {
		return endCrashed
	}
	switch mark := rest[digits:]; {
	case strings.HasPrefix(mark, markCounted) && n == e.Attempts-1,
		strings.HasPrefix(mark, markRefund) && n == e.Attempts:
		return endExplained
	case strings.HasPrefix(mark, markAlone) && n == e.Attempts-1:
		return endCrashedAlone
	}
	return endCrashed
}

// attribute applies crash isolation to a delivery that Begin found in progress. It returns
// the attempt number this delivery runs as, or ErrRunAlone when it must run alone first.
// Its inbox writes are bookkeeping: when one fails, the crash it settles is judged again on
// the next delivery.
func (r *Runner) attribute(ctx context.Context, req Request, e inbox.Entry, iso isolation) (int, error) {
	end := lastAttemptEnd(req.ID, e)
	attempts := e.Attempts
	if end == endCrashed {
		attempts-- // the crash beside others is not the request's
	}
	if attempts > r.Attempts() || end == endExplained && iso != isolationAlone {
		return attempts, nil // exhausted (Run dead-letters it), or an ordinary attempt
	}
	if iso == isolationShared {
		// Give this delivery's count back, keeping the reason, which the lone run reads again.
		// The caller logs the ErrRunAlone.
		r.bookkeep(ctx, req, func(ctx context.Context) error {
			return r.Inbox.Fail(ctx, r.InboxKey(req), inbox.Failure{Reason: e.Reason, Refund: true})
		})
		return 0, fmt.Errorf("turn %s: %w", req.ID, ErrRunAlone)
	}
	// Alone: mark this attempt so that a crash of it is known to be the request's own, and
	// give back the count of a crash beside others.
	detail := "running with no other turn in flight"
	if end == endCrashed {
		detail += fmt.Sprintf("; attempt %d ended with its process beside other turns and is not counted", attempts)
	}
	r.bookkeep(ctx, req, func(ctx context.Context) error {
		return r.Inbox.Fail(ctx, r.InboxKey(req), inbox.Failure{Reason: attemptReason(req.ID, attempts, markAlone, detail),
			Refund: end == endCrashed})
	})
	return attempts, nil
}
