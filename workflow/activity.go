package workflow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime/debug"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	tworker "go.temporal.io/sdk/worker"
	twf "go.temporal.io/sdk/workflow"
	"golang.org/x/sync/semaphore"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turn/turnotel"
)

// Defaults of WorkerOptions.
const (
	DefaultHeartbeatTimeout = 10 * time.Second
	DefaultRetryInitial     = 200 * time.Millisecond
	DefaultRetryMax         = 10 * time.Second
	// activityMargin is added to the Runner's whole-turn deadline for the activity's
	// start-to-close timeout: the inbox bookkeeping and the publish run after the turn.
	activityMargin = 30 * time.Second
)

// Error types of the activity's ApplicationErrors, which the retry policy and the workflow
// read.
const (
	// errTypeRateLimited marks a turn.RetryAfter failure; its NextRetryDelay is the model's.
	errTypeRateLimited = "RateLimited"
	// errTypePermanent is never retried (a publish that can never succeed, a bad envelope).
	errTypePermanent = "Permanent"
)

// WorkerOptions configure the conversation workflow and its activity on a worker.
type WorkerOptions struct {
	// Runner runs each turn; required. Its whole-turn deadline (TurnTimeout) plus a margin is
	// the activity's start-to-close timeout, and its MaxAttempts is the attempt limit: the
	// inbox stays the authority on attempts across workers and crashes.
	Runner *turn.Runner
	// Publisher publishes results and dead letters; required. NewKafkaPublisher publishes
	// them as the consumer does.
	Publisher Publisher
	// HeartbeatTimeout is how long the server waits without a heartbeat before it retries a
	// turn on another worker (a worker killed mid-call); the activity heartbeats every third
	// of it. Default DefaultHeartbeatTimeout.
	HeartbeatTimeout time.Duration
	// RetryInitial and RetryMax shape the activity's exponential retry interval (coefficient
	// 2). Retries are unlimited in count: the Runner dead-letters after MaxAttempts failed
	// attempts, and an outage (turn.KindUnavailable) spends none. Defaults DefaultRetryInitial
	// and DefaultRetryMax.
	RetryInitial, RetryMax time.Duration
	// MaxRateLimits bounds the attempts of a request's activity that end rate limited
	// (turn.KindRateLimited, retried after the model's delay with no inbox attempt spent):
	// when the activity's attempt number (activity.Info.Attempt, which counts every retry of
	// the activity) reaches it on a rate limit, the request is dead-lettered with the reason
	// "rate limited on attempt N of the activity (WorkerOptions.MaxRateLimits)", so that a
	// request a per-tenant limit always refuses cannot hold its conversation forever (G5). A
	// limit of the whole provider that outlasts it dead-letters the requests it holds, as
	// consumer.Config.MaxRateLimits did before direct mode told the two apart. Default
	// consumer.DefaultMaxRateLimits.
	MaxRateLimits int
	// States keeps the State of a conversation whose run ended idle for its next run (the
	// sequence mark, the dedup window); SQLLedger is one. Without it idle runs do not end.
	// When it is an OverflowStore too (SQLLedger and MemoryLedger are), it keeps the pending
	// requests over Config.MaxCarriedBytes at continue-as-new, which bounds the
	// continue-as-new input. Give every worker of the task queue the same setting.
	States StateStore
	// Logger gets a line per dead letter, per failed attempt and per failed publish; default
	// slog.Default().
	Logger *slog.Logger
	// Telemetry, when set, instruments the Runner (turn/turnotel: inbox, session and model
	// spans, the model's duration) and starts a span per turn under the trace the request's
	// headers carry from the bridge. Give the worker's client the same through ClientOptions
	// for Temporal's own spans and metrics.
	Telemetry turnotel.Options
}

// worker holds what the workflow and the activity of one worker share.
type worker struct {
	opts WorkerOptions
	// turns is the worker process's crash isolation (turn.WithCrashIsolation), as the
	// consumer's member has: a turn holds one unit of it while the Runner runs it; a request
	// whose last attempt ended with its process while other turns ran (turn.ErrRunAlone) runs
	// again holding all of them, so that only its own crash can end that attempt and be
	// counted. Without it, a request that kills its worker (a poison request) spent an attempt
	// of every request beside it. Nil (tests that build a worker by hand): no isolation.
	turns *semaphore.Weighted
	// overflow is WorkerOptions.States when it is an OverflowStore, else nil.
	overflow OverflowStore
	// beforeTurn, when set, runs in the workflow before each turn's activity: the replay test
	// uses it to change the command sequence, the way a careless edit would.
	beforeTurn func(twf.Context)
}

