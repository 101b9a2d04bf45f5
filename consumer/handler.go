package consumer

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/turnstile-go/turnstile/turn"
)

// Handler serves one request for the Consumer. Requests of one key (conversation) reach it one
// at a time, in offset order; requests of different keys concurrently, up to
// Config.MaxInFlight (with OrderByPartition: one at a time per partition), so a Handler must be
// safe for concurrent use.
//
// Handle returns the result to publish on the results topic, or nil to publish nothing (a
// handler that only hands the request over, such as the Temporal bridge, whose offset commits
// once the handover is durable). Its error steers the consumer through turn.Classify:
//   - turn.KindPermanent: the record goes to the dead-letter topic (with the reason of a
//     *turn.DeadLetterError when there is one) and its offset commits;
//   - turn.KindAttempt: retried after a backoff, dead-lettered after Config.MaxAttempts;
//   - turn.KindRateLimited: all partitions pause for turn.RetryDelay (capped exponential when
//     repeated), then the request is tried again, with no attempt spent; a request limited
//     again while other requests pass waits alone instead, with its own backoff; after
//     Config.MaxRateLimits of them (not counting limits that other requests meet too) the
//     request is dead-lettered;
//   - turn.KindUnavailable: retried after a backoff, with no attempt spent;
//   - turn.KindRunAlone: the request's last attempt ended with its member while other turns
//     ran (turn.ErrRunAlone); it is run again with no other turn of the member in a Handler
//     call, its context marked by turn.WithCrashIsolation(ctx, true), with no attempt spent.
//     Every Handler call's context carries turn.WithCrashIsolation;
//   - turn.KindAbandoned: the turn was abandoned (revoke, shutdown): nothing is published or
//     committed, and the record is read again by the partition's next owner.
//
// A panic in Handle is recovered: it fails the attempt with a *turn.PanicError (the panic
// value and a trimmed stack), retried and dead-lettered after Config.MaxAttempts as a
// turn.KindAttempt error is, and the member's other turns go on. Every Handler call's context
// carries the turn.ResultLimit of the results producer (Producer.MaxMessageBytes less room for
// the record's key and headers), which the Runner checks before it appends a turn. A Handler
// that also implements DeadLetterNotifier is told of each decoded request the consumer
// dead-letters, before the dead letter is published.
type Handler interface {
	Handle(ctx context.Context, req turn.Request) (*turn.Result, error)
}

// BatchHandler is a Handler that also takes several requests of one key in one call, for a
// hand-off whose cost is per call rather than per request (workflow.Bridge: one signal per
// conversation's workflow). When a key's record starts and more of the key's records wait in
// the partition's window, the consumer gives HandleBatch the decodable ones, up to
// Config.MaxBatch, in offset order; the key's later records wait until the batch is handed
// off, so the key's order holds. By key (OrderByKey) a batch is one conversation's; by
// partition (OrderByPartition, one key per partition) it may hold several conversations, each
// in its own order.
//
// HandleBatch returns nil once every one of reqs is handed off with nothing to publish (as a
// nil Result of Handle: their offsets commit); any error means that none is known to be, and
// the consumer then serves each request of the batch through Handle, with its usual retries
// and dead letters (handing a request off twice must be harmless, as a redelivery is). A
// panic is recovered and treated as an error.
type BatchHandler interface {
	Handler
	// HandleBatch hands reqs, two or more requests of one key in offset order, off at once.
	// Its errors are Handle's; any error sends the requests through Handle one by one. ctx
	// is the batch's; BatchRequestContext(ctx, i) is the one for what it does on behalf of
	// reqs[i] alone, under that request's own process span when telemetry is on.
	HandleBatch(ctx context.Context, reqs []turn.Request) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, req turn.Request) (*turn.Result, error)

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, req turn.Request) (*turn.Result, error) {
	return f(ctx, req)
}

