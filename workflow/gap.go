package workflow

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	twf "go.temporal.io/sdk/workflow"

	"github.com/turnstile-go/turnstile/internal/record"
	"github.com/turnstile-go/turnstile/turn"
)

// Bounds of what a conversation lists and carries about gaps.
const (
	// maxMissingListed bounds Status.Missing (Status.MissingCount counts them all).
	maxMissingListed = 100
	// maxSkippedKept bounds State.Skipped, the sequences skipped most recently.
	maxSkippedKept = 100
	// maxGapLetters bounds the dead letters of one skipped gap: a wider gap is reported as
	// its first maxGapLetters-1 sequences and one dead letter for the rest.
	maxGapLetters = 1000
)

// releaseAsk is a release being carried out: the main loop skips the head gap while the
// conversation is held below upTo, then answers out to the release update's handlers.
type releaseAsk struct {
	reason string
	upTo   int64
	out    Released
	done   bool
}

// outOfOrder reports whether env is a re-drive (versionRedrive) whose sequence is below the
// applied mark: it applies in arrival order and never moves the mark.
func (c *conversation) outOfOrder(env Envelope) bool {
	return c.redrive && env.RedrivenFrom != "" && env.Request.Sequence > 0 && env.Request.Sequence < c.NextSequence
}

// highestHeld returns the highest sequence of the conversation's own pending requests above
// the applied mark, 0 when none waits there.
func (c *conversation) highestHeld() int64 {
	var high int64
	for _, p := range c.Pending {
		if s := p.Request.Sequence; s > c.NextSequence && !c.foreign(p) && !c.outOfOrder(p) {
			high = max(high, s)
		}
	}
	return high
}

// held reports whether the conversation has nothing to apply while requests wait behind a
// missing sequence, and applies nothing now.
func (c *conversation) held() bool { return !c.busy && c.highestHeld() > 0 && c.nextReady() < 0 }

// heldSequences returns the distinct sequences of the own pending requests at or above the
// applied mark, ascending.
func (c *conversation) heldSequences() []int64 {
	var seqs []int64
	for _, p := range c.Pending {
		if s := p.Request.Sequence; s >= c.NextSequence && !c.foreign(p) && !c.outOfOrder(p) {
			seqs = append(seqs, s)
		}
	}
	slices.Sort(seqs)
	return slices.Compact(seqs)
}

// missing returns up to limit of the sequences the conversation waits for (from the applied
// mark up to its highest held sequence, less those pending), ascending, and how many there
// are in all.
func (c *conversation) missing(limit int) ([]int64, int64) {
	var list []int64
	var count int64
	prev := c.NextSequence - 1
	for _, s := range c.heldSequences() {
		for m := prev + 1; m < s; m++ {
			if len(list) >= limit {
				break
			}
			list = append(list, m)
		}
		count += s - prev - 1
		prev = s
	}
	return list, count
}

// step does the next piece of work, if there is one: a release's head gap, or the next ready
// request. It reports whether it did something.
func (c *conversation) step(ctx, actx twf.Context) (bool, error) {
	if i := c.nextReady(); i >= 0 {
		c.HeldSince = time.Time{}
		c.apply(actx, i)
		return true, nil
	}
	if c.Overflow > 0 { // requests wait in the OverflowStore (carry.go): no gap before they are back
		return true, c.loadOverflow(ctx)
	}
	if c.ask == nil {
		return false, nil
	}
	if c.held() && c.NextSequence <= c.ask.upTo {
		c.busy = true
		defer func() { c.busy = false }()
		return true, c.skipHeadGap(ctx)
	}
	c.ask.out.LastAppliedSequence = c.NextSequence - 1
	c.ask.done, c.ask = true, nil
	return true, nil
}

// waitFor returns how long the main loop waits for work: Config.IdleTimeout, or less when the
// conversation is held and Config.GapTimeout releases it sooner (gapTimer is then true). It
// notes when the conversation became held (State.HeldSince).
func (c *conversation) waitFor(ctx twf.Context) (time.Duration, bool) {
	if !c.held() {
		c.HeldSince = time.Time{}
		return c.cfg.IdleTimeout, false
	}
	now := twf.Now(ctx)
	if c.HeldSince.IsZero() {
		c.HeldSince = now
	}
	if !c.gapRelease || c.cfg.GapTimeout <= 0 {
		return c.cfg.IdleTimeout, false
	}
	left := c.cfg.GapTimeout - now.Sub(c.HeldSince)
	if left >= c.cfg.IdleTimeout {
		return c.cfg.IdleTimeout, true
	}
	return max(left, time.Millisecond), true
}

// gapExpired reports whether the conversation is still held and has been for
// Config.GapTimeout.
func (c *conversation) gapExpired(ctx twf.Context) bool {
	return c.held() && !c.HeldSince.IsZero() && twf.Now(ctx).Sub(c.HeldSince) >= c.cfg.GapTimeout
}

// askRelease starts a release of every gap below the highest held sequence, unless one is
// being carried out.
func (c *conversation) askRelease(reason string) *releaseAsk {
	if c.ask == nil {
		c.ask = &releaseAsk{reason: reason, upTo: c.highestHeld()}
	}
	return c.ask
}

