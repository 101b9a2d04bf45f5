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
// success lets every turn go, another rate limit starts a longer pause. Repeated rate limits
// without a success in between lengthen the pause exponentially, up to maxPause, but never
// below the delay the model asked for.
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

	mu        sync.Mutex
	until     time.Time
	bo        *backoff.ExponentialBackOff
	timer     *time.Timer
	stopped   bool
	needProbe bool          // rate limited since the last success: one turn probes at a time
	probing   bool          // a probe is running
	changed   chan struct{} // closed and replaced when probing or needProbe clears
}

func newThrottle(p *pauses, log *slog.Logger, initial, maxPause time.Duration) *throttle {
	bo := &backoff.ExponentialBackOff{InitialInterval: initial, RandomizationFactor: 0.2, Multiplier: 2, MaxInterval: maxPause}
	bo.Reset()
	t := &throttle{pauses: p, log: log, maxPause: maxPause, bo: bo, changed: make(chan struct{})}
	t.calm.Store(true)
	return t
}

// pause pauses all partitions for d, or the exponential backoff if longer, capped at
// maxPause (a model asking for a day is probed again after maxPause). It reports whether this
// is a new pause (false when it extends one in force).
//
// probe says whether the rate-limited turn was the probe (see wait): only then may another
// turn probe; a late 429 of a turn that started before the pause leaves a running probe be.
func (t *throttle) pause(d time.Duration, probe bool) bool {
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
		wait = min(max(d, t.bo.NextBackOff()), t.maxPause)
	}
	t.needProbe = true
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
// the exponential part of the pause starts over.
func (t *throttle) succeeded() {
	if t.calm.Load() { // no pause since the last success reset the backoff
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.bo.Reset()
	if t.needProbe {
		t.needProbe = false
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
	_, err := t.wait(ctx, false)
	return err
}

// wait blocks until no pause is in force, or ctx ends (then it returns ctx's error). While rate limited it lets one caller
// through at a time, as the probe (probe true), and holds the others until the probe
// succeeds; a turn that probes reports its outcome with succeeded, pause or endProbe. With
// mayProbe false it returns as soon as the pause is over.
func (t *throttle) wait(ctx context.Context, mayProbe bool) (probe bool, err error) {
	for {
		if t.calm.Load() {
			return false, nil
		}
		t.mu.Lock()
		left := time.Until(t.until)
		switch {
		case left > 0:
		case !t.needProbe || !mayProbe:
			if !t.needProbe {
				t.calm.Store(true)
			}
			t.mu.Unlock()
			return false, nil // no waiting, so a closed partition's gap records still run
		case mayProbe && !t.probing:
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
