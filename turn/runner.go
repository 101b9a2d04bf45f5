package turn

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/turnstile-go/turnstile/attachment"
	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
)

// Defaults the Runner applies to zero fields.
const (
	DefaultApp          = "turnstile"
	DefaultTurnTimeout  = 90 * time.Second
	DefaultHistoryLimit = 50
	DefaultMaxAttempts  = 3
	// bookkeepingTimeout bounds the inbox writes made after a turn failed or was abandoned,
	// which run even when the turn's context has ended.
	bookkeepingTimeout = 5 * time.Second
)

// Runner runs one turn idempotently: the same request run any number of times, on any
// workers, after any crash, adds its turn to the session once and yields one Result.
// The package doc has the steps of a turn and where a crash can land.
//
// When Sessions implements session.TxAppender and Inbox implements inbox.TxCompleter on the
// same *sql.DB (session/sqlsession and inbox/sqlinbox built on one *sql.DB do), the session
// append and the inbox completion commit in one transaction: one commit less per turn, and no
// crash can fall between them (the crash table's "session append" row cannot happen).
//
// Set the fields before the first Run and do not change them after; a Runner is then safe
// for concurrent use. Model, Sessions and Inbox are required.
type Runner struct {
	// Model is the host's model call.
	Model ModelClient
	// Sessions holds the conversations; share it between workers (G4).
	Sessions session.Store
	// Inbox dedups requests and counts attempts; share it between workers (G3, G5).
	Inbox inbox.Inbox
	// Attachments holds the large inputs requests refer to (Request.Attachments, put by the
	// producer, as Offload does, under the Runner's App and the request's user); share it
	// with the producers and between workers (G4). Before the model is called, the Runner
	// checks that it holds each of a request's attachments for the request's user, of the
	// size the reference gives; a request whose attachment is missing, or that carries
	// attachments while this is nil, is dead-lettered with the attachment's id in its reason.
	// nil when requests carry no attachments.
	Attachments attachment.Store
	// App is the session.Key's app; default DefaultApp.
	App string
	// TurnTimeout bounds a whole turn, store calls included; default DefaultTurnTimeout.
	// A turn that runs past it fails its attempt with ErrTurnTimeout.
	TurnTimeout time.Duration
	// HistoryLimit is how many recent events the Runner reads of a session first, and the
	// most events the model sees after the latest checkpoint's range: more uncovered events
	// start a compaction, as a model input over half of ContextBudget does. When the latest
	// checkpoint's range ends before the events read, the Runner reads further back: no
	// event leaves the model's view uncovered (G4). Default DefaultHistoryLimit.
	HistoryLimit int
	// ContextBudget is the most tokens a model request of a turn may take; default
	// DefaultContextBudget. The Runner keeps its part (the session's state, the latest
	// summary, the events after it, the request) within half of it, folding the oldest turns
	// into a summary when it would not be (a compaction: a journal step, CompactStep, whose
	// summary is stored as a checkpoint event in the turn's own append, and takes at most an
	// eighth of it); the other half is for the system prompt, the tools, the turn's own tool
	// outputs and the answer (turn/agent checks every request against it). A request that
	// cannot fit fails permanently (ErrOverBudget).
	ContextBudget int
	// Summarizer writes the summaries of compactions; default the Model when it is a
	// Summarizer (turn/agent's Agent is, through its provider), else the Model itself asked
	// with the summarization instruction as a turn's message.
	Summarizer Summarizer
	// SummaryInstruction is the summarization instruction; default
	// DefaultSummaryInstruction. Changing it changes CompactionPolicy.
	SummaryInstruction string
	// Tokens counts tokens for the budget; default the Model when it is a TokenCounter
	// (turn/agent's Agent is when its provider is, as turn/chatcompletion's Client is), else
	// EstimateTokens.
	Tokens TokenCounter
	// MaxAttempts is how many attempts a request gets before it is dead-lettered, counting
	// deliveries that crashed (under WithCrashIsolation, as the consumer runs it, only those
	// that crashed while the request ran alone); default DefaultMaxAttempts.
	MaxAttempts int
	// Logger gets a line per failed or dead-lettered turn; default slog.Default().
	Logger *slog.Logger
	// NowFunc returns the current time; default time.Now. Tests set it.
	NowFunc func() time.Time
	// Decoder validates requests given to Run; its zero value applies the default limits.
	Decoder Decoder
	// InlineModel calls Model on the turn's own goroutine rather than on one of its own. Set
	// it for a model that returns promptly once its context ends (an HTTP client whose
	// requests carry the context does, as turn/chatcompletion's does): it saves a goroutine,
	// and its stack, per turn in flight (4,096 at 4,096 turns in flight). Left false, the
	// default, a model that ignores cancellation is cut at the whole-turn deadline (its call
	// goes on in the background and its output is dropped, G5); with InlineModel such a model
	// holds its turn, and its conversation, until it returns. A model running tools
	// (turn/agent) returns only when its tools have: with InlineModel, give every tool a
	// context-aware call too. Either way an answer that comes
	// after the turn's context ended is dropped, and a panic in the model fails the attempt.
	InlineModel bool
	// MaxSteps bounds the steps one turn records in its journal (Input.Journal); default
	// DefaultMaxSteps. A step past it fails permanently (ErrJournalFull): the request is
	// dead-lettered.
	MaxSteps int
	// MaxJournalBytes bounds the bytes of step outputs one turn records; default
	// DefaultMaxJournalBytes. A step past it fails permanently (ErrJournalFull).
	MaxJournalBytes int
}

