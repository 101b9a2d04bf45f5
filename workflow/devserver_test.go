package workflow

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turntest"
)

// The acceptance line: 500 sequenced requests of one conversation through the consumer and the
// bridge, with continue-as-new every 100 turns while the producer keeps sending (signals
// arrive at the continue-as-new moments): all applied once, in order, across runs; the session
// holds 500 turns; one result per request.
func TestDevServerFiveHundredSequencedAcrossRuns(t *testing.T) {
	t.Parallel()
	s := newStack(t, 4)
	s.startWorker(nil)
	b := s.bridge(BridgeOptions{Config: Config{MaxTurnsPerRun: 100, IdleTimeout: time.Minute}})
	s.startMember(b, nil)

	const n = 500
	conv := s.cluster.Unique("conv")
	ids := make([]string, 0, n)
	var sent []turn.Request
	for seq := int64(1); seq <= n; seq++ {
		req := request(conv, seq, fmt.Sprintf("message %d", seq))
		ids = append(ids, req.ID)
		sent = append(sent, req)
		s.produce(req, nil)
		if seq%20 == 0 {
			// Let turns run between bursts, so that signals keep arriving while runs
			// continue as new, not all before the first one does.
			s.waitApplied(b, conv, seq-30)
		}
	}
	st := s.waitApplied(b, conv, n)
	require.Equal(t, int64(n), st.LastAppliedSequence)
	require.Zero(t, st.Pending)

	seqs := s.model.sequences()
	require.Len(t, seqs, n, "the model ran once per request")
	for i, seq := range seqs {
		require.Equal(t, int64(i+1), seq, "turn %d applied in sequence order", i)
	}
	sess := s.sessionOf("u-1", conv)
	require.Equal(t, int64(n), sess.Version, "the session holds 500 turns")
	full, err := s.sessions.Get(context.Background(), sess.Key, int(sess.EventCount))
	require.NoError(t, err)
	checkpoints := 0
	for _, e := range full.Events {
		if e.Author == session.AuthorCheckpoint {
			checkpoints++
		}
	}
	require.Positive(t, checkpoints, "a conversation of 500 turns compacts")
	require.Equal(t, int64(2*n+checkpoints), sess.EventCount, "user message and answer per turn, and the checkpoints")

	results := s.cluster.ReadAll(t, s.results, n, wait)
	got := map[string]int{}
	for _, m := range results {
		got[turntest.HeaderMap(m)[consumer.HeaderRequestID]]++
	}
	require.Len(t, got, n)
	for _, id := range ids {
		require.Equal(t, 1, got[id], "one result for request %s", id)
	}
	require.Equal(t, int64(n), s.cluster.RecordCount(t, s.results), "no extra result record")
	requireEveryRequestAnswered(t, s.answered(), sent...)
	s.committedAll(4)

	runs := s.runsOf(b.WorkflowID(conv))
	require.GreaterOrEqual(t, runs, 5, "500 turns at 100 per run take at least 5 runs")
	carried := 0
	for _, st := range s.continuedStates(b.WorkflowID(conv)) {
		if len(st.Pending) > 0 || st.Overflow > 0 {
			carried++
		}
	}
	require.Positive(t, carried, "requests arrived while runs continued as new and were carried into the next run")
}

// continuedStates returns the State each continued-as-new run of a workflow id handed on.
func (s *stack) continuedStates(workflowID string) []State {
	s.t.Helper()
	ctx := context.Background()
	resp, err := s.client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
		Query: fmt.Sprintf("WorkflowId = '%s' AND ExecutionStatus = 'ContinuedAsNew'", workflowID),
	})
	require.NoError(s.t, err)
	var out []State
	for _, e := range resp.Executions {
		it := s.client.GetWorkflowHistory(ctx, workflowID, e.Execution.RunId, false, enums.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT)
		for it.HasNext() {
			ev, err := it.Next()
			require.NoError(s.t, err)
			if attrs := ev.GetWorkflowExecutionContinuedAsNewEventAttributes(); attrs != nil {
				var st State
				require.NoError(s.t, converter.GetDefaultDataConverter().FromPayloads(attrs.Input, &st))
				out = append(out, st)
			}
		}
	}
	return out
}

