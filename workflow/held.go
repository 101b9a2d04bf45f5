package workflow

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
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

// Held lists the conversations held at a sequence gap, longest-held first: HeldReport's Held,
// with its default HeldOptions. A workflow that does not answer its status query is left out
// (HeldReport says which did not). Errors: HeldReport's.
func (b *Bridge) Held(ctx context.Context) ([]HeldConversation, error) {
	r, err := b.HeldReport(ctx, HeldOptions{})
	return r.Held, err
}

// Defaults of HeldOptions.
const (
	DefaultHeldQueryTimeout = 5 * time.Second
	DefaultHeldConcurrency  = 8
)

// HeldOptions tune HeldReport.
type HeldOptions struct {
	// QueryTimeout bounds each workflow's status query; default DefaultHeldQueryTimeout. A
	// workflow whose worker is down does not answer: its query waits this long.
	QueryTimeout time.Duration
	// Concurrency is how many workflows are asked at once; default DefaultHeldConcurrency.
	Concurrency int
}

// HeldReport is what Bridge.HeldReport found.
type HeldReport struct {
	// Held are the held conversations, longest-held first.
	Held []HeldConversation `json:"held"`
	// Asked is how many running conversation workflows visibility listed (the candidates).
	Asked int `json:"asked"`
	// Unanswered are the candidates whose status query failed (no worker polls the task queue,
	// a worker that is down or too slow): whether they are held is not known. In WorkflowID
	// order.
	Unanswered []Unanswered `json:"unanswered,omitempty"`
	// Pollers is how many workflow pollers (workers) the task queue has seen lately
	// (DescribeTaskQueue), -1 when the description failed (the workflows are asked then); a
	// task queue nobody polls and no workflow runs on is likely mistyped (Bridge.TaskQueueUse,
	// Bridge.TaskQueues).
	Pollers int `json:"pollers"`
}

// Unanswered is a workflow that did not answer Held's status query, and the query's error.
type Unanswered struct {
	WorkflowID string `json:"workflow_id"`
	Error      string `json:"error"`
}

// HeldReport lists the conversations held at a sequence gap. It finds the candidates in the
// namespace's visibility store (the running conversation workflows of the bridge's task queue;
// with Config.SearchAttributes on, only those whose TurnstilePending is above 0, so that the
// rest are not asked) and asks each one's QueryStatus, each bounded by opts.QueryTimeout,
// opts.Concurrency at once, which says whether it is held, since when and which sequences it
// misses: the workflow is the owner of that state, visibility only narrows the search.
// Visibility lags the workflows by up to a second or so. A workflow that closed meanwhile is
// left out; one that does not answer is in Unanswered. With no poller on the task queue the
// candidates are not asked (nothing would answer): each is Unanswered. Errors: the list's and
// ctx's.
func (b *Bridge) HeldReport(ctx context.Context, opts HeldOptions) (HeldReport, error) {
	if opts.QueryTimeout <= 0 {
		opts.QueryTimeout = DefaultHeldQueryTimeout
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = DefaultHeldConcurrency
	}
	var rep HeldReport
	rep.Pollers = -1
	if desc, err := b.c.DescribeTaskQueue(ctx, b.opts.TaskQueue, enumspb.TASK_QUEUE_TYPE_WORKFLOW); err == nil {
		rep.Pollers = len(desc.GetPollers())
	} else if ctx.Err() != nil {
		return HeldReport{}, ctx.Err()
	}
	var ids []string
	var token []byte
	for {
		resp, err := b.c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: b.heldQuery(), NextPageToken: token})
		if err != nil {
			return HeldReport{}, fmt.Errorf("workflow: held: list: %w", err)
		}
		for _, e := range resp.Executions {
			ids = append(ids, e.GetExecution().GetWorkflowId())
		}
		if token = resp.NextPageToken; len(token) == 0 {
			break
		}
	}
	rep.Asked = len(ids)
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, opts.Concurrency)
	for _, id := range ids {
		if rep.Pollers == 0 {
			rep.Unanswered = append(rep.Unanswered, Unanswered{WorkflowID: id,
				Error: fmt.Sprintf("no worker polls task queue %q", b.opts.TaskQueue)})
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			st, err := b.queryStatus(ctx, id, opts.QueryTimeout)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.As(err, new(*serviceerror.NotFound)):
				// closed meanwhile
			case err != nil:
				rep.Unanswered = append(rep.Unanswered, Unanswered{WorkflowID: id, Error: err.Error()})
			case st.Held:
				rep.Held = append(rep.Held, HeldConversation{WorkflowID: id, Status: st})
			}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return HeldReport{}, ctx.Err()
	}
	slices.SortStableFunc(rep.Held, func(a, b HeldConversation) int { return a.HeldSince.Compare(b.HeldSince) })
	slices.SortFunc(rep.Unanswered, func(a, b Unanswered) int { return strings.Compare(a.WorkflowID, b.WorkflowID) })
	return rep, nil
}