// Validate reports a missing required field by name.
func (r *Runner) Validate() error {
	switch {
	case r == nil:
		return errors.New("turn: nil Runner")
	case r.Model == nil:
		return errors.New("turn: Runner.Model is nil")
	case r.Sessions == nil:
		return errors.New("turn: Runner.Sessions is nil")
	case r.Inbox == nil:
		return errors.New("turn: Runner.Inbox is nil")
	case r.TurnTimeout < 0, r.HistoryLimit < 0, r.MaxAttempts < 0, r.MaxSteps < 0, r.MaxJournalBytes < 0, r.ContextBudget < 0:
		return errors.New("turn: Runner.TurnTimeout, HistoryLimit, MaxAttempts, MaxSteps, MaxJournalBytes and ContextBudget must not be negative")
	case r.ContextBudget > 0 && r.ContextBudget < MinContextBudget:
		return fmt.Errorf("turn: Runner.ContextBudget %d is under %d tokens, in which no request and summary fit", r.ContextBudget, MinContextBudget)
	}
	return nil
}

func (r *Runner) app() string { return cmp.Or(r.App, DefaultApp) }
func (r *Runner) turnTimeout() time.Duration {
	return cmp.Or(r.TurnTimeout, DefaultTurnTimeout)
}
func (r *Runner) historyLimit() int { return cmp.Or(r.HistoryLimit, DefaultHistoryLimit) }

// Attempts returns the effective MaxAttempts.
func (r *Runner) Attempts() int { return cmp.Or(r.MaxAttempts, DefaultMaxAttempts) }
func (r *Runner) logger() *slog.Logger {
	if r.Logger != nil {
		return r.Logger
	}
	return slog.Default()
}
func (r *Runner) now() time.Time {
	if r.NowFunc != nil {
		return r.NowFunc()
	}
	return time.Now()
}

// InboxKey returns the key under which req is recorded in the inbox: its request id scoped to
// its session key, "REQUEST_ID/SCOPE" where SCOPE is a version 5 UUID of (App, UserID,
// ConversationID). Request ids travel in result and dead-letter headers, so anyone may copy
// one: scoped, a copied id in another user's or conversation's record can neither replay the
// other request's stored result nor complete it or spend its attempts (G7).
func (r *Runner) InboxKey(req Request) string { return InboxKey(r.app(), req) }

// InboxKey is Runner.InboxKey for a Runner whose App is app.
func InboxKey(app string, req Request) string {
	var name [256]byte
	var out [80]byte // a canonical request id, "/" and a UUID
	return string(appendNameUUID(append(append(out[:0], req.ID...), '/'),
		inboxScopeNamespace, appendLengthPrefixed(name[:0], app, req.UserID, req.ConversationID)))
}

