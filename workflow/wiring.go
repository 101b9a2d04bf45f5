package workflow

import (
	"errors"
	"time"

	"go.temporal.io/sdk/client"
	tworker "go.temporal.io/sdk/worker"

	"github.com/turnstile-go/turnstile/turn"
)

// StopTimeout is how long a worker's Stop should wait for the turns in flight: the turn
// activity's start-to-close timeout, the Runner's whole-turn deadline (TurnTimeout, or
// turn.DefaultTurnTimeout) plus the margin for the inbox and the publish. Give it to
// worker.Options.WorkerStopTimeout (NewWorker does): the SDK's default of 0 cancels the
// activities at once on Stop (worker.InterruptCh's SIGTERM included), and a cut turn is
// redone elsewhere once its heartbeat times out, where direct mode drains.
func StopTimeout(r *turn.Runner) time.Duration {
	d := turn.DefaultTurnTimeout
	if r != nil && r.TurnTimeout > 0 {
		d = r.TurnTimeout
	}
	return d + activityMargin
}

// NewWorker returns a Temporal worker of taskQueue on c with the conversation workflow and
// its activities registered (Register): the one call of a worker's wiring. It sets
// wo.WorkerStopTimeout to StopTimeout(opts.Runner) when it is zero, so that Stop (and Run
// when its interrupt channel fires) waits for the turns in flight to finish, up to the
// Runner's deadline, before it cancels them; the worker polls no new task meanwhile. Keep the
// pod's termination grace period longer. Errors: a nil client, an empty task queue,
// Register's.
func NewWorker(c client.Client, taskQueue string, wo tworker.Options, opts WorkerOptions) (tworker.Worker, error) {
	switch {
	case c == nil:
		return nil, errors.New("workflow: NewWorker: nil client")
	case taskQueue == "":
		return nil, errors.New("workflow: NewWorker: empty task queue")
	}
	if wo.WorkerStopTimeout == 0 {
		wo.WorkerStopTimeout = StopTimeout(opts.Runner)
	}
	w := tworker.New(c, taskQueue, wo)
	if err := Register(w, opts); err != nil {
		return nil, err
	}
	return w, nil
}
