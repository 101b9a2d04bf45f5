package workflow

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
)

// Names of the gauges Bridge.WatchHeld reports through BridgeOptions.Telemetry's
// MeterProvider (instrumentation scope turnotel.ScopeName).
const (
	// MetricHeldRequests is the requests held in conversation workflows behind a missing
	// sequence, summed over the held conversations ({request}).
	MetricHeldRequests = "turnstile.workflow.held.requests"
	// MetricHeldConversations is the conversations held at a gap ({conversation}).
	MetricHeldConversations = "turnstile.workflow.held.conversations"
	// MetricHeldOldestAge is how long the longest-held conversation has been held
	// (Status.HeldSince), in seconds; 0 when none is.
	MetricHeldOldestAge = "turnstile.workflow.held.oldest_age"
)

// HeldConversation is a conversation held at a sequence gap, as Bridge.Held lists it: its
// workflow's Status.
type HeldConversation struct {
	WorkflowID string `json:"workflow_id"`
	Status
}

// heldQuery is the visibility list query of the candidates of Held: the conversation
// workflows of the bridge's task queue that run, only those with requests pending when the
// workflows keep their search attributes (Config.SearchAttributes).
func (b *Bridge) heldQuery() string {
	q := fmt.Sprintf("WorkflowType = '%s' AND ExecutionStatus = 'Running' AND TaskQueue = '%s'", WorkflowName, b.opts.TaskQueue)
	if b.opts.Config.SearchAttributes {
		q += fmt.Sprintf(" AND %s > 0", SearchPending.GetName())
	}
	return q
}

// Held lists the conversations held at a sequence gap, longest-held first. It finds the
// candidates in the namespace's visibility store (the running conversation workflows of the
// bridge's task queue; with Config.SearchAttributes on, only those whose TurnstilePending is
// above 0, so that the rest are not asked) and asks each one's QueryStatus, which says whether
// it is held, since when and which sequences it misses: the workflow is the owner of that
// state, visibility only narrows the search. Visibility lags the workflows by up to a second or
// so. A workflow that closes meanwhile, or does not answer, is left out. Errors: the list's and
// ctx's.
func (b *Bridge) Held(ctx context.Context) ([]HeldConversation, error) {
	var out []HeldConversation
	var token []byte
	for {
		resp, err := b.c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: b.heldQuery(), NextPageToken: token})
		if err != nil {
			return nil, fmt.Errorf("workflow: held: list: %w", err)
		}
		for _, e := range resp.Executions {
			id := e.GetExecution().GetWorkflowId()
			v, err := b.c.QueryWorkflow(ctx, id, "", QueryStatus)
			if err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				continue
			}
			var st Status
			if v.Get(&st) == nil && st.Held {
				out = append(out, HeldConversation{WorkflowID: id, Status: st})
			}
		}
		if token = resp.NextPageToken; len(token) == 0 {
			break
		}
	}
	slices.SortStableFunc(out, func(a, b HeldConversation) int { return a.HeldSince.Compare(b.HeldSince) })
	return out, nil
}

// Release releases the conversation's gap now: its workflow (the ReleaseUpdateName update)
// skips every missing sequence below its highest held one, reports each as a dead letter with
// the reason GapReason, applies the held requests in order, and answers what it skipped.
// reason goes into the gap dead letters' error header. A run continuing as new turns the update
// away and Release sends it again to the next run. Errors: a conversation that is not held
// (the update's validator), no workflow, ctx's, the client's.
func (b *Bridge) Release(ctx context.Context, conversationID, reason string) (Released, error) {
	delay := 20 * time.Millisecond
	for {
		handle, err := b.c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
			WorkflowID: b.WorkflowID(conversationID), UpdateName: ReleaseUpdateName, Args: []any{Release{Reason: reason}},
			WaitForStage: client.WorkflowUpdateStageCompleted,
		})
		var out Released
		if err == nil {
			err = handle.Get(ctx, &out)
		}
		var appErr *temporal.ApplicationError
		if !errors.As(err, &appErr) || appErr.Type() != errTypeContinuing {
			if err != nil {
				return Released{}, fmt.Errorf("workflow: release %s: %w", conversationID, err)
			}
			return out, nil
		}
		select {
		case <-ctx.Done():
			return Released{}, fmt.Errorf("workflow: release %s: %w (last: %w)", conversationID, ctx.Err(), err)
		case <-time.After(delay):
		}
		delay = min(2*delay, time.Second)
	}
}

