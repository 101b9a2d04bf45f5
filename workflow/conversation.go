package workflow

import (
	"errors"
	"fmt"
	"slices"

	"go.temporal.io/sdk/temporal"
	twf "go.temporal.io/sdk/workflow"

	"github.com/turnstile-go/turnstile/turn"
)

// conversation is one run of a conversation's workflow: the state it carries plus what only
// this run needs (update waiters, counters).
type conversation struct {
	State
	cfg          Config
	runID        string
	turnsThisRun int
	signals      int
	recentSet    map[string]bool
	// waiting counts the submit handlers waiting per request id; outcomes holds the outcome
	// of a request with waiters until the last of them returned.
	waiting  map[string]int
	outcomes map[string]Outcome
	// published is what the search attributes last said, to upsert only on change.
	published  searchValues
	beforeTurn func(twf.Context)
	// loading is set while a fresh run loads the State of the conversation's previous run;
	// submit handlers wait for it.
	loading bool
	// draining is set once the run is due to continue as new: new submit updates are
	// rejected (Submit retries them on the next run) so that the handlers in flight can finish.
	draining bool
	// strict is the behaviour of versionStrangers: a request the conversation cannot apply (a
	// sequence below the mark or taken by another request id) is queued and dead-lettered
	// instead of dropped, a request the Runner refuses as another user's changes nothing, and
	// only the same request id of the same user is a duplicate. Histories recorded before it
	// replay without it.
	strict bool
	// redrive is the behaviour of versionRedrive: a re-driven request (Envelope.RedrivenFrom)
	// is not dropped as already applied, and applies out of order when its sequence is below
	// the mark.
	redrive bool
	// gapRelease is the behaviour of versionGapRelease: the release update and
	// Config.GapTimeout may skip a gap. Runs recorded before it reject the update.
	gapRelease bool
	// ask is the release being carried out (the release update's, or the gap timeout's); the
	// main loop skips the head gap while the conversation is held below ask.upTo.
	ask *releaseAsk
	// busy is set while the main loop applies a request or skips a gap: the conversation is
	// not held then (its next sequence may be the one in flight).
	busy bool
}

