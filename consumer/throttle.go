package consumer

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// throttle pauses every assigned partition while the model is rate limited. The member stays
// in the group (sarama keeps heartbeating; pausing fetches does not rebalance), records that
// still arrive from fetches in flight wait in their windows, and no turn starts until the
// pause ends. Then one turn probes the model alone (a circuit breaker's half-open state): its
// success lets every turn go, another rate limit starts a longer pause. The first pause after
// a success lasts the delay the model asked for (turn.RetryDelay; 1 s when it names none);
// repeated rate limits without a success in between lengthen the pause exponentially from
// 1 s, up to maxPause, but never below the delay the model asked for.
//
// Rate limits are told apart (issue 19). A limit of the whole provider meets every request;
// a limit of one request (a per-tenant limit at a gateway, a prompt over a token limit) meets
// that request while the others pass. So:
//   - After a pause, the request whose rate limit started or last extended it (last) does not
//     probe first: another turn does if one comes within probeYield, so that one
//     always-refused request is not the probe after every pause. When last is the only
//     request refused since the last success, the other turns do not even wait for a probe:
//     they all go, and last waits for one of them to succeed (or probeYield).
//   - A request rate limited again after a turn that started after its previous limit
//     succeeded (see limited and alone) was refused alone: it backs off by itself (serve.go),
//     the rest of the member flows, no partition pauses.
//   - A request rate limited again after other requests were limited too and none passed met
//     the provider's limit: every partition pauses, and the limit counts against nothing.
type throttle struct {
	pauses   *pauses
	log      *slog.Logger
	maxPause time.Duration

	// calm is true while no pause is in force and no probe is needed: wait and succeeded
	// then return without taking mu, which every turn would otherwise take three times. It is
	// cleared under mu by pause and set under mu by wait once the pause is over and a probe
	// succeeded. A turn that reads it a moment before a pause begins starts as one that
	// passed the check a moment earlier would.
	calm atomic.Bool

	// limits is a clock of rate limits: every rate limit of a turn advances it (limited). A
	// turn reads it before it calls the model (clock); a turn that then succeeds raises passed
	// to what it read. So passed >= m says that a turn that started after the rate limit
	// that set the clock to m went through.
	limits, passed atomic.Uint64

	mu        sync.Mutex
	until     time.Time
	bo        *backoff.ExponentialBackOff
	timer     *time.Timer
	stopped   bool
	streak    int           // pauses since the last success: the first honors the model's delay alone
	needProbe bool          // rate limited since the last success: one turn probes at a time
	probing   bool          // a probe is running
	changed   chan struct{} // closed and replaced when probing or needProbe clears
	// last is the record whose rate limit started or last extended the pause: it lets
	// another turn probe first.
	last     *record
	lastMark uint64 // last's clock
	// others says that a record other than last was rate limited since the last success:
	// the limit may be the provider's, so one turn probes at a time after the pause. While
	// it is false, only last has been refused, and the other turns go freely after the pause
	// (a half-open breaker that admits everyone but the request it tripped on); one of them
	// refused too sets it and starts a pause again.
	others bool
}

// probeYield is how long the last rate-limited request lets other turns take the probe after
// a pause before it probes itself. A turn already waiting takes it at once; a record of a
// partition that had nothing fetched when the pause began needs a fetch after the resume (100
// ms at most, Config.Sarama), and a turn held at the dispatcher's gate a moment to reach wait.
const probeYield = 500 * time.Millisecond

func newThrottle(p *pauses, log *slog.Logger, initial, maxPause time.Duration) *throttle {
	bo := &backoff.ExponentialBackOff{InitialInterval: initial, RandomizationFactor: 0.2, Multiplier: 2, MaxInterval: maxPause}
	bo.Reset()
	t := &throttle{pauses: p, log: log, maxPause: maxPause, bo: bo, changed: make(chan struct{})}
	t.calm.Store(true)
	return t
}

// clock returns the rate-limit clock; a turn reads it before it calls the model and hands it
// to succeeded.
func (t *throttle) clock() uint64 { return t.limits.Load() }

// limited records a rate limit of a turn whose request was last rate limited at prev (0: never)
// and returns the clock of this one, for the request's next limit. alone reports that a turn
// that started after prev went through (the request is refused while others pass); shared
// that no turn did but other requests were rate limited since prev (a limit every request
// meets). Neither holds for a request's first rate limit, nor for one whose only rate limits
// since prev were its own.
func (t *throttle) limited(prev uint64) (now uint64, alone, shared bool) {
	if prev != 0 {
		alone = t.passed.Load() >= prev
		shared = !alone && t.limits.Load() > prev
	}
	return t.limits.Add(1), alone, shared
}

