package workflow

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
)

// statusValue is a QueryWorkflow answer carrying a Status.
type statusValue struct{ st Status }

func (v statusValue) HasValue() bool { return true }

func (v statusValue) Get(ptr any) error {
	data, err := json.Marshal(v.st)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, ptr)
}

// heldClient is a client.Client whose visibility lists ids, whose task queue has pollers
// workflow pollers, and whose workflows answer their status query as answer says ("held",
// "idle", "gone": closed meanwhile; anything else: no answer until the query's context ends).
type heldClient struct {
	client.Client
	ids     []string
	pollers int
	answer  map[string]string
	queries atomic.Int32
}

func (c *heldClient) DescribeTaskQueue(context.Context, string, enumspb.TaskQueueType) (*workflowservice.DescribeTaskQueueResponse, error) {
	return &workflowservice.DescribeTaskQueueResponse{Pollers: make([]*taskqueuepb.PollerInfo, c.pollers)}, nil
}

func (c *heldClient) ListWorkflow(context.Context, *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	resp := &workflowservice.ListWorkflowExecutionsResponse{}
	for _, id := range c.ids {
		resp.Executions = append(resp.Executions, &workflowpb.WorkflowExecutionInfo{Execution: &commonpb.WorkflowExecution{WorkflowId: id}})
	}
	return resp, nil
}

func (c *heldClient) QueryWorkflow(ctx context.Context, id, _, _ string, _ ...any) (converter.EncodedValue, error) {
	c.queries.Add(1)
	switch c.answer[id] {
	case "held":
		return statusValue{Status{ConversationID: id, Held: true, Missing: []int64{2}, HeldSince: time.Now()}}, nil
	case "idle":
		return statusValue{Status{ConversationID: id}}, nil
	case "gone":
		return nil, serviceerror.NewNotFound("workflow closed")
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// HeldReport names the workflows that did not answer (Held left them out, and an operator
// read "0 held"), each query bounded by QueryTimeout, and asks none when no worker polls the
// task queue; a workflow that closed meanwhile is left out.
func TestHeldReportNamesUnanswered(t *testing.T) {
	t.Parallel()
	c := &heldClient{ids: []string{"w-held", "w-idle", "w-gone", "w-mute-1", "w-mute-2"}, pollers: 1,
		answer: map[string]string{"w-held": "held", "w-idle": "idle", "w-gone": "gone"}}
	b, err := NewBridge(c, BridgeOptions{TaskQueue: "q"})
	require.NoError(t, err)
	rep, err := b.HeldReport(context.Background(), HeldOptions{QueryTimeout: 50 * time.Millisecond})
	require.NoError(t, err)
	require.Equal(t, 5, rep.Asked)
	require.Equal(t, 1, rep.Pollers)
	require.Len(t, rep.Held, 1)
	require.Equal(t, "w-held", rep.Held[0].WorkflowID)
	require.Len(t, rep.Unanswered, 2)
	require.Equal(t, "w-mute-1", rep.Unanswered[0].WorkflowID)
	require.Equal(t, "w-mute-2", rep.Unanswered[1].WorkflowID)
	require.Contains(t, rep.Unanswered[0].Error, "no answer within 50ms")
	held, err := b.Held(context.Background())
	require.NoError(t, err)
	require.Len(t, held, 1, "Held is HeldReport's Held")

	c.pollers = 0
	c.queries.Store(0)
	rep, err = b.HeldReport(context.Background(), HeldOptions{})
	require.NoError(t, err)
	require.Zero(t, c.queries.Load(), "no worker: nobody is asked")
	require.Len(t, rep.Unanswered, 5)
	require.Contains(t, rep.Unanswered[0].Error, `no worker polls task queue "q"`)
	require.Empty(t, rep.Held)
}
