package inbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Relay defaults.
const (
	DefaultRelayMaxAttempts  = 10
	DefaultRelayLease        = time.Minute
	DefaultRelayBatch        = 16
	DefaultRelayPoll         = time.Second
	DefaultRelayConcurrency  = 4
	DefaultRelayBackoffFirst = time.Second
	DefaultRelayBackoffMax   = 5 * time.Minute
)

// RelayBackoff is the delay between a failed delivery of an intent and its next attempt: an
// exponential backoff (doubling) from Initial up to Max, each delay randomized by ±50%.
type RelayBackoff struct {
	// Initial is the delay after the first failed attempt; default DefaultRelayBackoffFirst
	// (1 s).
	Initial time.Duration
	// Max bounds every delay; default DefaultRelayBackoffMax (5 min). At least Initial.
	Max time.Duration
}

// Relay claims the pending intents of an Outbox and delivers them, with retries and backoff:
// the seed's transactional outbox's other half. Run one or more per service (on a SQL outbox,
// relays in several processes share the intents: a claim leases them).
//
// Delivery is at least once: a relay that dies (or is shut down) during a delivery, or
// after a delivery and before it marks the intent delivered, leaves the intent claimed, and
// it is delivered again once its lease ends. The receiving service dedups with the payload's
// idempotency key (turn.Intent.Key, which turn.DecodeIntent reads out of Intent.Payload).
//
// A failed delivery is retried after Backoff; after MaxAttempts attempts, or at once for an
// error that satisfies interface{ Permanent() bool } with Permanent() true, the intent is
// buried (dead) with the error as its reason, for an operator to re-drive
// (Outbox.RedriveIntent, turnstile outbox redrive).
type Relay struct {
	// Outbox is where the intents are. Required.
	Outbox Outbox
	// Deliver delivers one intent: the side effect of Intent.Payload. Required. It gets Run's
	// ctx: a delivery cut by shutdown is retried after its lease. It must be safe to call
	// from Concurrency goroutines at once.
	Deliver func(ctx context.Context, it Intent) error
	// MaxAttempts is how many attempts an intent gets (claims, a crashed one included); after
	// the last one fails the intent is buried with the error. Default
	// DefaultRelayMaxAttempts (10); not negative.
	MaxAttempts int
	// Backoff is the delay before the next attempt after a failed one.
	Backoff RelayBackoff
	// Lease is how long a claimed intent is the relay's before another claim may take it; it
	// must exceed the longest delivery. Default DefaultRelayLease (1 min); not negative.
	Lease time.Duration
	// Batch is how many intents one claim takes at most. Default DefaultRelayBatch (16).
	Batch int
	// Poll is the wait after a claim that found nothing (or failed) before the next one.
	// Default DefaultRelayPoll (1 s).
	Poll time.Duration
	// Concurrency is how many deliveries run at once. Default DefaultRelayConcurrency (4).
	Concurrency int
	// Logger gets a line per failed delivery, buried intent and failed outbox call. Default
	// slog.Default().
	Logger *slog.Logger
	// OnSettled, when set, is called after each delivery with the intent (as claimed) and
	// Deliver's error (nil when delivered), once the outcome is recorded (or failed to be),
	// from the delivering goroutine: for tests and metrics.
	OnSettled func(it Intent, err error)
}

// withDefaults returns r with its zero fields set to their defaults, or the first invalid
// field's error.
func (r Relay) withDefaults() (Relay, error) {
	switch {
	case r.Outbox == nil:
		return r, errors.New("inbox: Relay.Outbox is nil")
	case r.Deliver == nil:
		return r, errors.New("inbox: Relay.Deliver is nil")
	case r.MaxAttempts < 0:
		return r, fmt.Errorf("inbox: Relay.MaxAttempts = %d is negative", r.MaxAttempts)
	case r.Lease < 0:
		return r, fmt.Errorf("inbox: Relay.Lease = %s is negative", r.Lease)
	case r.Batch < 0:
		return r, fmt.Errorf("inbox: Relay.Batch = %d is negative", r.Batch)
	case r.Poll < 0:
		return r, fmt.Errorf("inbox: Relay.Poll = %s is negative", r.Poll)
	case r.Concurrency < 0:
		return r, fmt.Errorf("inbox: Relay.Concurrency = %d is negative", r.Concurrency)
	case r.Backoff.Initial < 0 || r.Backoff.Max < 0:
		return r, fmt.Errorf("inbox: Relay.Backoff = %+v has a negative delay", r.Backoff)
	}
	set := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	setD := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	set(&r.MaxAttempts, DefaultRelayMaxAttempts)
	set(&r.Batch, DefaultRelayBatch)
	set(&r.Concurrency, DefaultRelayConcurrency)
	setD(&r.Lease, DefaultRelayLease)
	setD(&r.Poll, DefaultRelayPoll)
	setD(&r.Backoff.Initial, DefaultRelayBackoffFirst)
	setD(&r.Backoff.Max, max(DefaultRelayBackoffMax, r.Backoff.Initial))
	if r.Backoff.Max < r.Backoff.Initial {
		return r, fmt.Errorf("inbox: Relay.Backoff.Max = %s is below Initial = %s", r.Backoff.Max, r.Backoff.Initial)
	}
	if r.Logger == nil {
		r.Logger = slog.Default()
	}
	return r, nil
}

