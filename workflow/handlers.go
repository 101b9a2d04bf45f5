package workflow

import (
	"errors"
	"fmt"

	"go.temporal.io/sdk/temporal"
	twf "go.temporal.io/sdk/workflow"
)

// ErrDeadLettered is the type of the ApplicationError a submit update fails with when its
// request was dead-lettered; the error's message carries the reason.
const ErrDeadLettered = "DeadLettered"

// errTypeDuplicate is the type of the error of a submit update whose request turned out to
// be a duplicate or stale once a fresh run had loaded its conversation's State.
const errTypeDuplicate = "Duplicate"

// errTypeContinuing is the type of the rejection of a submit update that reached a run about
// to continue as new; Submit sends it again, and it lands on the next run.
const errTypeContinuing = "ContinuingAsNew"

// setHandlers registers the queries and the submit update of a run.
func (c *conversation) setHandlers(ctx twf.Context) error {
	if err := twf.SetQueryHandler(ctx, QueryLastAppliedSequence, func() (int64, error) {
		return c.NextSequence - 1, nil
	}); err != nil {
		return err
	}
	if err := twf.SetQueryHandler(ctx, QueryStatus, func() (Status, error) { return c.status(), nil }); err != nil {
		return err
	}
	if err := twf.SetUpdateHandlerWithOptions(ctx, UpdateName, c.submit, twf.UpdateHandlerOptions{
		Validator:   c.validateSubmit,
		Description: "submit one request; returns its Result once the turn applied",
	}); err != nil {
		return err
	}
	return twf.SetUpdateHandlerWithOptions(ctx, ReleaseUpdateName, c.release, twf.UpdateHandlerOptions{
		Validator:   c.validateRelease,
		Description: "release a sequence gap now: skip the missing sequences (dead letters with reason gap), apply the held requests",
	})
}

// validateSubmit rejects, before anything is written to history, a request that is malformed
// for this conversation, already applied (within the dedup window) or below the sequence
// mark. A request that is pending (signalled before) is accepted: the update waits for it.
func (c *conversation) validateSubmit(_ twf.Context, env Envelope) error {
	req := env.Request
	switch {
	case c.draining:
		return temporal.NewApplicationError("submit: the run is continuing as new; send again", errTypeContinuing)
	case req.ID == "":
		return errors.New("submit: request id missing")
	case req.ConversationID != c.ConversationID:
		return fmt.Errorf("submit: request %s names conversation %q, this workflow is %q", req.ID, req.ConversationID, c.ConversationID)
	case c.pendingIndex(req.ID) >= 0, c.loading:
		return nil // pending: the update waits for it; loading: the handler checks once loaded
	}
	if reason := c.duplicate(env); reason != "" {
		return fmt.Errorf("submit: request %s rejected as a duplicate or stale: %s", req.ID, reason)
	}
	return nil
}

// pendingIndex returns the index of request id in Pending, or -1.
func (c *conversation) pendingIndex(id string) int {
	for i, p := range c.Pending {
		if p.Request.ID == id {
			return i
		}
	}
	return -1
}

// submit queues the request (unless it is pending already) and waits for its outcome.
func (c *conversation) submit(ctx twf.Context, env Envelope) (*Outcome, error) {
	id := env.Request.ID
	c.waiting[id]++
	defer func() {
		if c.waiting[id]--; c.waiting[id] <= 0 {
			delete(c.waiting, id)
			delete(c.outcomes, id)
		}
	}()
	if err := twf.Await(ctx, func() bool { return !c.loading }); err != nil {
		return nil, err
	}
	if c.pendingIndex(id) < 0 {
		if reason := c.duplicate(env); reason != "" {
			return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("submit: request %s rejected as a duplicate or stale: %s", id, reason), errTypeDuplicate, nil)
		}
		c.accept(ctx, env)
	}
	if err := twf.Await(ctx, func() bool {
		_, ok := c.outcomes[id]
		return ok || (c.draining && c.heldAtGap(id))
	}); err != nil {
		return nil, err
	}
	out, ok := c.outcomes[id]
	if !ok {
		// The run is continuing as new and this request waits for a gap: it travels into the
		// next run with the pending requests, and Submit sends the update again there.
		return nil, temporal.NewApplicationError("submit: request held at a sequence gap while the run continues as new; send again", errTypeContinuing)
	}
	if out.DeadLettered {
		return nil, temporal.NewNonRetryableApplicationError(out.Reason, ErrDeadLettered, nil)
	}
	return &out, nil
}

// heldAtGap reports whether request id is pending behind a missing sequence.
func (c *conversation) heldAtGap(id string) bool {
	i := c.pendingIndex(id)
	return i >= 0 && c.Pending[i].Request.Sequence > c.NextSequence
}