// Key returns the session key of req: (App, req.UserID, req.ConversationID).
func (r *Runner) Key(req Request) session.Key {
	return session.Key{App: r.app(), User: req.UserID, Conversation: req.ConversationID}
}

// Run runs the turn of req and returns its Result. A request that is already done returns its
// stored Result (Replayed set) without calling the model.
//
// On error, Classify(err) says what to do: KindPermanent errors are *DeadLetterError (the
// request is marked dead; publish it to the dead-letter topic), KindAttempt errors were
// counted, KindRateLimited, KindUnavailable, KindAbandoned and KindRunAlone were not. Under
// WithCrashIsolation a delivery whose last attempt crashed beside other turns returns
// ErrRunAlone without running (see WithCrashIsolation). A request in the session
// of another user fails with an error wrapping session.ErrOwnerMismatch and is dead-lettered
// (G7). Run's errors wrap the store's and the model's, so errors.Is and errors.As see them.
func (r *Runner) Run(ctx context.Context, req Request) (Result, error) {
	res, _, err := r.RunEncoded(ctx, req)
	return res, err
}

// RunEncoded is Run that also returns the Result's JSON encoding: the bytes json.Marshal makes
// of it, which the Runner stores in the inbox anyway, so that a caller publishing the Result
// (the consumer) need not encode it a second time. The encoding is nil when Run's error is not
// nil and when the Result was replayed from the inbox (encode it then; a store may have
// reformatted the JSON it kept, as PostgreSQL's jsonb does). Errors are Run's.
func (r *Runner) RunEncoded(ctx context.Context, req Request) (res Result, data []byte, err error) {
	defer func() {
		// A store that panics outside the attempt (Begin, the inbox bookkeeping): the attempt
		// fails; the caller retries it and its attempts run out as for any failure.
		if v := recover(); v != nil {
			res, data, err = Result{}, nil, Recovered("turn bookkeeping (inbox)", v)
		}
	}()
	if err := r.Validate(); err != nil {
		return Result{}, nil, err
	}
	if err := r.Decoder.Validate(req); err != nil {
		return Result{}, nil, &DeadLetterError{RequestID: req.ID, Reason: err.Error(), Err: err, Kind: KindPermanent}
	}
	ikey := r.InboxKey(req)
	entry, err := r.Inbox.Begin(ctx, inbox.Delivery{
		Key: ikey, Conversation: req.ConversationID,
		Topic: req.Source.Topic, Partition: req.Source.Partition, Offset: req.Source.Offset,
	})
	if err != nil {
		return Result{}, nil, abandonedIf(ctx, fmt.Errorf("turn %s: inbox begin: %w", req.ID, err))
	}
	attempts := entry.Attempts
	if iso := isolationOf(ctx); iso != isolationNone && entry.Status == inbox.StatusInProgress {
		if attempts, err = r.attribute(ctx, req, entry, iso); err != nil {
			return Result{}, nil, err
		}
	}
	switch {
	case entry.Status == inbox.StatusDone:
		res, err := DecodeResult(entry.Result)
		if err != nil {
			return Result{}, nil, r.deadLetter(ctx, req, entry.Attempts, "stored result unreadable", Permanent(err), KindPermanent)
		}
		res.Replayed, res.Attempt = true, entry.Attempts
		return res, nil, nil
	case entry.Status == inbox.StatusDead:
		return Result{}, nil, &DeadLetterError{RequestID: req.ID, Reason: entry.Reason, Attempts: entry.Attempts}
	case attempts > r.Attempts():
		// The earlier deliveries crashed or failed without dead-lettering (G5: crash loops
		// count; with WithCrashIsolation, only crashes while alone). This one was counted by
		// Begin but runs nothing.
		return Result{}, nil, r.deadLetter(ctx, req, attempts-1, exhaustedReason(req.ID, attempts-1, entry), nil, KindAttempt)
	}
	res, data, err = r.attempt(ctx, req, ikey, attempts, entry.Status == inbox.StatusNew)
	if err != nil {
		return Result{}, nil, r.failed(ctx, req, attempts, err)
	}
	res.Attempt = attempts
	return res, data, nil
}

