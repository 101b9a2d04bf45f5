package consumer

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// pauser is the part of sarama.ConsumerGroup the throttle drives.
type pauser interface {
	PauseAll()
	ResumeAll()
}

// throttle pauses every assigned partition while the model is rate limited. The member stays
// in the group (sarama keeps heartbeating; pausing fetches does not rebalance), records that
// still arrive from fetches in flight wait in their lanes, and lanes start no turn until the
// pause ends. Repeated rate limits without a success in between lengthen the pause
// exponentially, up to maxPause, but never below the delay the model asked for.
type throttle struct {
	group    pauser
	log      *slog.Logger
	maxPause time.Duration

	mu      sync.Mutex
	until   time.Time
	bo      *backoff.ExponentialBackOff
	timer   *time.Timer
	stopped bool
}

func newThrottle(group pauser, log *slog.Logger, initial, maxPause time.Duration) *throttle {
	bo := &backoff.ExponentialBackOff{InitialInterval: initial, RandomizationFactor: 0.2, Multiplier: 2, MaxInterval: maxPause}
	bo.Reset()
	return &throttle{group: group, log: log, maxPause: maxPause, bo: bo}
}

// pause pauses all partitions for d, or the exponential backoff if longer, capped at
// maxPause (a model asking for a day is probed again after maxPause). It reports whether it
// paused the partitions (false when a pause was already in force).
func (t *throttle) pause(d time.Duration) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped { // a late turn of a lane abandoned at shutdown
		return false
	}
	wait := min(d, t.maxPause)
	if t.timer == nil {
		// A new pause: lengthen it if the last one did not help. The other lanes' answers to
		// the same limit (their turns were in flight too) only extend the pause in force.
		wait = min(max(d, t.bo.NextBackOff()), t.maxPause)
	}
	now := time.Now()
	if until := now.Add(wait); until.After(t.until) {
		t.until = until
	}
	if t.timer != nil {
		return false
	}
	t.group.PauseAll()
	t.log.Warn("model rate limited: all partitions paused", "pause", wait)
	t.timer = time.AfterFunc(t.until.Sub(now), t.resume)
	return true
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
	t.group.ResumeAll()
	t.log.Info("rate limit pause over: partitions resumed")
}

// succeeded resets the exponential part after a turn went through.
func (t *throttle) succeeded() {
	t.mu.Lock()
	t.bo.Reset()
	t.mu.Unlock()
}

// active reports whether a pause is in force.
func (t *throttle) active() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.timer != nil || time.Now().Before(t.until)
}

// wait blocks until no pause is in force, or ctx ends.
func (t *throttle) wait(ctx context.Context) error {
	for {
		t.mu.Lock()
		left := time.Until(t.until)
		t.mu.Unlock()
		if left <= 0 {
			return ctx.Err()
		}
		timer := time.NewTimer(left)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
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