// Conversation is the conversation workflow (registered as WorkflowName by Register): the
// durable owner of one conversation's semantic progress. It takes requests from SignalName
// signals (received in the main coroutine, so none is lost at continue-as-new) and from
// UpdateName updates, and applies them one at a time by running ActivityName:
//
//   - a request with a Sequence waits for NextSequence; a gap holds every later one until a
//     request fills it (Reconcile re-sends it from the ledger);
//   - a request without a Sequence applies in arrival order;
//   - the same request again (its id applied within the dedup window or pending, for the
//     same user) is a duplicate and dropped: it has its outcome or will have it;
//   - a request that cannot apply is dead-lettered with the reason, never dropped: a new
//     request id whose sequence is below the applied mark, or pending as another request
//     id of the same user (a duplicate older than the dedup window is answered from the
//     Runner's inbox instead), or a request of another user, which the Runner refuses
//     (session.ErrOwnerMismatch, G7) and which changes nothing of the conversation: not
//     the mark, the pending requests, the dedup window or the counters.
//   - a request the consumer dead-lettered itself (Envelope.DeadLettered, from
//     Bridge.DeadLettered) is passed over when its sequence comes up: the mark moves past it,
//     with no activity and no second dead letter.
//   - a re-driven request (Envelope.RedrivenFrom) is never dropped as already applied: it
//     applies in arrival order when its sequence is below the mark (without moving it), and
//     the inbox decides whether it runs (see TurnInput.Redrive).
//   - a gap is released by the ReleaseUpdateName update (Bridge.Release) or after
//     Config.GapTimeout: the missing sequences are skipped and reported as dead letters
//     with the reason GapReason, then the held requests apply in order.
//
// It continues as new after Config.MaxTurnsPerRun turns, Config.MaxSignalsPerRun signals,
// Config.MaxHistoryEvents history events or when the server suggests it, once every update
// handler has finished and the signal channel is drained, carrying the pending requests (at
// most Config.MaxCarriedBytes of them when the workers have an OverflowStore, which keeps the
// rest: see carry.go), the sequence mark and the dedup window. A run with nothing pending ends after
// Config.IdleTimeout when the workers have a StateStore (WorkerOptions.States): it saves its
// State there, and the next request starts a new run (SignalWithStart) that loads it, so the
// sequence mark and the dedup window survive. Without a StateStore an idle run keeps waiting.
func (a *worker) Conversation(ctx twf.Context, st State) error {
	c := &conversation{State: st, cfg: st.Config.withDefaults(), waiting: map[string]int{}, outcomes: map[string]Outcome{}, beforeTurn: a.beforeTurn}
	c.runID = twf.GetInfo(ctx).WorkflowExecution.RunID
	c.strict = twf.GetVersion(ctx, versionStrangers, twf.DefaultVersion, 1) >= 1
	c.redrive = c.strict && twf.GetVersion(ctx, versionRedrive, twf.DefaultVersion, 1) >= 1
	c.gapRelease = twf.GetVersion(ctx, versionGapRelease, twf.DefaultVersion, 1) >= 1
	if c.NextSequence <= 0 {
		c.NextSequence = 1
	}
	c.recentSet = make(map[string]bool, len(c.Recent))
	for _, id := range c.Recent {
		c.recentSet[id] = true
	}
	if err := c.setHandlers(ctx); err != nil {
		return err
	}
	if err := a.loadState(ctx, c); err != nil {
		return err
	}
	actx := twf.WithActivityOptions(ctx, a.activityOptions())
	signals := twf.GetSignalChannel(ctx, SignalName)
	log := twf.GetLogger(ctx)
	for {
		c.drain(ctx, signals)
		if err := c.upsertSearch(ctx); err != nil {
			return err
		}
		if c.continueDue(ctx) {
			return a.continueAsNew(ctx, actx, c, signals)
		}
		if done, err := c.step(ctx, actx); err != nil || done {
			if err != nil {
				return err
			}
			continue
		}
		timeout, gapTimer := c.waitFor(ctx)
		ok, err := twf.AwaitWithTimeout(ctx, timeout, func() bool {
			return signals.Len() > 0 || c.nextReady() >= 0 || c.ask != nil
		})
		if err != nil {
			return err // the workflow was cancelled
		}
		if !ok && gapTimer && c.gapExpired(ctx) {
			c.askRelease(fmt.Sprintf("held for more than %s (Config.GapTimeout)", c.cfg.GapTimeout))
			continue
		}
		if !ok && len(c.Pending) == 0 && signals.Len() == 0 && twf.AllHandlersFinished(ctx) {
			end, err := a.endIdle(ctx, c, signals)
			if err != nil || end {
				log.Info("conversation idle; run ends", "conversation_id", c.ConversationID, "applied", c.Applied)
				return err
			}
		}
	}
}

// drain receives every signal already delivered, without blocking.
func (c *conversation) drain(ctx twf.Context, signals twf.ReceiveChannel) {
	for {
		var b Batch
		if !signals.ReceiveAsync(&b) {
			return
		}
		c.signals++
		for _, env := range b.Envelopes {
			c.accept(ctx, env)
		}
	}
}

// accept adds env to Pending unless it is a duplicate; it reports whether it did, and, when
// not, whether the request had already been applied.
func (c *conversation) accept(ctx twf.Context, env Envelope) bool {
	if reason := c.duplicate(env); reason != "" {
		if env.DeadLettered != "" {
			c.markDeadLettered(env)
		}
		twf.GetLogger(ctx).Info("duplicate request dropped", "request_id", env.Request.ID,
			"conversation_id", c.ConversationID, "sequence", env.Request.Sequence, "why", reason)
		return false
	}
	if c.UserID == "" && !c.strict {
		c.UserID = env.Request.UserID
	}
	c.Pending = append(c.Pending, env)
	return true
}

