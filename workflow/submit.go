package workflow

import (
	"context"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-go/turnstile/internal/record"
	"github.com/turnstile-go/turnstile/turn"
)

// Submit sends req to its conversation's workflow as a submit update, starting the workflow
// when none runs (UpdateWithStart), and returns the turn's Result once it applied: for callers
// that want the answer synchronously, such as an HTTP front door. The update id is the request
// id, so a retried Submit of the same request attaches to the same update within a run and
// never runs the model twice for it; headers travel as WithHeaders(ctx) says.
//
// Errors: the validator's rejection (a duplicate already applied, a stale sequence), an
// ApplicationError of type ErrDeadLettered when the request was dead-lettered, and the
// client's; ctx bounds the wait.
func (b *Bridge) Submit(ctx context.Context, req turn.Request) (turn.Result, error) {
	if err := (turn.Decoder{}).Validate(req); err != nil {
		return turn.Result{}, turn.Permanent(err)
	}
	env := Envelope{Request: req, Source: req.Source, Headers: filterHeaders(Headers(ctx), b.opts.Headers), Origin: record.OriginSubmit}
	delay := 20 * time.Millisecond
	for {
		res, err := b.submitOnce(ctx, env)
		var appErr *temporal.ApplicationError
		if !errors.As(err, &appErr) || appErr.Type() != errTypeContinuing {
			return res, err
		}
		b.resubmits.Add(1)
		select { // the run is continuing as new: the next one takes the update
		case <-ctx.Done():
			return turn.Result{}, fmt.Errorf("workflow: submit %s: %w (last: %w)", req.ID, ctx.Err(), err)
		case <-time.After(delay):
		}
		delay = min(2*delay, time.Second)
	}
}

func (b *Bridge) submitOnce(ctx context.Context, env Envelope) (turn.Result, error) {
	req := env.Request
	id := b.WorkflowID(req.ConversationID)
	start := b.c.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
		ID: id, TaskQueue: b.opts.TaskQueue, WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		TypedSearchAttributes: b.startAttributes(req.ConversationID, req.UserID),
	}, WorkflowName, State{ConversationID: req.ConversationID, Config: b.opts.Config})
	handle, err := b.c.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: start,
		UpdateOptions: client.UpdateWorkflowOptions{
			UpdateID: req.ID, WorkflowID: id, UpdateName: UpdateName, Args: []any{env},
			WaitForStage: client.WorkflowUpdateStageCompleted,
		},
	})
	if err != nil {
		return turn.Result{}, classifyTemporal(ctx, err)
	}
	var out Outcome
	if err := handle.Get(ctx, &out); err != nil {
		var appErr *temporal.ApplicationError
		if errors.As(err, &appErr) && appErr.Type() == ErrDeadLettered {
			return turn.Result{}, turn.Permanent(err)
		}
		return turn.Result{}, err
	}
	if out.Result == nil {
		return turn.Result{}, fmt.Errorf("workflow: submit %s: no result in the outcome", req.ID)
	}
	return *out.Result, nil
}

// Submit is Bridge.Submit on a bridge built from c and opts.
func Submit(ctx context.Context, c client.Client, opts BridgeOptions, req turn.Request) (turn.Result, error) {
	b, err := NewBridge(c, opts)
	if err != nil {
		return turn.Result{}, err
	}
	return b.Submit(ctx, req)
}