// queryStatus asks workflow id its QueryStatus, waiting at most timeout.
func (b *Bridge) queryStatus(ctx context.Context, id string, timeout time.Duration) (Status, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	v, err := b.c.QueryWorkflow(ctx, id, "", QueryStatus)
	if err != nil {
		if ctx.Err() != nil {
			return Status{}, fmt.Errorf("no answer within %s (is a worker running?): %w", timeout, err)
		}
		return Status{}, err
	}
	var st Status
	if err := v.Get(&st); err != nil {
		return Status{}, fmt.Errorf("status does not decode: %w", err)
	}
	return st, nil
}

// TaskQueueUse says whether the bridge's task queue is in use: how many workflow pollers
// (workers) it has seen lately (DescribeTaskQueue) and how many conversation workflows run on
// it (visibility's count). Both 0: a task queue nobody uses, likely mistyped (TaskQueues
// lists those in use). Errors: the client's and ctx's.
func (b *Bridge) TaskQueueUse(ctx context.Context) (pollers int, running int64, err error) {
	desc, err := b.c.DescribeTaskQueue(ctx, b.opts.TaskQueue, enumspb.TASK_QUEUE_TYPE_WORKFLOW)
	if err != nil {
		return 0, 0, fmt.Errorf("workflow: describe task queue %q: %w", b.opts.TaskQueue, err)
	}
	q := fmt.Sprintf("WorkflowType = '%s' AND ExecutionStatus = 'Running' AND TaskQueue = '%s'", WorkflowName, b.opts.TaskQueue)
	count, err := b.c.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: q})
	if err != nil {
		return 0, 0, fmt.Errorf("workflow: count the workflows of task queue %q: %w", b.opts.TaskQueue, err)
	}
	return len(desc.GetPollers()), count.GetCount(), nil
}

// TaskQueues returns the task queues of the running conversation workflows (WorkflowName) of
// the namespace, from visibility, sorted, at most limit of them (listing stops there; limit < 1
// means 100): for an operator who mistyped one. Errors: the list's and ctx's.
func (b *Bridge) TaskQueues(ctx context.Context, limit int) ([]string, error) {
	if limit < 1 {
		limit = 100
	}
	seen := map[string]bool{}
	var token []byte
	q := fmt.Sprintf("WorkflowType = '%s' AND ExecutionStatus = 'Running'", WorkflowName)
	for len(seen) < limit {
		resp, err := b.c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: q, NextPageToken: token})
		if err != nil {
			return nil, fmt.Errorf("workflow: task queues: list: %w", err)
		}
		for _, e := range resp.Executions {
			if tq := e.GetTaskQueue(); tq != "" && len(seen) < limit {
				seen[tq] = true
			}
		}
		if token = resp.NextPageToken; len(token) == 0 {
			break
		}
	}
	return slices.Sorted(maps.Keys(seen)), nil
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
		rep, err := b.HeldReport(ctx, HeldOptions{})
		held := rep.Held
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			b.opts.Logger.Warn("listing held conversations failed", "err", err)
		default:
			snap.set(held)
			if len(rep.Unanswered) > 0 {
				b.opts.Logger.Warn("conversation workflows did not answer their status query: whether they are held is not known",
					"unanswered", len(rep.Unanswered), "of", rep.Asked, "first_workflow_id", rep.Unanswered[0].WorkflowID,
					"err", rep.Unanswered[0].Error)
			}
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