// markDeadLettered marks the pending envelope of env's request (same id, user and
// conversation) as dead-lettered by the consumer with env's reason: the consumer published a
// dead letter for it, so it must not run as well.
func (c *conversation) markDeadLettered(env Envelope) {
	req := env.Request
	for i, p := range c.Pending {
		if p.Request.ID == req.ID && p.Request.UserID == req.UserID && p.Request.ConversationID == req.ConversationID && p.DeadLettered == "" {
			c.Pending[i].DeadLettered = env.DeadLettered
		}
	}
}

// duplicate says why env must not be queued, or "" when it is queued.
func (c *conversation) duplicate(env Envelope) string {
	if !c.strict {
		return c.legacyDuplicate(env)
	}
	req := env.Request
	if c.recentlyApplied(env) {
		return "already applied"
	}
	for _, p := range c.Pending {
		if p.Request.ID == req.ID && p.Request.UserID == req.UserID && p.Request.ConversationID == req.ConversationID {
			return "already pending"
		}
	}
	return ""
}

// recentlyApplied reports whether env's request is in the dedup window as a duplicate: its id
// applied recently and, from versionStrangers on, of the conversation's user and not a re-drive
// (versionRedrive).
func (c *conversation) recentlyApplied(env Envelope) bool {
	req := env.Request
	if !c.strict {
		return c.recentSet[req.ID]
	}
	return c.recentSet[req.ID] && (c.UserID == "" || c.UserID == req.UserID) && !(c.redrive && env.RedrivenFrom != "")
}

// legacyDuplicate is duplicate before versionStrangers: it also dropped a sequence below the
// mark and a second request id for a pending sequence.
func (c *conversation) legacyDuplicate(env Envelope) string {
	req := env.Request
	if c.recentSet[req.ID] {
		return "already applied"
	}
	if c.foreign(env) {
		if c.pendingIndex(req.ID) >= 0 {
			return "already pending"
		}
		return ""
	}
	if req.Sequence > 0 && req.Sequence < c.NextSequence {
		return fmt.Sprintf("sequence %d is below the applied mark %d", req.Sequence, c.NextSequence-1)
	}
	for _, p := range c.Pending {
		if p.Request.ID == req.ID {
			return "already pending"
		}
		if req.Sequence > 0 && p.Request.Sequence == req.Sequence && !c.foreign(p) {
			return fmt.Sprintf("sequence %d is already pending as request %s", req.Sequence, p.Request.ID)
		}
	}
	return ""
}

// foreign reports whether env names another conversation than this workflow's.
func (c *conversation) foreign(env Envelope) bool {
	return env.Request.ConversationID != c.ConversationID
}

// nextReady returns the index in Pending of the request to apply next: the first, in arrival
// order, that has no Sequence, has NextSequence, names another conversation or cannot apply
// (the last two are dead-lettered at once); -1 when none is ready.
func (c *conversation) nextReady() int {
	for i, p := range c.Pending[:c.visible()] {
		if s := p.Request.Sequence; s == 0 || s == c.NextSequence || c.foreign(p) || c.outOfOrder(p) || c.unapplicable(i) != "" {
			return i
		}
	}
	return -1
}

// unapplicable says why Pending[i] can never apply, "" when it may: its sequence is below the
// applied mark, or an earlier pending request of the same user holds it. Requests of two users
// that hold one sequence both wait for it: the session store knows which user owns the
// conversation, the workflow does not, so the Runner refuses the stranger's and the owner's
// applies. Always "" before versionStrangers.
func (c *conversation) unapplicable(i int) string {
	p := c.Pending[i]
	s := p.Request.Sequence
	if !c.strict || s <= 0 || c.foreign(p) || c.outOfOrder(p) {
		return ""
	}
	if s < c.NextSequence && slices.Contains(c.Skipped, s) {
		return fmt.Sprintf("sequence %d was skipped as a gap (released) before this request came", s)
	}
	if s < c.NextSequence {
		return fmt.Sprintf("sequence %d is below the applied mark %d: another request applied it", s, c.NextSequence-1)
	}
	for _, q := range c.Pending[:i] {
		if q.Request.Sequence == s && q.Request.UserID == p.Request.UserID && !c.foreign(q) {
			return fmt.Sprintf("sequence %d is already pending as request %s", s, q.Request.ID)
		}
	}
	return ""
}