// Register registers the conversation workflow (WorkflowName), the turn activity
// (ActivityName) and the gap activity (GapActivityName) on a Temporal worker, and the
// StateStore's activities when WorkerOptions.States is set. It fails when Runner or Publisher is missing.
func Register(w tworker.Registry, opts WorkerOptions) error {
	if err := opts.Runner.Validate(); err != nil {
		return fmt.Errorf("workflow: WorkerOptions.Runner: %w", err)
	}
	if opts.Publisher == nil {
		return errors.New("workflow: WorkerOptions.Publisher is nil")
	}
	if opts.HeartbeatTimeout <= 0 {
		opts.HeartbeatTimeout = DefaultHeartbeatTimeout
	}
	if opts.RetryInitial <= 0 {
		opts.RetryInitial = DefaultRetryInitial
	}
	if opts.MaxRateLimits <= 0 {
		opts.MaxRateLimits = consumer.DefaultMaxRateLimits
	}
	if opts.RetryMax <= 0 {
		opts.RetryMax = DefaultRetryMax
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	opts.Runner = turnotel.Runner(opts.Runner, opts.Telemetry)
	a := &worker{opts: opts, turns: semaphore.NewWeighted(aloneWeight)}
	a.overflow, _ = opts.States.(OverflowStore)
	w.RegisterWorkflowWithOptions(a.Conversation, twf.RegisterOptions{Name: WorkflowName})
	w.RegisterActivityWithOptions(a.ApplyTurn, activity.RegisterOptions{Name: ActivityName})
	w.RegisterActivityWithOptions(a.ReportGap, activity.RegisterOptions{Name: GapActivityName})
	if opts.States != nil {
		w.RegisterActivityWithOptions(a.LoadState, activity.RegisterOptions{Name: LoadStateActivityName})
		w.RegisterActivityWithOptions(a.SaveState, activity.RegisterOptions{Name: SaveStateActivityName})
	}
	if a.overflow != nil {
		w.RegisterActivityWithOptions(a.SaveOverflow, activity.RegisterOptions{Name: SaveOverflowActivityName})
		w.RegisterActivityWithOptions(a.LoadOverflow, activity.RegisterOptions{Name: LoadOverflowActivityName})
	}
	return nil
}

// activityOptions are the turn activity's options. Timeouts are not part of a workflow's
// determinism check, so a worker with another Runner.TurnTimeout may replay the history.
func (a *worker) activityOptions() twf.ActivityOptions {
	turnTimeout := a.opts.Runner.TurnTimeout
	if turnTimeout <= 0 {
		turnTimeout = turn.DefaultTurnTimeout
	}
	return twf.ActivityOptions{
		StartToCloseTimeout: turnTimeout + activityMargin,
		HeartbeatTimeout:    a.opts.HeartbeatTimeout,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:        a.opts.RetryInitial,
			BackoffCoefficient:     2,
			MaximumInterval:        a.opts.RetryMax,
			NonRetryableErrorTypes: []string{errorType(turn.KindPermanent)},
		},
	}
}

// ApplyTurn is the turn activity (registered as ActivityName): it runs the request through
// the Runner and publishes the Result, or the dead letter, with the consumer's headers and
// placement. A dead letter is an Outcome, not an error, so the workflow moves on; failures
// the Runner counted or refunded are retryable ApplicationErrors of the turn.Kind's name, a
// turn.RetryAfter one sets the next retry delay to the model's.
//
// A panic in the turn (the Runner recovers its model's and stores' as a turn.PanicError; this
// covers the rest, such as the publisher) fails the attempt: the activity records it in the inbox as the attempt's reason and panics again,
// and the SDK fails the attempt with a *temporal.PanicError that the retry policy retries.
// Once the Runner's attempts are spent the request is dead-lettered with the panic in the
// reason.
func (a *worker) ApplyTurn(ctx context.Context, in TurnInput) (out Outcome, err error) {
	env := in.Envelope
	req := env.Request
	defer a.recordPanic(ctx, env, &out, &err)
	req.Source = env.Source
	headers := maps.Clone(env.Headers)
	for k, v := range Headers(ctx) { // the Temporal header; the envelope's own win
		if _, ok := headers[k]; !ok {
			if headers == nil {
				headers = map[string]string{}
			}
			headers[k] = v
		}
	}
	if len(headers) > 0 {
		ctx = WithHeaders(ctx, headers)
		req.Metadata = maps.Clone(req.Metadata)
		for k, v := range headers {
			if _, ok := req.Metadata[k]; !ok && len(req.Metadata) < turn.MaxMetadataEntries {
				if req.Metadata == nil {
					req.Metadata = map[string]string{}
				}
				req.Metadata[k] = v
			}
		}
	}
	req.Headers = headers
	env.Request, env.Headers = req, headers
	ctx, span := a.startTurn(ctx, env)
	out, err = a.applyTurn(ctx, env, in)
	if span != nil {
		endTurn(span, out, err)
	}
	return out, err
}