// runsOf counts the runs of a workflow id (the visibility store catches up eventually).
func (s *stack) runsOf(workflowID string) int {
	s.t.Helper()
	var runs int
	require.Eventually(s.t, func() bool {
		resp, err := s.client.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
			Query: fmt.Sprintf("WorkflowId = '%s'", workflowID),
		})
		if err != nil {
			return false
		}
		runs = len(resp.Executions)
		continued := 0
		for _, e := range resp.Executions {
			if e.Status == enums.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW {
				continued++
			}
		}
		return continued > 0 && continued == runs-1
	}, wait, 100*time.Millisecond)
	return runs
}

// The acceptance line: 1,000 records over 100 conversations through two consumer members and
// two workers: each applied once; the group's committed offsets reach the end offsets; the
// traceparent header the producer set is in the model's input.
func TestDevServerThousandRecordsTwoMembers(t *testing.T) {
	t.Parallel()
	s := newStack(t, 6)
	s.startWorker(nil)
	s.startWorker(nil)
	b := s.bridge(BridgeOptions{Tap: nil})
	tap1, tap2 := NewHeaderTap(0), NewHeaderTap(0)
	b1 := s.bridge(BridgeOptions{Tap: tap1})
	b2 := s.bridge(BridgeOptions{Tap: tap2})
	s.startMember(b1, tap1)
	s.startMember(b2, tap2)

	const convs, per = 100, 10
	trace := map[string]string{}
	var all []string
	var sent []turn.Request
	for i := 0; i < per; i++ {
		for c := 0; c < convs; c++ {
			conv := fmt.Sprintf("%s-c%03d", s.taskQueue, c)
			req := request(conv, int64(i+1), fmt.Sprintf("message %d", i+1))
			tp := fmt.Sprintf("00-%032x-%016x-01", c*1000+i+1, i+1)
			trace[req.ID] = tp
			all = append(all, req.ID)
			sent = append(sent, req)
			s.produce(req, map[string]string{"traceparent": tp, "tenant": "acme"})
		}
	}
	for c := 0; c < convs; c++ {
		s.waitApplied(b, fmt.Sprintf("%s-c%03d", s.taskQueue, c), per)
	}
	s.committedAll(6)

	calls := callsOf(s.model, func(in turn.Input) turn.Input { return in })
	seen := map[string]int{}
	for _, in := range calls {
		seen[in.Request.ID]++
		require.Equal(t, trace[in.Request.ID], in.Request.Metadata["traceparent"], "traceparent of %s reaches the model", in.Request.ID)
		require.Equal(t, "acme", in.Request.Metadata["tenant"])
	}
	require.Len(t, seen, convs*per)
	for _, id := range all {
		require.Equal(t, 1, seen[id], "request %s applied once", id)
	}
	requireEveryRequestAnswered(t, s.answered(), sent...)
}

// The acceptance line: 20 turns with a 300 KB context each (the model adds 300 KB to the
// session every turn): every run's history stays under 5 MB, since activity payloads carry
// ids, not the transcript.
func TestDevServerLargeContextSmallHistory(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	big := strings.Repeat("context ", 300<<10/8)
	var mu sync.Mutex
	var contextSeen []int
	s.startWorker(func(o *WorkerOptions) {
		// Room in the model's input for the whole context (about 1.5 million tokens by the
		// Runner's estimate), so that no compaction folds it: the history stays small however
		// much the model sees.
		o.Runner.ContextBudget = 4 << 20
		o.Runner.Model = turn.ModelFunc(func(_ context.Context, in turn.Input) (turn.Output, error) {
			size := 0
			for _, e := range in.Session.Events {
				size += len(e.Text)
			}
			mu.Lock()
			contextSeen = append(contextSeen, size)
			mu.Unlock()
			return turn.Output{Events: []session.Event{{Text: big}}}, nil
		})
	})
	b := s.bridge(BridgeOptions{})
	conv := s.cluster.Unique("big")
	var sent []turn.Request
	for seq := int64(1); seq <= 20; seq++ {
		req := request(conv, seq, "more")
		sent = append(sent, req)
		_, err := b.Handle(context.Background(), req)
		require.NoError(t, err)
	}
	s.waitApplied(b, conv, 20)
	requireEveryRequestAnswered(t, s.answered(), sent...)
	mu.Lock()
	require.Len(t, contextSeen, 20)
	require.GreaterOrEqual(t, contextSeen[19], 19*len(big), "the model saw the whole context from the session store")
	mu.Unlock()

	desc, err := s.client.DescribeWorkflow(context.Background(), b.WorkflowID(conv), "")
	require.NoError(t, err)
	size := desc.RawResponse.GetWorkflowExecutionInfo().GetHistorySizeBytes()
	t.Logf("history of 20 turns over %d MB of context: %d bytes", 20*len(big)>>20, size)
	require.Less(t, size, int64(5<<20))
	require.Less(t, size, int64(len(big)), "not even one context's worth of bytes in the history")
}