// heldSnapshot is what the last Held of WatchHeld found.
type heldSnapshot struct {
	mu            sync.Mutex
	ok            bool
	requests      int64
	conversations int64
	oldest        time.Time
}

func (s *heldSnapshot) set(held []HeldConversation) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ok, s.requests, s.conversations, s.oldest = true, 0, int64(len(held)), time.Time{}
	for _, h := range held {
		s.requests += int64(h.Pending)
		if s.oldest.IsZero() || h.HeldSince.Before(s.oldest) {
			s.oldest = h.HeldSince
		}
	}
}

// WatchHeld lists the held conversations (Held) every interval until ctx ends and reports them
// as gauges through BridgeOptions.Telemetry's MeterProvider: MetricHeldRequests,
// MetricHeldConversations and MetricHeldOldestAge (the age measured when the gauges are read).
// The gauges report nothing until the first list has answered; a list that fails is logged
// and the gauges keep the last answer. Run it in one process per task queue (each run asks
// every held workflow). It returns ctx's error, or the meter's when the gauges cannot be made;
// without a MeterProvider it only logs the held conversations.
func (b *Bridge) WatchHeld(ctx context.Context, interval time.Duration) error {
	if interval <= 0 {
		return errors.New("workflow: WatchHeld: interval must be positive")
	}
	snap := &heldSnapshot{}
	if meter := b.opts.Telemetry.Meter(); meter != nil {
		reg, err := registerHeldGauges(meter, snap)
		if err != nil {
			return fmt.Errorf("workflow: WatchHeld: gauges: %w", err)
		}
		defer func() { _ = reg.Unregister() }()
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		held, err := b.Held(ctx)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			b.opts.Logger.Warn("listing held conversations failed", "err", err)
		default:
			snap.set(held)
			for _, h := range held {
				b.opts.Logger.Warn("conversation held at a sequence gap", "conversation_id", h.ConversationID, "workflow_id", h.WorkflowID,
					"missing", h.Missing, "missing_count", h.MissingCount, "pending", h.Pending, "held_since", h.HeldSince)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// registerHeldGauges makes the held gauges, observed from snap.
func registerHeldGauges(meter metric.Meter, snap *heldSnapshot) (metric.Registration, error) {
	requests, err := meter.Int64ObservableGauge(MetricHeldRequests, metric.WithUnit("{request}"),
		metric.WithDescription("Requests held in conversation workflows behind a missing sequence."))
	if err != nil {
		return nil, err
	}
	convs, err := meter.Int64ObservableGauge(MetricHeldConversations, metric.WithUnit("{conversation}"),
		metric.WithDescription("Conversations held at a sequence gap."))
	if err != nil {
		return nil, err
	}
	age, err := meter.Float64ObservableGauge(MetricHeldOldestAge, metric.WithUnit("s"),
		metric.WithDescription("How long the longest-held conversation has been held at a sequence gap."))
	if err != nil {
		return nil, err
	}
	return meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		snap.mu.Lock()
		defer snap.mu.Unlock()
		if !snap.ok {
			return nil
		}
		o.ObserveInt64(requests, snap.requests)
		o.ObserveInt64(convs, snap.conversations)
		var secs float64
		if !snap.oldest.IsZero() {
			secs = max(time.Since(snap.oldest).Seconds(), 0)
		}
		o.ObserveFloat64(age, secs)
		return nil
	}, requests, convs, age)
}