// exhaustedReason is the dead-letter reason of a request whose n attempts ran out before this
// delivery, the last of which left entry's reason.
func exhaustedReason(id string, n int, entry inbox.Entry) string {
	reason := fmt.Sprintf("%d attempts exhausted", n)
	switch {
	case lastAttemptEnd(id, entry) == endCrashedAlone:
		reason += "; the last ran alone and ended with its process (a crash: killed, out of memory, a fault)"
	case entry.Reason != "":
		reason += "; last error: " + entry.Reason
	}
	return reason
}

// attempt runs the turn once under the whole-turn deadline.
// It returns the Result and its encoding; ikey is req's InboxKey.
func (r *Runner) attempt(ctx context.Context, req Request, ikey string, attempt int, first bool) (Result, []byte, error) {
	tctx, cancel := context.WithTimeoutCause(ctx, r.turnTimeout(), ErrTurnTimeout)
	defer cancel()
	res, data, err := r.runTurnSafely(tctx, req, ikey, attempt, first)
	switch {
	case err == nil:
		return res, data, nil
	case errors.Is(context.Cause(tctx), ErrTurnTimeout):
		// This Runner's deadline, or the caller's when it is a whole-turn deadline too (the
		// consumer's Config.TurnTimeout): a failed attempt.
		return Result{}, nil, fmt.Errorf("%w (%s): %w", ErrTurnTimeout, r.turnTimeout(), err)
	}
	return Result{}, nil, abandonedIf(ctx, err)
}

// runTurnSafely is runTurn with a panic in a store method (or any code it runs but the model,
// whose panics respond recovers) turned into a failed attempt: a *PanicError.
func (r *Runner) runTurnSafely(ctx context.Context, req Request, ikey string, attempt int, first bool) (res Result, data []byte, err error) {
	defer func() {
		if v := recover(); v != nil {
			r.logger().Error("turn panicked", "request_id", req.ID, "panic", v, "stack", string(debug.Stack()))
			res, data, err = Result{}, nil, Recovered("session or inbox store", v)
		}
	}()
	return r.runTurn(ctx, req, ikey, attempt, first)
}

func (r *Runner) runTurn(ctx context.Context, req Request, ikey string, attempt int, first bool) (Result, []byte, error) {
	key := r.Key(req)
	v, err := r.loadView(ctx, key)
	if err != nil {
		return Result{}, nil, err
	}
	sess := v.sess
	in := Input{Request: req, Session: sess, Attempt: attempt, Replay: IsReplay(ctx), ContextBudget: r.contextBudget()}
	in.Session.Events, in.Summary = v.uncovered, v.cp.Summary
	if in.journal, err = r.journal(ctx, ikey, in.toolScope(), first); err != nil {
		return Result{}, nil, err
	}
	if !first {
		// An earlier delivery may have appended the turn and crashed (or failed to reach the
		// inbox) before completing it: reuse that turn rather than call the model again.
		stored, err := r.Sessions.FindTurn(ctx, key, req.ID)
		switch {
		case err == nil:
			return r.complete(ctx, req, ikey, stored, r.promoteFound())
		case !errors.Is(err, session.ErrNotFound):
			return Result{}, nil, fmt.Errorf("session find turn: %w", err)
		}
	}
	if err := r.checkAttachments(ctx, req); err != nil {
		return Result{}, nil, err
	}
	checkpoint, compacted, err := r.compact(ctx, v, &in)
	if err != nil {
		return Result{}, nil, err
	}
	out, err := r.respond(ctx, in)
	if err != nil {
		return Result{}, nil, fmt.Errorf("model: %w", err)
	}
	if len(out.Events) == 0 {
		return Result{}, nil, errors.New("model: returned no events")
	}
	if err := checkAuthors(out.Events); err != nil {
		return Result{}, nil, err
	}
	if err := r.checkState(out.State); err != nil {
		return Result{}, nil, err
	}
	events := make([]session.Event, 0, len(out.Events)+2)
	if compacted { // stored with the turn, in its one atomic append
		events = append(events, checkpoint)
	}
	events = append(events, UserEvent(req))
	events = append(events, out.Events...)
	// Microseconds and UTC, so that the Result built from these events is the same bytes as
	// one rebuilt later from a SQL store's copy.
	now := r.now().UTC().Truncate(time.Microsecond)
	for i := range events {
		e := &events[i]
		e.ID, e.RequestID, e.Seq = eventID(req.ID, i), req.ID, 0
		e.Author = cmp.Or(e.Author, "assistant")
		if e.Time.IsZero() {
			e.Time = now
		}
		e.Time = e.Time.UTC().Truncate(time.Microsecond)
	}
	if err := r.checkResultSize(ctx, req, events); err != nil {
		return Result{}, nil, err
	}
	t := session.Turn{RequestID: req.ID, Events: events, State: out.State}
	through := in.journal.through()
	if sessions, ib, ok := r.joint(); ok {
		return r.appendAndComplete(ctx, req, ikey, key, sess.Version, t, through, sessions, ib)
	}
	appended, err := r.Sessions.Append(ctx, key, sess.Version, t)
	switch {
	case err != nil:
		return Result{}, nil, fmt.Errorf("session append at version %d: %w", sess.Version, err)
	case appended.Duplicate:
		through = r.promoteFound()
	}
	return r.complete(ctx, req, ikey, appended.Events, through)
}