// The acceptance line: a list query by user id finds that user's conversations, and one by
// pending count finds the conversation held at a gap.
func TestDevServerSearchAttributes(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	s.startWorker(nil)
	b := s.bridge(BridgeOptions{Config: Config{SearchAttributes: true}})
	user := s.cluster.Unique("user")
	ok, held := s.cluster.Unique("ok"), s.cluster.Unique("held")
	sent := []turn.Request{request(ok, 1, "a"), request(ok, 2, "b"), request(held, 1, "a"), request(held, 3, "c")}
	for i := range sent {
		sent[i].UserID = user
		_, err := b.Handle(context.Background(), sent[i])
		require.NoError(t, err)
	}
	s.waitApplied(b, ok, 2)
	st := s.waitApplied(b, held, 1)
	require.Equal(t, []int64{3}, st.PendingSequences, "3 waits at the gap, neither applied nor dropped")
	requireEveryRequestAnswered(t, s.answered(), sent[:3]...)

	list := func(q string) []string {
		resp, err := s.client.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{Query: q})
		require.NoError(t, err)
		var ids []string
		for _, e := range resp.Executions {
			ids = append(ids, e.Execution.WorkflowId)
		}
		return ids
	}
	require.Eventually(t, func() bool {
		return len(list(fmt.Sprintf("TurnstileUser = '%s'", user))) == 2
	}, wait, 100*time.Millisecond, "both conversations of the user")
	require.Eventually(t, func() bool {
		ids := list(fmt.Sprintf("TurnstileUser = '%s' AND TurnstilePending > 0", user))
		return len(ids) == 1 && ids[0] == b.WorkflowID(held)
	}, wait, 100*time.Millisecond, "the conversation held at the gap")
	require.Eventually(t, func() bool {
		ids := list(fmt.Sprintf("TurnstileConversation = '%s' AND TurnstileLastAppliedSequence = 2", ok))
		return len(ids) == 1
	}, wait, 100*time.Millisecond)
}

// An idle conversation's run ends after the idle timeout, and the next request starts a new
// run that continues from the saved sequence mark.
func TestDevServerIdleEndAndNewRun(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	s.startWorker(nil)
	b := s.bridge(BridgeOptions{Config: Config{IdleTimeout: time.Second}})
	conv := s.cluster.Unique("idle")
	ctx := context.Background()
	var sent []turn.Request
	for seq := int64(1); seq <= 2; seq++ {
		req := request(conv, seq, "before the pause")
		sent = append(sent, req)
		_, err := b.Handle(ctx, req)
		require.NoError(t, err)
	}
	s.waitApplied(b, conv, 2)
	require.Eventually(t, func() bool {
		desc, err := s.client.DescribeWorkflow(ctx, b.WorkflowID(conv), "")
		return err == nil && desc.RawResponse.GetWorkflowExecutionInfo().GetStatus() == enums.WORKFLOW_EXECUTION_STATUS_COMPLETED
	}, wait, 50*time.Millisecond, "the idle run ends")
	third := request(conv, 3, "after the pause")
	_, err := b.Handle(ctx, third)
	require.NoError(t, err)
	st := s.waitApplied(b, conv, 3)
	require.Equal(t, int64(3), st.LastAppliedSequence, "the new run continued from the saved mark")
	require.Equal(t, []int64{1, 2, 3}, s.model.sequences())
	requireEveryRequestAnswered(t, s.answered(), append(sent, third)...)
}