// skipHeadGap skips the missing sequences from the applied mark up to the lowest held one:
// it reports them with GapActivityName (a dead letter each, reason GapReason), records them
// in State.Skipped and moves the mark to the lowest held sequence, which then applies.
func (c *conversation) skipHeadGap(ctx twf.Context) error {
	seqs := c.heldSequences()
	from, to := c.NextSequence, seqs[0]-1
	rep := GapReport{ConversationID: c.ConversationID, UserID: c.UserID, WorkflowID: twf.GetInfo(ctx).WorkflowExecution.ID,
		Detail: fmt.Sprintf("sequence never arrived; skipped with %d request(s) held behind it: %s", len(seqs), c.ask.reason)}
	for s := from; s <= to; s++ {
		if len(rep.Sequences) == maxGapLetters-1 && to-s+1 > 1 {
			rep.From, rep.To = s, to
			break
		}
		rep.Sequences = append(rep.Sequences, s)
	}
	twf.GetLogger(ctx).Warn("releasing a sequence gap", "conversation_id", c.ConversationID, "from", from, "to", to, "reason", c.ask.reason)
	actx := twf.WithActivityOptions(ctx, stateActivityOptions)
	if err := twf.ExecuteActivity(actx, GapActivityName, rep).Get(ctx, nil); err != nil {
		return err
	}
	count := to - from + 1
	listed := rep.Sequences
	if rep.To > 0 {
		listed = append(slices.Clone(listed), rep.From)
	}
	c.Skipped = append(c.Skipped, listed...)
	if extra := len(c.Skipped) - maxSkippedKept; extra > 0 {
		c.Skipped = slices.Clone(c.Skipped[extra:])
	}
	c.SkippedTotal += count
	c.ask.out.Count += count
	if room := maxGapLetters - len(c.ask.out.Skipped); room > 0 {
		c.ask.out.Skipped = append(c.ask.out.Skipped, listed[:min(room, len(listed))]...)
	}
	c.NextSequence = to + 1
	c.HeldSince = time.Time{}
	return nil
}

// validateRelease rejects, before anything is written to history, a release of a run that
// cannot release (recorded before versionGapRelease, or continuing as new) or of a
// conversation that is not held.
func (c *conversation) validateRelease(_ twf.Context, _ Release) error {
	switch {
	case !c.gapRelease:
		return errors.New("release: this run predates gap release; send again once it has continued as new or ended")
	case c.draining:
		return temporal.NewApplicationError("release: the run is continuing as new; send again", errTypeContinuing)
	case c.loading, c.ask != nil:
		return nil
	case !c.held():
		return fmt.Errorf("release: conversation %s is not held at a gap (applied mark %d, %d pending)", c.ConversationID, c.NextSequence-1, len(c.Pending))
	}
	return nil
}

// release is the ReleaseUpdateName handler: it asks the main loop to skip every gap below the
// highest held sequence and returns what was skipped once the held requests up to it applied.
func (c *conversation) release(ctx twf.Context, r Release) (Released, error) {
	if err := twf.Await(ctx, func() bool { return !c.loading }); err != nil {
		return Released{}, err
	}
	if c.ask == nil && !c.held() {
		return Released{LastAppliedSequence: c.NextSequence - 1}, nil
	}
	reason := r.Reason
	if reason == "" {
		reason = "released by an operator"
	}
	ask := c.askRelease(reason)
	if err := twf.Await(ctx, func() bool { return ask.done }); err != nil {
		return Released{}, err
	}
	return ask.out, nil
}

// ReportGap is the GapActivityName activity: one dead letter with the reason GapReason per
// skipped sequence (and one for the range From..To, when set), published with the workers'
// Publisher. The dead letter's envelope carries the conversation, the user and the sequence,
// no text, and Origin "gap": there is no request to re-drive (KafkaPublisher writes no value,
// and the request-origin, workflow-id and request-sequence headers). Its request id is the gap's identity,
// record.GapRequestID of the workflow id and the sequence (the range's first sequence for the
// range's dead letter): a retried activity publishes the gap's dead letters again, and a
// reader dedups the copies by their request-id header.
func (a *worker) ReportGap(ctx context.Context, rep GapReport) error {
	publish := func(seq int64, detail string) error {
		env := Envelope{Request: turn.Request{Schema: turn.SchemaVersion, ID: record.GapRequestID(rep.WorkflowID, seq),
			ConversationID: rep.ConversationID, UserID: rep.UserID, Sequence: seq}, Origin: record.OriginGap}
		dl := DeadLetter{Reason: GapReason, Err: errors.New(detail), Kind: turn.KindPermanent, WorkflowID: rep.WorkflowID}
		if err := a.opts.Publisher.PublishDeadLetter(ctx, env, dl); err != nil {
			a.opts.Logger.Warn("gap dead-letter publish failed; the activity retries", "conversation_id", rep.ConversationID,
				"sequence", seq, "err", err)
			return temporal.NewApplicationError("publish gap dead letter: "+err.Error(), errorType(turn.KindUnavailable))
		}
		a.opts.Logger.Error("sequence gap skipped", "conversation_id", rep.ConversationID, "workflow_id", rep.WorkflowID,
			"sequence", seq, "detail", detail)
		return nil
	}
	for _, s := range rep.Sequences {
		if err := publish(s, fmt.Sprintf("sequence %d: %s", s, rep.Detail)); err != nil {
			return err
		}
	}
	if rep.To > 0 {
		return publish(rep.From, fmt.Sprintf("sequences %d to %d (%d): %s", rep.From, rep.To, rep.To-rep.From+1, rep.Detail))
	}
	return nil
}