// delay returns the backoff after the failed attempt number attempt (from 1): the
// attempt-th delay of a fresh backoff.ExponentialBackOff with the relay's intervals.
func (b RelayBackoff) delay(attempt int) time.Duration {
	eb := &backoff.ExponentialBackOff{
		InitialInterval:     b.Initial,
		RandomizationFactor: backoff.DefaultRandomizationFactor,
		Multiplier:          2,
		MaxInterval:         b.Max,
	}
	eb.Reset()
	d := eb.NextBackOff()
	for i := 1; i < attempt && i < 64; i++ {
		d = eb.NextBackOff()
	}
	return min(d, b.Max)
}

// Run claims and delivers intents until ctx ends, then waits for the deliveries in flight
// (which get ctx, so end with it) and returns nil. A failed claim is logged and tried again
// after Poll. Errors: an invalid Relay, before any claim.
func (r *Relay) Run(ctx context.Context) error {
	cfg, err := r.withDefaults()
	if err != nil {
		return err
	}
	slots := make(chan struct{}, cfg.Concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	for ctx.Err() == nil {
		// Claim only as many as can start now, so that no claimed intent waits out its lease
		// behind the deliveries in flight.
		free := cfg.Concurrency - len(slots)
		if free == 0 {
			select {
			case slots <- struct{}{}:
				<-slots
			case <-ctx.Done():
				return nil
			}
			continue
		}
		its, err := cfg.Outbox.Claim(ctx, min(free, cfg.Batch), cfg.Lease)
		if err != nil && ctx.Err() == nil {
			cfg.Logger.Warn("outbox claim failed; trying again", "err", err)
		}
		if len(its) == 0 {
			select {
			case <-ctx.Done():
			case <-time.After(cfg.Poll):
			}
			continue
		}
		for _, it := range its {
			slots <- struct{}{}
			wg.Go(func() {
				defer func() { <-slots }()
				cfg.deliver(ctx, it)
			})
		}
	}
	return nil
}

// deliver delivers one claimed intent and records the outcome. After shutdown (ctx ended)
// it records nothing: the intent is delivered again after its lease.
func (r *Relay) deliver(ctx context.Context, it Intent) {
	err := r.Deliver(ctx, it)
	if ctx.Err() != nil && err != nil {
		r.settled(it, err)
		return // cut by shutdown: the lease brings it back
	}
	// The outcome is recorded even when ctx ends now: the delivery happened.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var perm interface{ Permanent() bool }
	var serr error
	switch {
	case err == nil:
		serr = r.Outbox.Delivered(sctx, it.ID)
	case errors.As(err, &perm) && perm.Permanent(), it.Attempts >= r.MaxAttempts:
		r.Logger.Warn("outbox intent buried", "id", it.ID, "name", it.Name, "attempts", it.Attempts, "err", err)
		serr = r.Outbox.Bury(sctx, it.ID, err.Error())
	default:
		d := r.Backoff.delay(it.Attempts)
		r.Logger.Info("outbox delivery failed; retrying", "id", it.ID, "name", it.Name, "attempts", it.Attempts, "retry_in", d, "err", err)
		serr = r.Outbox.Retry(sctx, it.ID, err.Error(), time.Now().Add(d))
	}
	if serr != nil {
		r.Logger.Warn("outbox: recording a delivery's outcome failed; it runs again after its lease", "id", it.ID, "err", serr)
	}
	r.settled(it, err)
}

func (r *Relay) settled(it Intent, err error) {
	if r.OnSettled != nil {
		r.OnSettled(it, err)
	}
}