// checkResultSize returns a permanent *ResultTooLargeError when the Result of the turn of
// events would exceed the ResultLimit of ctx: checked before the append, so that the session
// never holds an answer that cannot be published.
func (r *Runner) checkResultSize(ctx context.Context, req Request, events []session.Event) error {
	l, ok := ResultLimitOf(ctx)
	if !ok || resultSizeBound(req, events[len(events)-1].Text) <= l.Bytes {
		return nil // most turns: well below the limit, no encoding needed to tell
	}
	_, data, err := r.result(req, events)
	if err != nil {
		return err
	}
	if len(data) > l.Bytes {
		return Permanent(&ResultTooLargeError{RequestID: req.ID, Size: len(data), Limit: l.Bytes, Source: l.Source})
	}
	return nil
}

// CheckConcurrency reports whether the Runner's stores can serve n turns at once (the
// consumer's MaxInFlight): each of Sessions and Inbox that has a method
// CheckConcurrency(n int) error is asked, as session/sqlsession's Store and inbox/sqlinbox's
// Inbox have (their pools must keep n connections); the others are taken to be able. Call it
// at start-up and log its error as a warning: a smaller pool still works, but turns then wait
// for connections whenever more than its size are in store calls at once, which with an
// instant model is all of them and with a slow one a few. Errors: the first store's that
// fails, wrapped (for the SQL stores, one wrapping their ErrPoolTooSmall).
func (r *Runner) CheckConcurrency(n int) error {
	type concurrencyChecker interface{ CheckConcurrency(n int) error }
	for _, store := range []struct {
		name string
		v    any
	}{{"Sessions", r.Sessions}, {"Inbox", r.Inbox}} {
		if c, ok := store.v.(concurrencyChecker); ok {
			if err := c.CheckConcurrency(n); err != nil {
				return fmt.Errorf("turn: Runner.%s cannot serve %d turns at once: %w", store.name, n, err)
			}
		}
	}
	return nil
}

// joint returns the session store and the inbox as one when they can store a turn and
// complete its request in one transaction: both implement the optional interfaces, on the
// same *sql.DB.
func (r *Runner) joint() (session.TxAppender, inbox.TxCompleter, bool) {
	sessions, ok := r.Sessions.(session.TxAppender)
	if !ok {
		return nil, nil, false
	}
	ib, ok := r.Inbox.(inbox.TxCompleter)
	if !ok || sessions.TxDB() == nil || sessions.TxDB() != ib.TxDB() {
		return nil, nil, false
	}
	return sessions, ib, true
}

