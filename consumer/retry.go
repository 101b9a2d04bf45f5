package consumer

import (
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/turnstile-go/turnstile/turn"
)

// counts is what one record's turn has met so far in this member, across its attempts: run
// keeps it, attempt adds each attempt to it, decide reads it and act acts on it.
type counts struct {
	// failures are the failed attempts (KindAttempt, or the turn's own deadline), bounded by
	// Config.MaxAttempts.
	failures int
	calls    int  // Handler calls, for the process span
	alone    bool // a KindRunAlone asked that the turn run with no other beside it from now on
	// rate is the request's rate limits (throttle.go); Config.MaxRateLimits bounds the counted ones.
	rate rateLimits
	// probe says that the current attempt is the throttle's probe: its outcome must end it.
	probe bool
	bo    *backoff.ExponentialBackOff // the retry backoff, made at the first retry: most turns have none
}

// retryIn returns the next wait of the turn's retry backoff, from RetryBackoff up to
// MaxRetryBackoff, with jitter.
func (n *counts) retryIn(cfg *Config) time.Duration {
	if n.bo == nil {
		n.bo = newBackoff(cfg.RetryBackoff, cfg.MaxRetryBackoff)
	}
	return n.bo.NextBackOff()
}

// endProbeOnPanic, deferred by run, ends the attempt's probe when a panic (telemetry's, say)
// leaves run between the throttle's wait and the probe's outcome, and raises the panic again:
// a probe left held would keep every turn of the member waiting for it.
func (n *counts) endProbeOnPanic(t *throttle) {
	if v := recover(); v != nil {
		t.endProbe(n.probe)
		panic(v)
	}
}

// outcome is what one attempt of a turn came to, as attempt reports it and decide reads it.
type outcome struct {
	// stopped: the partition closed (revoke, shutdown) while the turn waited, for the throttle
	// or to run alone; the Handler was not called.
	stopped bool
	// aborted: the Handler failed after the partition closed; whatever it made of that.
	aborted bool
	// kind is turn.Classify of err, except that KindAbandoned from the turn's own context (a
	// TurnContextFunc's deadline, not a revoke) is KindAttempt.
	kind turn.Kind
	err  error
	// own: a KindRateLimited met while other requests pass (rateLimits.limited).
	own     bool
	at      uint64       // the throttle's clock before the Handler was called (throttle.succeeded)
	res     *turn.Result // the Handler's Result, on success
	encoded []byte       // res encoded by the Handler, when it has it
}

// limits are the Config bounds that decide applies.
type limits struct {
	maxAttempts   int // Config.MaxAttempts
	maxRateLimits int // Config.MaxRateLimits
}

// action is what act does with a turn after an attempt.
type action int

const (
	// actResult: the turn succeeded; publish its result (or nothing, for a nil Result).
	actResult action = iota
	// actDeadLetter: the turn is done with; dead-letter the record with the decision's reason,
	// attempts and kind.
	actDeadLetter
	// actAbandon: the partition closed; leave the record to its next owner (nothing is handed off).
	actAbandon
	// actPause: the model is rate limited for every request; pause every partition (the
	// throttle's wait holds the next attempt).
	actPause
	// actBackOffAlone: rate limited while other requests pass; the request alone waits its own
	// rate-limit backoff, no partition pauses.
	actBackOffAlone
	// actRetryUnavailable: a dependency is down; retry after the retry backoff, no attempt spent.
	actRetryUnavailable
	// actRetryFailed: the attempt failed and attempts remain; retry after the retry backoff.
	actRetryFailed
	// actRunAlone: retry at once with no other turn of the member in a Handler call.
	actRunAlone
	// actRetry: retry at once; only for a Kind that turn.Classify never makes.
	actRetry
)

// decision is decide's answer: what to do with the turn after an attempt, and with what.
type decision struct {
	act action
	// endProbe: the attempt's probe (if it was one) ends now, so that another turn may probe.
	// The other ends of a probe are the throttle's: succeeded (actResult) and pause (actPause).
	endProbe bool
	reason   string        // actDeadLetter: the dead letter's reason
	attempts int           // actDeadLetter: its attempts header; actRetryFailed: the attempt to log
	kind     turn.Kind     // actDeadLetter: its kind header
	delay    time.Duration // actPause, actBackOffAlone: the delay the model asked for (turn.RetryDelay)
}

// decide says what to do with a turn after attempt o, given its counts with o counted (see
// attempt) and the Config bounds. It is a pure function of them: the throttle, stats,
// metrics, logs and sleeps are act's.
func decide(o outcome, n counts, lim limits) decision {
	switch {
	case o.stopped:
		// No Handler call, but the wait may have made it the probe (a turn that waited to run
		// alone): a probe left held would keep every turn of the member waiting.
		return decision{act: actAbandon, endProbe: true}
	case o.aborted:
		return decision{act: actAbandon, endProbe: true}
	}
	switch o.kind {
	case turn.KindNone:
		return decision{act: actResult}
	case turn.KindPermanent:
		d := decision{act: actDeadLetter, endProbe: true, reason: o.err.Error(), attempts: n.failures + 1,
			kind: turn.KindPermanent}
		var dle *turn.DeadLetterError
		if errors.As(o.err, &dle) {
			d.reason, d.attempts, d.kind = dle.Reason, dle.Attempts, dle.Kind
		}
		return d
	case turn.KindRateLimited:
		return decideRateLimited(o, n, lim)
	case turn.KindUnavailable:
		return decision{act: actRetryUnavailable, endProbe: true}
	case turn.KindAttempt, turn.KindAbandoned:
		return decideFailed(o, n, lim)
	case turn.KindRunAlone:
		// Its last attempt ended with a member while other turns ran: run it again with none
		// beside it, so that only its own crash counts (turn.WithCrashIsolation).
		return decision{act: actRunAlone, endProbe: true}
	}
	return decision{act: actRetry, endProbe: true}
}

// decideRateLimited is decide for a KindRateLimited attempt: dead-lettered at
// Config.MaxRateLimits counted rate limits (always refused: no pause for it, and another turn
// may probe, G5), else backed off alone when refused while others pass, else every partition
// pauses.
func decideRateLimited(o outcome, n counts, lim limits) decision {
	d, _ := turn.RetryDelay(o.err)
	switch {
	case n.rate.counted >= lim.maxRateLimits:
		return decision{act: actDeadLetter, endProbe: true, reason: n.rate.reason(o.err), attempts: n.failures,
			kind: turn.KindRateLimited}
	case o.own:
		return decision{act: actBackOffAlone, endProbe: true, delay: d}
	}
	return decision{act: actPause, delay: d}
}

// decideFailed is decide for a failed attempt: dead-lettered once the failures reach
// Config.MaxAttempts, else retried. The attempt is the Runner's count (*turn.AttemptError)
// when there is one, else this member's.
func decideFailed(o outcome, n counts, lim limits) decision {
	attempt := n.failures
	var ae *turn.AttemptError
	if errors.As(o.err, &ae) {
		attempt = ae.Attempt
	}
	if n.failures >= lim.maxAttempts {
		reason := fmt.Sprintf("%d attempts failed in this member; last error: %v", n.failures, o.err)
		return decision{act: actDeadLetter, endProbe: true, reason: reason, attempts: attempt, kind: turn.KindAttempt}
	}
	return decision{act: actRetryFailed, endProbe: true, attempts: attempt}
}
