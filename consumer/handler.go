package consumer

import (
	"context"

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
//     repeated), then the request is tried again, with no attempt spent;
//   - turn.KindUnavailable: retried after a backoff, with no attempt spent;
//   - turn.KindAbandoned: the turn was abandoned (revoke, shutdown): nothing is published or
//     committed, and the record is read again by the partition's next owner.
type Handler interface {
	Handle(ctx context.Context, req turn.Request) (*turn.Result, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, req turn.Request) (*turn.Result, error)

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, req turn.Request) (*turn.Result, error) {
	return f(ctx, req)
}

// RunnerHandler returns the direct-mode Handler: each request runs as one idempotent turn of r
// and its Result is published. Set r.MaxAttempts to Config.MaxAttempts. When Run starts, it
// asks r whether its stores can serve Config.MaxInFlight turns at once
// (turn.Runner.CheckConcurrency) and logs a warning when they cannot.
func RunnerHandler(r *turn.Runner) Handler { return runnerHandler{r} }

type runnerHandler struct{ r *turn.Runner }

func (h runnerHandler) Handle(ctx context.Context, req turn.Request) (*turn.Result, error) {
	res, err := h.r.Run(ctx, req)
	if err != nil {
		return nil, err
	}
	return &res, nil
}

// CheckConcurrency implements concurrencyChecker.
func (h runnerHandler) CheckConcurrency(n int) error { return h.r.CheckConcurrency(n) }

// concurrencyChecker is a Handler that can tell whether it serves n turns at once.
type concurrencyChecker interface{ CheckConcurrency(n int) error }