// apply runs the turn of Pending[i] and records its outcome. The activity's retry policy
// retries everything but a dead letter, which comes back as an Outcome; an activity that still
// fails (its options exhausted) is recorded as a dead letter too, so that the conversation
// moves on (G5), and the error is logged.
//
// A request that cannot apply (unapplicable) leaves the mark where it is; one the Runner
// refused as another user's (Outcome.Foreign) changes nothing of the conversation.
func (c *conversation) apply(actx twf.Context, i int) {
	env := c.Pending[i]
	stale := c.unapplicable(i)
	c.Pending = slices.Delete(c.Pending, i, i+1)
	c.removed(i)
	redrive := c.redrive && env.RedrivenFrom != ""
	c.busy = true
	defer func() { c.busy = false }()
	var out Outcome
	if c.beforeTurn != nil {
		c.beforeTurn(actx)
	}
	if env.DeadLettered != "" && twf.GetVersion(actx, versionConsumerDeadLetters, twf.DefaultVersion, 1) >= 1 {
		c.passOver(actx, env, stale)
		return
	}
	in := TurnInput{Envelope: env, WantResult: c.waiting[env.Request.ID] > 0, Stale: stale, Redrive: redrive}
	if c.foreign(env) {
		// Never applied here: the turn would land in another conversation's session.
		in.Reject = fmt.Sprintf("request names conversation %.80q but was sent to the workflow of %.80q", env.Request.ConversationID, c.ConversationID)
	}
	err := twf.ExecuteActivity(withHeaders(actx, env.Headers), ActivityName, in).Get(actx, &out)
	if err != nil {
		twf.GetLogger(actx).Error("turn activity failed for good", "request_id", env.Request.ID,
			"conversation_id", c.ConversationID, "err", err)
		out = Outcome{DeadLettered: true, Reason: err.Error(), Kind: activityErrorKind(err)}
	}
	c.turnsThisRun++
	if c.waiting[env.Request.ID] > 0 {
		c.outcomes[env.Request.ID] = out
	}
	if out.Foreign && c.strict {
		twf.GetLogger(actx).Warn("request of another user refused; the conversation is unchanged", "request_id", env.Request.ID,
			"conversation_id", c.ConversationID, "sequence", env.Request.Sequence)
		return
	}
	if out.DeadLettered {
		c.LastErrorKind = out.Kind
	}
	if s := env.Request.Sequence; s > 0 && s >= c.NextSequence && !c.foreign(env) && stale == "" {
		c.NextSequence = s + 1
	}
	if c.strict && c.UserID == "" && out.Published && stale == "" && !c.foreign(env) {
		c.UserID = env.Request.UserID
	}
	if redrive {
		twf.GetLogger(actx).Info("re-driven request applied", "request_id", env.Request.ID, "conversation_id", c.ConversationID,
			"sequence", env.Request.Sequence, "redriven_from", env.RedrivenFrom, "already_done", out.AlreadyDone,
			"dead_lettered", out.DeadLettered)
		if c.recentSet[env.Request.ID] {
			if !out.AlreadyDone {
				c.Applied++
			}
			return
		}
	}
	c.remember(env.Request.ID)
	if !out.AlreadyDone {
		c.Applied++
	}
}

