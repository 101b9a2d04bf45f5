package consumer

import (
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// rateLimits is one request's rate limits in this member (a turn's, in serve.go). The throttle
// tells them apart (see throttle):
//   - alone: a turn that started after the request's previous rate limit went through. The
//     request backs off by itself, with its own capped exponential backoff, and counts.
//   - shared: no turn went through since its previous rate limit, and other requests were
//     rate limited meanwhile: the provider's limit, which every request meets. Every
//     partition pauses, and it counts against nothing.
//   - neither (its first rate limit, or only its own since): every partition pauses, and it
//     counts, unless the request was refused alone before (then it is alone again: nothing
//     says the provider refuses the others). A request that is alone in the member and always
//     refused ends this way.
//
// Config.MaxRateLimits bounds the counted ones: at it the request is dead-lettered.
type rateLimits struct {
	mark    uint64 // the throttle's clock at the last rate limit; 0 before the first
	counted int    // rate limits that count against Config.MaxRateLimits
	alone   int    // of them, those met while other requests passed
	bo      *backoff.ExponentialBackOff
}

// limited records a rate limit of the request and reports whether it was met alone (the
// request backs off by itself instead of pausing every partition).
func (rl *rateLimits) limited(t *throttle) (alone bool) {
	mark, alone, shared := t.limited(rl.mark)
	if !alone && !shared && rl.alone > 0 {
		// Refused alone before, and nothing since says otherwise (no other request was limited):
		// still its own limit, though no turn that started after its last one has finished yet
		// (its own backoff can be shorter than a model call).
		alone = true
	}
	rl.mark = mark
	if alone {
		rl.alone++
	}
	if !shared {
		rl.counted++
	}
	return alone
}

// backoff returns how long a request rate limited alone waits before it is tried again: its
// own exponential backoff from initial, capped at maxPause, never below the delay d the model
// asked for (itself capped at maxPause).
func (rl *rateLimits) backoff(initial, maxPause, d time.Duration) time.Duration {
	if rl.bo == nil {
		rl.bo = newBackoff(initial, maxPause)
	}
	return min(max(d, rl.bo.NextBackOff()), maxPause)
}

// reason is the dead-letter reason of a request rate limited Config.MaxRateLimits times.
func (rl *rateLimits) reason(err error) string {
	return fmt.Sprintf("rate limited %d times in this member (Config.MaxRateLimits), rate limited alone %d times while other requests passed; last error: %v",
		rl.counted, rl.alone, err)
}