// applyTurn is ApplyTurn once the request and its headers are set up.
func (a *worker) applyTurn(ctx context.Context, env Envelope, in TurnInput) (Outcome, error) {
	req := env.Request
	if in.Reject != "" {
		return a.deadLetter(ctx, env, DeadLetter{Reason: in.Reject}, turn.KindPermanent)
	}
	if in.Redrive && !in.WantResult {
		done, err := a.done(ctx, req)
		if err != nil || done {
			return Outcome{AlreadyDone: done}, err
		}
	}
	if in.Stale != "" {
		replay, err := a.answered(ctx, req)
		if err != nil {
			return Outcome{}, err
		}
		if !replay {
			return a.deadLetter(ctx, env, DeadLetter{Reason: in.Stale}, turn.KindPermanent)
		}
	}

	res, err := func() (turn.Result, error) {
		stop := a.heartbeat(ctx)
		defer stop() // a panicking store must not leave the heartbeat running
		if l, ok := a.opts.Publisher.(ResultLimiter); ok {
			ctx = turn.WithResultLimit(ctx, l.ResultLimit(env))
		}
		return a.run(ctx, req)
	}()
	if err == nil {
		return a.publishResult(ctx, env, res, in.WantResult)
	}
	switch kind := turn.Classify(err); kind {
	case turn.KindPermanent:
		dl := DeadLetter{Reason: err.Error(), Err: err}
		var dle *turn.DeadLetterError
		if errors.As(err, &dle) {
			dl.Reason, dl.Attempts, dl.Kind = dle.Reason, dle.Attempts, dle.Kind
		}
		foreign, ferr := a.ownerMismatch(ctx, req, err)
		if ferr != nil {
			return Outcome{}, ferr
		}
		out, err := a.deadLetter(ctx, env, dl, kind)
		out.Foreign = foreign && out.DeadLettered
		return out, err
	case turn.KindRateLimited:
		if n := a.attempt(ctx); n >= a.opts.MaxRateLimits {
			return a.deadLetter(ctx, env, DeadLetter{
				Reason: fmt.Sprintf("rate limited on attempt %d of the activity (WorkerOptions.MaxRateLimits); last error: %v", n, err),
				Err:    err}, kind)
		}
		d, _ := turn.RetryDelay(err)
		return Outcome{}, temporal.NewApplicationErrorWithOptions(err.Error(), errorType(kind),
			temporal.ApplicationErrorOptions{NextRetryDelay: d})
	default:
		// The one line of a failed attempt: the Runner logs none, Temporal's retry policy
		// runs the next attempt.
		attempt := 0
		var ae *turn.AttemptError
		if errors.As(err, &ae) {
			attempt = ae.Attempt
		}
		a.opts.Logger.Warn("turn attempt failed; the activity retries", "request_id", req.ID, "conversation_id", req.ConversationID,
			"topic", env.Source.Topic, "partition", env.Source.Partition, "offset", env.Source.Offset,
			"attempt", attempt, "kind", kind.String(), "err", err)
		return Outcome{}, retried(err.Error(), kind)
	}
}

// retried is the error of an attempt that the activity's retry policy retries and that
// turnstile has logged itself (one WARN line with the request's ids): an ApplicationError of
// the kind's type in the benign category (temporal.ApplicationErrorCategoryBenign), which the
// SDK logs at DEBUG rather than as "Activity error." at ERROR, and leaves out of its failure
// metrics. The retry policy reads only the type, so retries are as before.
func retried(msg string, kind turn.Kind) error {
	return temporal.NewApplicationErrorWithOptions(msg, errorType(kind),
		temporal.ApplicationErrorOptions{Category: temporal.ApplicationErrorCategoryBenign})
}