// appendAndComplete appends the turn and completes the request in one transaction, so that no
// crash falls between the two (one commit instead of two). A duplicate turn, which AppendTx
// does not join, is completed as on the separate path.
func (r *Runner) appendAndComplete(ctx context.Context, req Request, ikey string, key session.Key, version int64, t session.Turn,
	through int, sessions session.TxAppender, ib inbox.TxCompleter) (Result, []byte, error) {
	var (
		res    Result
		data   []byte
		joined bool
	)
	appended, err := sessions.AppendTx(ctx, key, version, t, func(ctx context.Context, tx session.SQLTx, stored []session.Event) error {
		var err error
		if res, data, err = r.result(req, stored); err != nil {
			return err
		}
		if through >= 0 {
			if err := r.promoteTx(ctx, tx, ikey, through); err != nil {
				return err
			}
		}
		if err := ib.CompleteTx(ctx, tx, ikey, data); err != nil {
			return fmt.Errorf("inbox complete: %w", err)
		}
		joined = true
		return nil
	})
	switch {
	case err != nil:
		return Result{}, nil, fmt.Errorf("session append with inbox complete at version %d: %w", version, err)
	case appended.Duplicate:
		// The run that stored the turn promoted its intents in its own transaction.
		return r.complete(ctx, req, ikey, appended.Events, noPromote)
	case !joined: // a Store that breaks its contract; never return a result not stored
		return Result{}, nil, errors.New("session store appended the turn without the inbox completion")
	}
	return res, data, nil
}

// respond calls the model and returns when it does or when ctx ends, whichever is first: a
// model that ignores cancellation must not hold its partition past the whole-turn deadline
// (G5). Such a model's call goes on in the background and its output is dropped. A panic in
// the model is recovered and fails the attempt.
func (r *Runner) respond(ctx context.Context, in Input) (Output, error) {
	if r.InlineModel {
		return r.respondInline(ctx, in)
	}
	c := &modelCall{r: r, ctx: ctx, in: in, done: make(chan struct{})}
	go c.run()
	// Most models do not answer at once, but an instant one (a cache, a stub, a test double)
	// does: let the model's goroutine run first, so that its answer is usually waiting when
	// the turn looks. Taking it then costs no park and wake of this goroutine, and leaves the
	// deadline's Done channel unmade. A model that does not answer at once is waited for as
	// before, until ctx ends.
	runtime.Gosched()
	select {
	case <-c.done:
		return c.out, c.err
	default:
	}
	select {
	case <-c.done:
		return c.out, c.err
	case <-ctx.Done():
		return Output{}, fmt.Errorf("no answer before the context ended: %w", context.Cause(ctx))
	}
}

// modelCall is one call of the model on a goroutine of its own (respond): its input and, once
// done is closed, its output. One allocation holds all of it; the goroutine writes out and err
// before closing done, and respond reads them only after done is closed (the Go memory model's
// channel-close rule), so a call left running past its turn writes into memory nobody reads.
type modelCall struct {
	r    *Runner
	ctx  context.Context
	in   Input
	out  Output
	err  error
	done chan struct{}
}

func (c *modelCall) run() {
	defer close(c.done)
	defer func() {
		if p := recover(); p != nil {
			c.r.logger().Error("model panicked", "request_id", c.in.Request.ID, "panic", p, "stack", string(debug.Stack()))
			c.out, c.err = Output{}, Recovered("model", p)
		}
	}()
	// A ModelFunc is called directly, not through its Respond method, which would copy the
	// Input once more on a stack frame of its own: on this goroutine, whose stack starts
	// small, that copy alone can make the stack grow.
	if f, ok := c.r.Model.(ModelFunc); ok {
		c.out, c.err = f(c.ctx, c.in)
	} else {
		c.out, c.err = c.r.Model.Respond(c.ctx, c.in)
	}
}