// RunnerHandler returns the direct-mode Handler: each request runs as one idempotent turn of r
// and its Result is published. New refuses a Runner that Validate refuses (a missing Model,
// Sessions or Inbox).
//
// The Runner is the one place for the limits of a turn: New adopts its MaxAttempts,
// TurnTimeout and Decoder (the Runner's defaults where it leaves them zero) for the Config
// fields left zero, and refuses a Config whose MaxAttempts, TurnTimeout or Decoder is set to
// something else than the Runner's, since the Runner would enforce its own (it counts the
// attempts in the inbox and validates every request again). When Run starts, it asks r whether
// its stores can serve Config.MaxInFlight turns at once (turn.Runner.CheckConcurrency) and logs
// a warning when they cannot.
func RunnerHandler(r *turn.Runner) Handler { return runnerHandler{r} }

type runnerHandler struct{ r *turn.Runner }

func (h runnerHandler) Handle(ctx context.Context, req turn.Request) (*turn.Result, error) {
	res, _, err := h.handleEncoded(ctx, req)
	return res, err
}

// handleEncoded is Handle that also returns the Result's encoding when the Runner has it, so
// that the result record's value is not encoded a second time.
func (h runnerHandler) handleEncoded(ctx context.Context, req turn.Request) (*turn.Result, []byte, error) {
	res, data, err := h.r.RunEncoded(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	return &res, data, nil
}

// encodingHandler is a Handler that can return its Result already encoded (nil when not).
type encodingHandler interface {
	handleEncoded(ctx context.Context, req turn.Request) (*turn.Result, []byte, error)
}

// Validate reports a Runner that cannot serve (turn.Runner.Validate), for New.
func (h runnerHandler) Validate() error { return h.r.Validate() }

// adopt sets cfg's turn limits from the Runner's and refuses a Config that disagrees with them.
// The Runner bounds its turns itself, so the adopted TurnTimeout is left to it (cfg keeps 0 and
// the consumer adds no deadline of its own).
func (h runnerHandler) adopt(cfg *Config) error {
	r := h.r // not nil: New calls Validate, which refuses a nil Runner, first
	attempts := r.Attempts()
	timeout := cmp.Or(r.TurnTimeout, turn.DefaultTurnTimeout)
	var errs []error
	switch {
	case cfg.MaxAttempts == 0:
		cfg.MaxAttempts = attempts
	case cfg.MaxAttempts != attempts:
		errs = append(errs, fmt.Errorf("MaxAttempts: %d, but the Runner's is %d%s; set it on the Runner only",
			cfg.MaxAttempts, attempts, defaulted(r.MaxAttempts == 0)))
	}
	switch {
	case cfg.TurnTimeout == 0, cfg.TurnTimeout == timeout:
		cfg.TurnTimeout = 0
	default:
		errs = append(errs, fmt.Errorf("TurnTimeout: %s, but the Runner's is %s%s; set it on the Runner only",
			cfg.TurnTimeout, timeout, defaulted(r.TurnTimeout == 0)))
	}
	switch {
	case cfg.Decoder == (turn.Decoder{}):
		cfg.Decoder = r.Decoder
	case effective(cfg.Decoder) != effective(r.Decoder):
		errs = append(errs, fmt.Errorf("Decoder: MaxTextBytes %d, but the Runner's is %d%s; set it on the Runner only",
			effective(cfg.Decoder).MaxTextBytes, effective(r.Decoder).MaxTextBytes, defaulted(r.Decoder == (turn.Decoder{}))))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("consumer: Config disagrees with the Runner of RunnerHandler: %w", err)
	}
	return nil
}

func defaulted(zero bool) string {
	if zero {
		return " (its default)"
	}
	return ""
}

// effective returns d with its defaults filled in, so that two Decoders that decode alike
// compare equal.
func effective(d turn.Decoder) turn.Decoder {
	if d.MaxTextBytes <= 0 {
		d.MaxTextBytes = turn.DefaultMaxTextBytes
	}
	return d
}

// limitsAdopter is a Handler that carries the limits of its turns for the Consumer to adopt
// (RunnerHandler).
type limitsAdopter interface{ adopt(cfg *Config) error }

// CheckConcurrency implements concurrencyChecker.
func (h runnerHandler) CheckConcurrency(n int) error { return h.r.CheckConcurrency(n) }

// concurrencyChecker is a Handler that can tell whether it serves n turns at once.
type concurrencyChecker interface{ CheckConcurrency(n int) error }