// aloneWeight is the weight of the worker's turns semaphore: a turn run alone acquires all of it.
const aloneWeight = 1 << 30

// run runs req's turn with crash isolation (see worker.turns): beside the worker's other
// turns, and again alone when the Runner says its last attempt ended with its process beside
// others. A context that ends while it waits to run is an abandoned turn (turn.ErrAbandoned).
func (a *worker) run(ctx context.Context, req turn.Request) (turn.Result, error) {
	if a.turns == nil {
		return a.opts.Runner.Run(ctx, req)
	}
	if err := a.turns.Acquire(ctx, 1); err != nil {
		return turn.Result{}, fmt.Errorf("%w: waiting to run: %w", turn.ErrAbandoned, err)
	}
	res, err := a.opts.Runner.Run(turn.WithCrashIsolation(ctx, false), req)
	a.turns.Release(1)
	if turn.Classify(err) != turn.KindRunAlone {
		return res, err
	}
	a.opts.Logger.Warn("request's last attempt ended with its worker while other turns ran; running it alone",
		"request_id", req.ID, "conversation_id", req.ConversationID, "err", err)
	if err := a.turns.Acquire(ctx, aloneWeight); err != nil {
		return turn.Result{}, fmt.Errorf("%w: waiting to run alone: %w", turn.ErrAbandoned, err)
	}
	defer a.turns.Release(aloneWeight)
	return a.opts.Runner.Run(turn.WithCrashIsolation(ctx, true), req)
}

// attempt returns the activity's attempt number (1 for the first), or 1 outside an activity
// (a test calling the activity's function directly).
func (a *worker) attempt(ctx context.Context) int {
	if !activity.IsActivity(ctx) {
		return 1
	}
	return int(activity.GetInfo(ctx).Attempt)
}

// errorType returns the type of the activity's ApplicationError for a failure of kind k, which
// the retry policy (NonRetryableErrorTypes) and the workflow (Status.LastErrorKind) read: the
// kind's name (turn.Kind.String), but errTypeRateLimited for turn.KindRateLimited and
// errTypePermanent for turn.KindPermanent. TestEveryKindHasAnErrorType walks turn.Kinds.
func errorType(k turn.Kind) string {
	switch k {
	case turn.KindRateLimited:
		return errTypeRateLimited
	case turn.KindPermanent:
		return errTypePermanent
	}
	return k.String()
}

// answered reports whether the Runner's inbox holds the outcome of req (done or dead): a
// request whose sequence cannot apply is then a duplicate older than the dedup window, which
// the Runner answers from the inbox; otherwise it is a new request the conversation cannot
// apply.
func (a *worker) answered(ctx context.Context, req turn.Request) (bool, error) {
	st, err := a.inboxStatus(ctx, req)
	return st == inbox.StatusDone || st == inbox.StatusDead, err
}

// done reports whether the Runner's inbox has req done: a re-drive of it was applied already
// (a second copy of the re-driven record), and its result was published then.
func (a *worker) done(ctx context.Context, req turn.Request) (bool, error) {
	st, err := a.inboxStatus(ctx, req)
	return st == inbox.StatusDone, err
}

// inboxStatus returns the status of req's inbox entry, StatusNew when it has none; a failing
// inbox is a retryable error.
func (a *worker) inboxStatus(ctx context.Context, req turn.Request) (inbox.Status, error) {
	entry, err := a.opts.Runner.Inbox.Get(ctx, a.opts.Runner.InboxKey(req))
	switch {
	case errors.Is(err, inbox.ErrNotFound):
		return inbox.StatusNew, nil
	case err != nil:
		return 0, temporal.NewApplicationError("inbox get: "+err.Error(), errorType(turn.KindUnavailable))
	}
	return entry.Status, nil
}

// ownerMismatch reports whether the Runner dead-lettered req (with err) because its session is
// another user's. A request dead-lettered by an earlier delivery comes back from the inbox
// without its cause; the session store is asked then. A store that fails to answer is a
// retryable error: the workflow must know before it moves the conversation on.
func (a *worker) ownerMismatch(ctx context.Context, req turn.Request, err error) (bool, error) {
	if errors.Is(err, session.ErrOwnerMismatch) {
		return true, nil
	}
	var dle *turn.DeadLetterError
	if !errors.As(err, &dle) || dle.Err != nil {
		return false, nil
	}
	_, gerr := a.opts.Runner.Sessions.Get(ctx, a.opts.Runner.Key(req), 1)
	switch {
	case errors.Is(gerr, session.ErrOwnerMismatch):
		return true, nil
	case gerr == nil, errors.Is(gerr, session.ErrNotFound), errors.Is(gerr, session.ErrInvalid):
		return false, nil
	}
	return false, temporal.NewApplicationError("session owner check: "+gerr.Error(), errorType(turn.KindUnavailable))
}

