package workflow

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/api/serviceerror"
)

// conversationTarget is what reconciliation needs of a conversation's workflow: its applied
// mark and a way to re-send requests. The Bridge is one; tests use the testsuite's.
type conversationTarget interface {
	lastApplied(ctx context.Context, conversationID string) (int64, error)
	resend(ctx context.Context, conversationID string, envs []Envelope) error
}

// reconcile re-sends from the ledger every request above the workflow's applied mark, up to
// the ledger's high-water mark, and returns how many it sent. The workflow drops the ones it
// holds already, so re-sending a pending request is harmless.
func reconcile(ctx context.Context, l Ledger, t conversationTarget, conversationID string) (int, error) {
	high, err := l.HighWater(ctx, conversationID)
	if err != nil {
		return 0, fmt.Errorf("workflow: reconcile %s: ledger: %w", conversationID, err)
	}
	applied, err := t.lastApplied(ctx, conversationID)
	if err != nil {
		return 0, fmt.Errorf("workflow: reconcile %s: query: %w", conversationID, err)
	}
	if applied >= high {
		return 0, nil
	}
	envs, err := l.Range(ctx, conversationID, applied+1, high)
	if err != nil {
		return 0, fmt.Errorf("workflow: reconcile %s: ledger range: %w", conversationID, err)
	}
	if len(envs) == 0 {
		return 0, nil
	}
	if err := t.resend(ctx, conversationID, envs); err != nil {
		return 0, fmt.Errorf("workflow: reconcile %s: re-send %d request(s): %w", conversationID, len(envs), err)
	}
	return len(envs), nil
}

// Reconcile compares the conversation workflow's lastAppliedSequence with the ledger's
// high-water mark of what was handed off, and re-sends the gap from the ledger (a request
// whose signal was lost, a workflow reset). It returns how many requests it re-sent; 0 when
// the workflow is caught up. A conversation without a workflow counts as applied up to 0.
// Errors: no Ledger in the BridgeOptions, and the ledger's, the query's and the signal's.
func (b *Bridge) Reconcile(ctx context.Context, conversationID string) (int, error) {
	if b.opts.Ledger == nil {
		return 0, errors.New("workflow: Reconcile needs BridgeOptions.Ledger")
	}
	return reconcile(ctx, b.opts.Ledger, b, conversationID)
}

// SweepReport says what one reconciliation sweep did.
type SweepReport struct {
	// Checked counts the conversations compared; Resent the requests re-sent.
	Checked, Resent int
	// Failed maps a conversation to the error of its reconciliation.
	Failed map[string]error
}

// Sweep reconciles every conversation whose latest hand-off is older than olderThan (so that
// requests still on their way are not re-sent needlessly). The error is the ledger's; each
// conversation's own failure is in the report.
func (b *Bridge) Sweep(ctx context.Context, olderThan time.Duration) (SweepReport, error) {
	var rep SweepReport
	if b.opts.Ledger == nil {
		return rep, errors.New("workflow: Sweep needs BridgeOptions.Ledger")
	}
	convs, err := b.opts.Ledger.Conversations(ctx, time.Now().Add(-olderThan))
	if err != nil {
		return rep, fmt.Errorf("workflow: sweep: %w", err)
	}
	for _, conv := range convs {
		n, err := b.Reconcile(ctx, conv)
		rep.Checked++
		rep.Resent += n
		if err != nil {
			if rep.Failed == nil {
				rep.Failed = map[string]error{}
			}
			rep.Failed[conv] = err
		}
	}
	return rep, nil
}

// RunSweeps runs Sweep every interval until ctx ends, logging what each sweep re-sent or
// failed; it returns ctx's error.
func (b *Bridge) RunSweeps(ctx context.Context, interval, olderThan time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		rep, err := b.Sweep(ctx, olderThan)
		switch {
		case err != nil:
			b.opts.Logger.Warn("reconciliation sweep failed", "err", err)
		case rep.Resent > 0 || len(rep.Failed) > 0:
			b.opts.Logger.Info("reconciliation sweep", "checked", rep.Checked, "resent", rep.Resent, "failed", len(rep.Failed))
		}
	}
}

func (b *Bridge) lastApplied(ctx context.Context, conversationID string) (int64, error) {
	v, err := b.c.QueryWorkflow(ctx, b.WorkflowID(conversationID), "", QueryLastAppliedSequence)
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var applied int64
	return applied, v.Get(&applied)
}

func (b *Bridge) resend(ctx context.Context, conversationID string, envs []Envelope) error {
	return b.send(ctx, conversationID, envs)
}
