package workflow

import (
	"context"
	"time"

	"go.temporal.io/sdk/temporal"
	twf "go.temporal.io/sdk/workflow"
)

// Activity names of the StateStore, registered when WorkerOptions.States is set.
const (
	// LoadStateActivityName loads the State a conversation's previous run saved.
	LoadStateActivityName = "turnstile.LoadState"
	// SaveStateActivityName saves the State of a run that ends idle.
	SaveStateActivityName = "turnstile.SaveState"
)

// Change ids of workflow.GetVersion, so that histories recorded before a change replay.
const (
	versionLoadState = "turnstile-load-state"
	// versionLoadStateLocal: the State is loaded by a local activity (no activity task through
	// the server: one dispatch and one workflow task less for every run's start).
	versionLoadStateLocal = "turnstile-load-state-local"
	versionIdleSave       = "turnstile-idle-save"
	// versionStrangers: requests that cannot apply are dead-lettered, not dropped, and a
	// request refused as another user's changes no state (issue 19).
	versionStrangers = "turnstile-strangers"
	// versionConsumerDeadLetters: a request the consumer dead-lettered itself
	// (Envelope.DeadLettered) is passed over without the turn activity.
	versionConsumerDeadLetters = "turnstile-consumer-dead-letters"
	// versionRedrive: a re-driven request (Envelope.RedrivenFrom) is not dropped as already
	// applied; it applies out of order below the mark, and the inbox decides whether it runs.
	versionRedrive = "turnstile-redrive"
	// versionGapRelease: the release update and Config.GapTimeout skip a gap (GapActivityName).
	versionGapRelease = "turnstile-gap-release"
)

// StateStore keeps the State of a conversation whose run ended idle, for the next run: without
// it a new run would start from sequence 1 and an empty dedup window. SQLLedger and
// MemoryLedger implement it. Give every worker of a task queue the same store (or none): the
// workflow's commands depend on whether there is one.
type StateStore interface {
	// SaveState stores st under st.ConversationID, replacing what was there.
	SaveState(ctx context.Context, st State) error
	// LoadState returns the State stored for the conversation; found is false when none is.
	LoadState(ctx context.Context, conversationID string) (st State, found bool, err error)
}

// stateActivityOptions bound the store's activities; they retry until the store answers.
var stateActivityOptions = twf.ActivityOptions{
	StartToCloseTimeout: 30 * time.Second,
	RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 200 * time.Millisecond, MaximumInterval: 10 * time.Second},
}

// localStateOptions bound LoadState run as a local activity: each try at most 10 s, retried
// as the regular activity is until the store answers (a local activity past the workflow
// task's timeout keeps its task alive with heartbeats, as the SDK does for long ones).
var localStateOptions = twf.LocalActivityOptions{
	StartToCloseTimeout: 10 * time.Second,
	RetryPolicy:         stateActivityOptions.RetryPolicy,
}

// fresh reports whether st is what the bridge starts a conversation with: no progress carried.
func fresh(st State) bool {
	return st.NextSequence <= 1 && st.Applied == 0 && len(st.Recent) == 0 && len(st.Pending) == 0 && st.Overflow == 0
}

// loadState gives a fresh run the State its conversation's previous run saved when it ended
// idle. Submit handlers wait until it is done.
func (a *worker) loadState(ctx twf.Context, c *conversation) error {
	if !fresh(c.State) || twf.GetVersion(ctx, versionLoadState, twf.DefaultVersion, 1) == twf.DefaultVersion || a.opts.States == nil {
		return nil
	}
	c.loading = true
	defer func() { c.loading = false }()
	var (
		saved *State
		load  twf.Future
	)
	// A local activity runs in this worker with no activity task through the server (a run's
	// start is most of a short conversation's cost there); histories recorded before it load
	// with the regular activity.
	if twf.GetVersion(ctx, versionLoadStateLocal, twf.DefaultVersion, 1) >= 1 {
		load = twf.ExecuteLocalActivity(twf.WithLocalActivityOptions(ctx, localStateOptions), LoadStateActivityName, c.ConversationID)
	} else {
		load = twf.ExecuteActivity(twf.WithActivityOptions(ctx, stateActivityOptions), LoadStateActivityName, c.ConversationID)
	}
	err := load.Get(ctx, &saved)
	if err != nil || saved == nil {
		return err
	}
	c.NextSequence = max(c.NextSequence, saved.NextSequence)
	c.Applied, c.LastErrorKind = saved.Applied, saved.LastErrorKind
	if c.UserID == "" {
		c.UserID = saved.UserID
	}
	for _, id := range saved.Recent {
		c.remember(id)
	}
	return nil
}

// endIdle decides whether an idle run ends: with a StateStore it saves the State and ends
// unless a signal came in meanwhile; without one it keeps waiting. Histories recorded before
// the store existed end at once, as they did.
func (a *worker) endIdle(ctx twf.Context, c *conversation, signals twf.ReceiveChannel) (bool, error) {
	if twf.GetVersion(ctx, versionIdleSave, twf.DefaultVersion, 1) == twf.DefaultVersion {
		return true, nil
	}
	if a.opts.States == nil {
		return false, nil
	}
	st := c.State
	st.Config = c.cfg
	if err := twf.ExecuteActivity(twf.WithActivityOptions(ctx, stateActivityOptions), SaveStateActivityName, st).Get(ctx, nil); err != nil {
		return false, err
	}
	return signals.Len() == 0 && len(c.Pending) == 0 && twf.AllHandlersFinished(ctx), nil
}

// LoadState is the LoadStateActivityName activity; nil when nothing is stored.
func (a *worker) LoadState(ctx context.Context, conversationID string) (*State, error) {
	st, found, err := a.opts.States.LoadState(ctx, conversationID)
	if err != nil || !found {
		return nil, err
	}
	return &st, nil
}

// SaveState is the SaveStateActivityName activity.
func (a *worker) SaveState(ctx context.Context, st State) error {
	return a.opts.States.SaveState(ctx, st)
}