// respondInline is respond on the caller's goroutine (Runner.InlineModel): the same errors,
// with the model trusted to return once ctx ends.
func (r *Runner) respondInline(ctx context.Context, in Input) (out Output, err error) {
	defer func() {
		if p := recover(); p != nil {
			r.logger().Error("model panicked", "request_id", in.Request.ID, "panic", p, "stack", string(debug.Stack()))
			out, err = Output{}, Recovered("model", p)
		}
	}()
	out, err = r.Model.Respond(ctx, in)
	if ctx.Err() != nil {
		return Output{}, fmt.Errorf("no answer before the context ended: %w", context.Cause(ctx))
	}
	return out, err
}

// getOrCreate loads the session, creating it on first use; the loser of a create race reads.
func (r *Runner) getOrCreate(ctx context.Context, key session.Key) (session.Session, error) {
	sess, err := r.Sessions.Get(ctx, key, r.historyLimit())
	if !errors.Is(err, session.ErrNotFound) {
		return sess, wrapIf("session get", err)
	}
	sess, err = r.Sessions.Create(ctx, key, nil)
	if !errors.Is(err, session.ErrExists) {
		return sess, wrapIf("session create", err)
	}
	sess, err = r.Sessions.Get(ctx, key, r.historyLimit())
	return sess, wrapIf("session get after create race", err)
}

func wrapIf(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}

// abandonedIf marks err as ErrAbandoned when the caller's context has ended (shutdown,
// revoke), whatever error the model or store made of it.
func abandonedIf(ctx context.Context, err error) error {
	if err == nil || ctx.Err() == nil {
		return err
	}
	return fmt.Errorf("%w: %w: %w", ErrAbandoned, context.Cause(ctx), err)
}

// noPromote is the through of a commit that promotes nothing (complete, promoteTx).
const noPromote = -1

// complete builds the Result from the stored turn and stores it in the inbox under ikey, req's
// InboxKey. With through >= 0 (the turn deferred side effects, or another delivery stored it
// on the separate path) it first promotes the request's deferred steps up to through to the
// outbox (0: all): the turn is stored, so it has committed, and a crash before the completion
// promotes again harmlessly on the next delivery. It returns the Result and its encoding.
func (r *Runner) complete(ctx context.Context, req Request, ikey string, stored []session.Event, through int) (Result, []byte, error) {
	res, data, err := r.result(req, stored)
	if err != nil {
		return Result{}, nil, err
	}
	if ob, ok := r.Inbox.(inbox.Outbox); ok && through >= 0 {
		if _, err := ob.Promote(ctx, ikey, through); err != nil {
			return Result{}, nil, fmt.Errorf("outbox promote: %w", err)
		}
	}
	if err := r.Inbox.Complete(ctx, ikey, data); err != nil {
		return Result{}, nil, fmt.Errorf("inbox complete: %w", err)
	}
	return res, data, nil
}

// promoteTx promotes the request's deferred steps inside the transaction that stores its turn:
// with PromoteTx when the inbox is a TxOutbox, or else, when it is an Outbox, with Promote
// before the transaction commits (a crash after it and before the commit leaves intents of a
// turn that did not commit; an Outbox that shares the turn's database should be a TxOutbox).
func (r *Runner) promoteTx(ctx context.Context, tx session.SQLTx, ikey string, through int) error {
	var err error
	switch ob := r.Inbox.(type) {
	case inbox.TxOutbox:
		_, err = ob.PromoteTx(ctx, tx, ikey, through)
	case inbox.Outbox:
		_, err = ob.Promote(ctx, ikey, through)
	}
	if err != nil {
		return fmt.Errorf("outbox promote: %w", err)
	}
	return nil
}

// promoteFound is the through of a commit that completes a turn another run stored (found by
// FindTurn, or a duplicate append): on the joint path nothing, for that run promoted its
// intents in the transaction that stored the turn; on the separate path all the request's
// deferred steps, for that run may have crashed between its append and its promotion. (There,
// a zombie that took another path and deferred past the stored turn's last step in that
// window has its extra intents promoted too; the joint path has no such window.)
func (r *Runner) promoteFound() int {
	if _, _, ok := r.joint(); ok {
		return noPromote
	}
	return 0
}