// recordPanic, deferred by ApplyTurn, handles a panic of the turn: it records the panic in the
// inbox as the failed attempt's reason (so that the Runner's dead letter, once the attempts are
// spent, names it) and panics again, for the SDK to fail the attempt with a PanicError. When
// the inbox could not count the attempt (it panicked itself, or Begin never ran) and the
// activity has already tried Runner.Attempts times, it dead-letters the request instead, so
// that a panic before the inbox counts cannot retry for ever (G5).
func (a *worker) recordPanic(ctx context.Context, env Envelope, out *Outcome, err *error) {
	p := recover()
	if p == nil {
		return
	}
	req := env.Request
	reason := turn.Recovered("turn activity", p).Error()
	a.opts.Logger.Error("turn activity panicked", "request_id", req.ID, "conversation_id", req.ConversationID,
		"panic", p, "stack", string(debug.Stack()))
	counted := func() (ok bool) {
		defer func() {
			if recover() != nil {
				ok = false
			}
		}()
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		return a.opts.Runner.Inbox.Fail(bctx, a.opts.Runner.InboxKey(req), inbox.Failure{Reason: reason}) == nil
	}()
	if !counted && activity.IsActivity(ctx) {
		if n := int(activity.GetInfo(ctx).Attempt); n >= a.opts.Runner.Attempts() {
			*out, *err = a.deadLetter(ctx, env, DeadLetter{Reason: fmt.Sprintf("%d attempts exhausted; last error: %s", n, reason), Attempts: n}, turn.KindAttempt)
			return
		}
	}
	panic(p)
}

func (a *worker) publishResult(ctx context.Context, env Envelope, res turn.Result, want bool) (Outcome, error) {
	err := a.opts.Publisher.PublishResult(ctx, env, res)
	switch {
	case err == nil && want:
		return Outcome{Published: true, Result: &res}, nil
	case err == nil:
		return Outcome{Published: true}, nil
	case errors.Is(err, ErrRefused):
		return a.deadLetter(ctx, env, DeadLetter{Reason: "the result was refused by the results topic", Attempts: res.Attempt, Err: err}, turn.KindPermanent)
	}
	a.opts.Logger.Warn("result publish failed; the activity retries", "request_id", env.Request.ID,
		"conversation_id", env.Request.ConversationID, "err", err)
	return Outcome{}, retried("publish result: "+err.Error(), turn.KindUnavailable)
}

func (a *worker) deadLetter(ctx context.Context, env Envelope, dl DeadLetter, kind turn.Kind) (Outcome, error) {
	if dl.Kind == turn.KindNone {
		dl.Kind = kind
	}
	if dl.WorkflowID == "" && activity.IsActivity(ctx) {
		dl.WorkflowID = activity.GetInfo(ctx).WorkflowExecution.ID
	}
	if err := a.opts.Publisher.PublishDeadLetter(ctx, env, dl); err != nil {
		a.opts.Logger.Warn("dead-letter publish failed; the activity retries", "request_id", env.Request.ID,
			"conversation_id", env.Request.ConversationID, "err", err)
		return Outcome{}, retried("publish dead letter: "+err.Error(), turn.KindUnavailable)
	}
	a.opts.Logger.Error("request dead-lettered", "request_id", env.Request.ID, "conversation_id", env.Request.ConversationID,
		"topic", env.Source.Topic, "partition", env.Source.Partition, "offset", env.Source.Offset, "reason", dl.Reason)
	return Outcome{DeadLettered: true, Reason: dl.Reason, Kind: kind.String()}, nil
}

// heartbeat records a heartbeat every third of the heartbeat timeout until stop is called, so
// that the server notices a dead worker after HeartbeatTimeout rather than after the
// start-to-close timeout. It is a no-op outside an activity (the Runner called directly).
func (a *worker) heartbeat(ctx context.Context) (stop func()) {
	if !activity.IsActivity(ctx) {
		return func() {}
	}
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(a.opts.HeartbeatTimeout / 3)
		defer t.Stop()
		for {
			activity.RecordHeartbeat(ctx)
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(done); <-exited }
}
