package inbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
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
// A failed delivery is retried after Backoff, or after the delay its error asks for when that
// is longer: an error that satisfies interface{ RetryAfter() time.Duration } (those of
// turn.RetryAfter do; a 429 or 503 with a Retry-After header, RFC 9110 section 10.2.3, is the
// use) is not retried before that delay, which Backoff.Max does not cut. The attempt still
// counts towards MaxAttempts. After MaxAttempts attempts, or at once for an error that
// satisfies interface{ Permanent() bool } with Permanent() true, the intent is buried (dead)
// with the error as its reason, for an operator to re-drive (Outbox.RedriveIntent, turnstile
// outbox redrive).
type Relay struct {
	// Outbox is where the intents are. Required.
	Outbox Outbox
	// Deliver delivers one intent: the side effect of Intent.Payload. Required. Its ctx is
	// Run's, ended also at the claim's lease (Lease after the claim): a delivery cut by
	// shutdown is retried after its lease, and one that outlives its lease fails (and the
	// intent is claimed again by then, so the late outcome is not recorded: ErrLeaseLost). A
	// panic in Deliver is recovered and counts as a failed attempt (a *DeliverPanicError).
	// It must be safe to call from Concurrency goroutines at once.
	Deliver func(ctx context.Context, it Intent) error
	// MaxAttempts is how many attempts an intent gets (claims, a crashed one included); after
	// the last one fails the intent is buried with the error, and an intent claimed past it
	// (its last attempts ended with no outcome: a crash, or a lease that ran out) is buried
	// without a delivery. Default
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
	// Logger gets a line per failed delivery, buried intent, failed outbox call and outcome
	// not recorded because the intent was claimed again (ErrLeaseLost, at info). Default
	// slog.Default().
	Logger *slog.Logger
	// OnSettled, when set, is called after each delivery with the intent (as claimed) and
	// Deliver's error (nil when delivered), once the outcome is recorded (or failed to be),
	// from the delivering goroutine: for tests and metrics. An intent claimed past
	// MaxAttempts is buried with no delivery, and OnSettled gets the burial's reason.
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

// deliver delivers one claimed intent and records the outcome, fenced on the claim's
// attempt. After shutdown (ctx ended) it records nothing: the intent is delivered again after
// its lease.
func (r *Relay) deliver(ctx context.Context, it Intent) {
	// The outcome is recorded even when ctx ends meanwhile: the delivery happened.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if it.Attempts > r.MaxAttempts {
		// Claims past MaxAttempts: the last attempts recorded no outcome.
		reason := fmt.Sprintf("inbox: relay: the intent's attempts ran out (claim %d of at most %d); the last ones ended with no outcome (a crash, or a lease that ran out)",
			it.Attempts, r.MaxAttempts)
		r.Logger.Warn("outbox intent buried", "id", it.ID, "name", it.Name, "attempts", it.Attempts, "reason", reason)
		err := errors.New(reason)
		r.record(it, r.Outbox.Bury(sctx, it.ID, it.Attempts, reason))
		r.settled(it, err)
		return
	}
	err := r.call(ctx, it)
	if ctx.Err() != nil && err != nil {
		r.settled(it, err)
		return // cut by shutdown: the lease brings it back
	}
	var perm interface{ Permanent() bool }
	var serr error
	switch {
	case err == nil:
		serr = r.Outbox.Delivered(sctx, it.ID, it.Attempts)
	case errors.As(err, &perm) && perm.Permanent(), it.Attempts >= r.MaxAttempts:
		r.Logger.Warn("outbox intent buried", "id", it.ID, "name", it.Name, "attempts", it.Attempts, "err", err)
		serr = r.Outbox.Bury(sctx, it.ID, it.Attempts, err.Error())
	default:
		d := retryDelay(err, r.Backoff.delay(it.Attempts))
		r.Logger.Info("outbox delivery failed; retrying", "id", it.ID, "name", it.Name, "attempts", it.Attempts, "retry_in", d, "err", err)
		serr = r.Outbox.Retry(sctx, it.ID, it.Attempts, err.Error(), time.Now().Add(d))
	}
	r.record(it, serr)
	r.settled(it, err)
}

// retryDelay returns the delay before the next attempt after a delivery that failed with err:
// backoff, or the delay err asks for (its RetryAfter method, found with errors.As) when that is
// longer.
func retryDelay(err error, backoff time.Duration) time.Duration {
	var ra interface{ RetryAfter() time.Duration }
	if errors.As(err, &ra) {
		return max(backoff, ra.RetryAfter())
	}
	return backoff
}

// call runs Deliver with a ctx that ends at the claim's lease, and turns a panic into a
// *DeliverPanicError.
func (r *Relay) call(ctx context.Context, it Intent) (err error) {
	dctx, cancel := context.WithTimeout(ctx, r.Lease)
	defer cancel()
	defer func() {
		if v := recover(); v != nil {
			err = &DeliverPanicError{Value: v, Stack: trimStack(debug.Stack())}
		}
	}()
	return r.Deliver(dctx, it)
}

// record logs the error of recording a delivery's outcome, if any.
func (r *Relay) record(it Intent, serr error) {
	switch {
	case serr == nil:
	case errors.Is(serr, ErrLeaseLost):
		r.Logger.Info("outbox: a delivery's outcome not recorded: the intent was claimed again after its lease", "id", it.ID, "attempts", it.Attempts, "err", serr)
	default:
		r.Logger.Warn("outbox: recording a delivery's outcome failed; it runs again after its lease", "id", it.ID, "err", serr)
	}
}

// DeliverPanicError is the error of a Relay.Deliver that panicked: a failed attempt, retried
// or buried like another error.
type DeliverPanicError struct {
	// Value is what Deliver panicked with.
	Value any
	// Stack is the panicking goroutine's stack, trimmed to its first frames.
	Stack string
}

// Error returns the panic value and the stack.
func (e *DeliverPanicError) Error() string {
	return fmt.Sprintf("inbox: relay: Deliver panicked: %v\n%s", e.Value, e.Stack)
}

// maxPanicStack bounds DeliverPanicError.Stack, in bytes.
const maxPanicStack = 2048

// trimStack returns stack from the frame that panicked (past the goroutine header and the
// frames of debug.Stack, the recover and the panic itself, when it finds them), cut to
// maxPanicStack bytes.
func trimStack(stack []byte) string {
	lines := strings.Split(strings.TrimRight(string(stack), "\n"), "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "panic(") && i+2 <= len(lines) {
			lines = lines[i+2:] // the panic frame: its function line and its file line
			break
		}
	}
	s := strings.Join(lines, "\n")
	if len(s) > maxPanicStack {
		s = s[:maxPanicStack] + "\n..."
	}
	return s
}

func (r *Relay) settled(it Intent, err error) {
	if r.OnSettled != nil {
		r.OnSettled(it, err)
	}
}