// passOver records env, a request the consumer dead-lettered itself (Envelope.DeadLettered),
// without the turn activity: the consumer published the dead letter. Its sequence advances the
// applied mark as a dead letter's would (unless it cannot apply, stale), it joins the dedup
// window and the count of applied turns, and a submit waiting for it gets the dead letter; the
// conversation's LastErrorKind stays as it was (the consumer's kind is not known here). One
// naming another conversation changes nothing.
func (c *conversation) passOver(actx twf.Context, env Envelope, stale string) {
	twf.GetLogger(actx).Info("request dead-lettered by the consumer; passed over", "request_id", env.Request.ID,
		"conversation_id", c.ConversationID, "sequence", env.Request.Sequence, "reason", env.DeadLettered)
	if c.waiting[env.Request.ID] > 0 {
		c.outcomes[env.Request.ID] = Outcome{DeadLettered: true, Reason: env.DeadLettered}
	}
	if c.foreign(env) {
		return
	}
	if s := env.Request.Sequence; s > 0 && s >= c.NextSequence && stale == "" {
		c.NextSequence = s + 1
	}
	c.remember(env.Request.ID)
	c.Applied++
}

func activityErrorKind(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.Type() != "" {
		return appErr.Type()
	}
	return errorType(turn.KindAttempt)
}

// remember adds id to the dedup window, forgetting the oldest beyond Config.DedupWindow.
func (c *conversation) remember(id string) {
	c.Recent = append(c.Recent, id)
	c.recentSet[id] = true
	if extra := len(c.Recent) - c.cfg.DedupWindow; extra > 0 {
		for _, old := range c.Recent[:extra] {
			delete(c.recentSet, old)
		}
		c.Recent = slices.Clone(c.Recent[extra:])
	}
}

// continueDue says whether this run has grown enough to hand over to a new one.
func (c *conversation) continueDue(ctx twf.Context) bool {
	info := twf.GetInfo(ctx)
	return c.turnsThisRun >= c.cfg.MaxTurnsPerRun || c.signals >= c.cfg.MaxSignalsPerRun ||
		info.GetCurrentHistoryLength() >= c.cfg.MaxHistoryEvents || info.GetContinueAsNewSuggested()
}

// continueAsNew finishes the submit handlers in flight (applying their requests, which may
// take turns beyond the threshold) while the validator turns new ones away, drains the signal channel and continues as new with the
// carried State. Returning while a handler runs would abandon its update; a signal left in
// the channel would be lost with the run.
func (a *worker) continueAsNew(ctx, actx twf.Context, c *conversation, signals twf.ReceiveChannel) error {
	c.draining = true
	for !twf.AllHandlersFinished(ctx) {
		if done, err := c.step(ctx, actx); err != nil || done {
			if err != nil {
				return err
			}
			continue
		}
		if err := twf.Await(ctx, func() bool {
			return twf.AllHandlersFinished(ctx) || c.nextReady() >= 0 || signals.Len() > 0 || c.ask != nil
		}); err != nil {
			return err
		}
		c.drain(ctx, signals)
	}
	for {
		c.drain(ctx, signals)
		// Storing the overflow takes activities, while which signals may come in: they are
		// drained and stored too before the run hands over.
		if err := a.carry(ctx, c); err != nil {
			return err
		}
		if signals.Len() == 0 {
			break
		}
	}
	twf.GetLogger(ctx).Info("continuing as new", "conversation_id", c.ConversationID,
		"turns_this_run", c.turnsThisRun, "signals", c.signals, "pending", len(c.Pending))
	next := c.State
	next.Config = c.cfg
	return twf.NewContinueAsNewError(ctx, WorkflowName, next)
}

// status is the QueryStatus answer.
func (c *conversation) status() Status {
	st := Status{
		ConversationID: c.ConversationID, LastAppliedSequence: c.NextSequence - 1, Applied: c.Applied,
		Pending: len(c.Pending) + int(c.Overflow), Overflow: c.Overflow, RunID: c.runID, TurnsThisRun: c.turnsThisRun, LastErrorKind: c.LastErrorKind,
	}
	for _, p := range c.Pending {
		if p.Request.Sequence > 0 {
			st.PendingSequences = append(st.PendingSequences, p.Request.Sequence)
		}
	}
	slices.Sort(st.PendingSequences)
	st.Skipped = c.SkippedTotal
	if c.held() {
		st.Held, st.HeldSince = true, c.HeldSince
		st.Missing, st.MissingCount = c.missing(maxMissingListed)
	}
	return st
}