// journal returns the step journal of a turn whose tool keys derive from tools: with the steps
// an earlier delivery recorded when this one is not the first (a first delivery has none to
// load: no query).
func (r *Runner) journal(ctx context.Context, ikey string, tools toolScope, first bool) (*Journal, error) {
	jib, _ := r.Inbox.(inbox.Journal)
	var loaded []inbox.Step
	if jib != nil && !first {
		var err error
		if loaded, err = jib.Steps(ctx, ikey); err != nil {
			return nil, fmt.Errorf("inbox steps: %w", err)
		}
	}
	return newJournal(jib, ikey, tools, r.maxSteps(), r.maxJournalBytes(), loaded), nil
}

// result builds the Result of req from its stored turn, and its encoding for the inbox.
func (r *Runner) result(req Request, stored []session.Event) (Result, []byte, error) {
	if len(stored) == 0 { // a Store that breaks its contract; never index blindly
		return Result{}, nil, errors.New("session store returned an empty turn")
	}
	last := stored[len(stored)-1]
	res := Result{
		Schema: SchemaVersion, RequestID: req.ID, ConversationID: req.ConversationID,
		UserID: req.UserID, Sequence: req.Sequence, Text: last.Text, ReplyTo: req.ReplyTo,
		Metadata: req.Metadata, Events: len(stored), CompletedAt: last.Time.UTC(),
	}
	data, err := res.Encode()
	if err != nil {
		return Result{}, nil, fmt.Errorf("encode result: %w", err)
	}
	return res, data, nil
}

// failed records a failed attempt in the inbox and turns the error into what Run returns: a
// *DeadLetterError, or an *AttemptError for the caller to log and retry. The Runner logs
// neither: the caller owns the retry and the dead letter, and logs each once. The reasons it
// stores follow the marks lastAttemptEnd reads back (isolation.go).
func (r *Runner) failed(ctx context.Context, req Request, attempts int, err error) error {
	aerr := &AttemptError{RequestID: req.ID, Attempt: attempts, Err: err}
	switch Classify(err) {
	case KindPermanent:
		return r.deadLetter(ctx, req, attempts, aerr.Error(), aerr, KindPermanent)
	case KindAttempt:
		if attempts >= r.Attempts() {
			return r.deadLetter(ctx, req, attempts, fmt.Sprintf("%d attempts exhausted; last error: %v", attempts, aerr), aerr, KindAttempt)
		}
		r.bookkeep(ctx, req, func(ctx context.Context) error {
			return r.Inbox.Fail(ctx, r.InboxKey(req), inbox.Failure{Reason: aerr.Error()})
		})
	default: // not the request's fault: give the attempt back
		r.bookkeep(ctx, req, func(ctx context.Context) error {
			return r.Inbox.Fail(ctx, r.InboxKey(req), inbox.Failure{Reason: attemptReason(req.ID, attempts, markRefund, err.Error()), Refund: true})
		})
	}
	return aerr
}

// deadLetter marks the request dead and returns the *DeadLetterError for the caller to publish
// (and log, once it is published).
func (r *Runner) deadLetter(ctx context.Context, req Request, attempts int, reason string, cause error, kind Kind) error {
	r.bookkeep(ctx, req, func(ctx context.Context) error { return r.Inbox.MarkDead(ctx, r.InboxKey(req), reason) })
	return &DeadLetterError{RequestID: req.ID, Reason: reason, Attempts: attempts, Err: cause, Kind: kind}
}

// bookkeep runs an inbox write that must happen even when ctx has ended. Its failure is only
// logged: the inbox then counts the attempt anyway, which errs on the side of the DLQ.
func (r *Runner) bookkeep(ctx context.Context, req Request, write func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bookkeepingTimeout)
	defer cancel()
	if err := write(ctx); err != nil {
		r.logger().Warn("inbox bookkeeping failed", "request_id", req.ID, "conversation_id", req.ConversationID,
			"topic", req.Source.Topic, "partition", req.Source.Partition, "offset", req.Source.Offset, "err", err)
	}
}