// pause pauses all partitions for d, or the exponential backoff if longer (not on the first
// pause after a success that names a delay), capped at maxPause (a model asking for a day is
// probed again after maxPause). It reports whether this is a new pause (false when it extends
// one in force).
//
// probe says whether the rate-limited turn was the probe (see wait): only then may another
// turn probe; a late 429 of a turn that started before the pause leaves a running probe be.
// r, the rate-limited record, becomes last unless a later rate limit (by the clock, mark) did:
// it lets another turn probe first.
func (t *throttle) pause(d time.Duration, probe bool, r *record, mark uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped { // a late turn of a partition abandoned at shutdown
		return false
	}
	t.calm.Store(false)
	now := time.Now()
	wait := min(d, t.maxPause)
	// A new pause (none in force, or the last one over though its timer has not fired yet):
	// lengthen it if the last one did not help. The answers of other turns to the same limit
	// (they were in flight too) only extend the pause in force.
	fresh := !now.Before(t.until)
	if fresh {
		if t.streak > 0 || d <= 0 {
			wait = min(max(d, t.bo.NextBackOff()), t.maxPause)
		}
		t.streak++
	}
	if !t.needProbe {
		t.others = false // a new episode: since the last success, only r has been refused
	} else if t.last != nil && r != t.last {
		t.others = true
	}
	t.needProbe = true
	if mark >= t.lastMark {
		t.last, t.lastMark = r, mark
	}
	if probe {
		t.release()
	}
	if until := now.Add(wait); until.After(t.until) {
		t.until = until
	}
	if fresh {
		t.log.Warn("model rate limited: all partitions paused", "pause", wait.String())
	}
	if t.timer == nil { // else resume, when it fires, sees the new end and waits for it
		t.pauses.setAll(true)
		t.timer = time.AfterFunc(t.until.Sub(now), t.resume)
	}
	return fresh
}

func (t *throttle) resume() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.timer == nil {
		return // stopped
	}
	if left := time.Until(t.until); left > 0 { // extended meanwhile
		t.timer = time.AfterFunc(left, t.resume)
		return
	}
	t.timer = nil
	t.pauses.setAll(false)
	t.log.Info("rate limit pause over: partitions resumed")
}

// succeeded ends the rate limit after a turn went through: every turn may start again, and
// the exponential part of the pause starts over. at is the clock the turn read before it
// called the model.
func (t *throttle) succeeded(at uint64) {
	for p := t.passed.Load(); at > p && !t.passed.CompareAndSwap(p, at); p = t.passed.Load() {
	}
	if t.calm.Load() { // no pause since the last success reset the backoff
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if at < t.lastMark {
		// The turn started before the rate limit that set the pause: its success says nothing
		// of the model now (it was let in before the limit). The pause's probe, a turn that
		// starts after it, decides; else the request limited last would run again before
		// anything showed that others pass, look shared, and pause every partition again.
		return
	}
	t.bo.Reset()
	t.streak = 0
	if t.needProbe {
		t.needProbe, t.last = false, nil
		t.release()
	}
}

// endProbe ends a probe that neither succeeded nor was rate limited (it failed otherwise, or
// was abandoned): another turn may probe.
func (t *throttle) endProbe(probe bool) {
	if !probe {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.release()
}

// release clears probing and wakes the waiters. Called with mu held.
func (t *throttle) release() {
	t.probing = false
	close(t.changed)
	t.changed = make(chan struct{})
}

// gate blocks until no pause is in force, or ctx ends. The dispatcher waits here before it
// takes a slot; the turn it starts then waits for its probe in wait.
func (t *throttle) gate(ctx context.Context) error {
	_, err := t.wait(ctx, nil)
	return err
}

// wait blocks until no pause is in force, or ctx ends (then it returns ctx's error). While
// rate limited it lets one caller through at a time, as the probe (probe true), and holds the
// others until the probe succeeds; a turn that probes reports its outcome with succeeded,
// pause or endProbe. r is the caller's record; with r nil (the gate) it returns as soon as the
// pause is over and never probes. The last rate-limited record probes only when no other
// caller took the probe within probeYield of the pause's end.
func (t *throttle) wait(ctx context.Context, r *record) (probe bool, err error) {
	var yieldUntil time.Time
	for {
		if t.calm.Load() {
			return false, nil
		}
		t.mu.Lock()
		left := time.Until(t.until)
		switch {
		case left > 0:
		case !t.needProbe || r == nil:
			if !t.needProbe {
				t.calm.Store(true)
			}
			t.mu.Unlock()
			return false, nil // no waiting, so a closed partition's gap records still run
		case !t.others && t.last != nil && r != t.last:
			// Only last was refused since the last success: the others go without a probe.
			t.mu.Unlock()
			return false, nil
		case !t.probing:
			if r == t.last {
				if yieldUntil.IsZero() {
					yieldUntil = time.Now().Add(probeYield)
				}
				if left = time.Until(yieldUntil); left > 0 {
					break // let another turn probe first
				}
			}
			t.probing = true
			t.mu.Unlock()
			return true, nil
		}
		changed := t.changed
		t.mu.Unlock()
		var (
			tm    *time.Timer
			timer <-chan time.Time
		)
		if left > 0 {
			tm = time.NewTimer(left)
			timer = tm.C
		}
		select {
		case <-timer:
		case <-changed:
		case <-ctx.Done():
		}
		if tm != nil {
			tm.Stop()
		}
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
	}
}

// stop cancels a pending resume; the consumer group is closing.
func (t *throttle) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped = true
	if t.timer != nil {
		t.timer.Stop()
		t.timer = nil
	}
}
