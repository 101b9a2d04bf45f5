package workflow

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	tworker "go.temporal.io/sdk/worker"
	twf "go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/turnstile-go/turnstile/turn"
)

// envRecordHistories, set to a directory, makes TestDevServerRecordHistories write the
// histories the replay test replays (workflow/testdata). Record them again only for a change
// that is meant to be incompatible, and say so in the commit.
const envRecordHistories = "TURNSTILE_RECORD_HISTORIES"

// recordVersion names the histories recorded by this code: v0 before the StateStore
// (workflow.GetVersion changes turnstile-load-state and turnstile-idle-save), v1 with it, v2
// with the State loaded by a local activity (turnstile-load-state-local). Keep the older
// files: the workflow must replay them all.
const recordVersion = "v2"

// replayer returns a replayer with the conversation workflow registered; beforeTurn, when not
// nil, modifies the workflow.
func replayer(beforeTurn func(twf.Context)) tworker.WorkflowReplayer {
	r := tworker.NewWorkflowReplayer()
	states := &MemoryLedger{}
	a := &worker{opts: WorkerOptions{Runner: &turn.Runner{}, States: states}, overflow: states, beforeTurn: beforeTurn}
	r.RegisterWorkflowWithOptions(a.Conversation, twf.RegisterOptions{Name: WorkflowName})
	return r
}

func recordedHistories(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "history_*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "recorded histories in workflow/testdata")
	return files
}

// The versioning habit: every recorded history replays on the current workflow code. A change
// to the workflow's command sequence without workflow.GetVersion fails here, in CI.
func TestReplayRecordedHistories(t *testing.T) {
	t.Parallel()
	for _, f := range recordedHistories(t) {
		require.NoError(t, replayer(nil).ReplayWorkflowHistoryFromJSONFile(tlog.NewStructuredLogger(discardLogger()), f), f)
	}
}

// Shown once: the same histories replayed on a workflow whose command sequence changed (a
// timer before each turn, without GetVersion) fail with the non-determinism error.
func TestReplayDetectsNonDeterminism(t *testing.T) {
	t.Parallel()
	modified := func(ctx twf.Context) { _ = twf.Sleep(ctx, time.Millisecond) }
	for _, f := range recordedHistories(t) {
		err := replayer(modified).ReplayWorkflowHistoryFromJSONFile(tlog.NewStructuredLogger(discardLogger()), f)
		require.Error(t, err, f)
		require.ErrorContains(t, err, "TMPRL1100", f) // the SDK's code for a non-deterministic replay
	}
}

// TestDevServerRecordHistories records the testdata histories when envRecordHistories names a
// directory: a conversation with a duplicate, a gap filled later, a submit update, search
// attributes, a continue-as-new and an idle end.
func TestDevServerRecordHistories(t *testing.T) {
	dir := recordDir(t)
	s := newStack(t, 1)
	s.startWorker(nil)
	b := s.bridge(BridgeOptions{Config: Config{SearchAttributes: true, MaxTurnsPerRun: 3, IdleTimeout: 2 * time.Second}})
	conv := s.cluster.Unique("rec")
	ctx := context.Background()
	r1, r2, r3, r4, r5 := request(conv, 1, "one"), request(conv, 2, "two"), request(conv, 3, "three"), request(conv, 4, "four"), request(conv, 5, "five")
	for _, r := range []turn.Request{r2, r1, r1, r3} {
		_, err := b.Handle(ctx, r)
		require.NoError(t, err)
	}
	_, err := b.Submit(ctx, r4)
	require.NoError(t, err)
	id := b.WorkflowID(conv)
	s.waitRuns(id, "ContinuedAsNew", 1, "the first run continued as new")
	_, err = b.Handle(ctx, r5) // a turn of the second run
	require.NoError(t, err)
	s.waitRuns(id, "Completed", 1, "the last run ends idle")
	resp, err := s.client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: fmt.Sprintf("WorkflowId = '%s'", id)})
	require.NoError(t, err)
	require.Len(t, resp.Executions, 2)
	requireEveryRequestAnswered(t, s.answered(), r1, r2, r3, r4, r5)
	for _, e := range resp.Executions {
		name := "history_" + recordVersion + "_completed.json"
		if e.Status == enums.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW {
			name = "history_" + recordVersion + "_continued.json"
		}
		writeHistory(t, s.client, id, e.Execution.RunId, filepath.Join(dir, name))
	}
}

// recordDir returns the directory envRecordHistories names, or skips the test.
func recordDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv(envRecordHistories)
	if dir == "" {
		t.Skipf("set %s to a directory to record the replay test's histories", envRecordHistories)
	}
	return dir
}

// waitRuns waits until the visibility store lists n runs of workflowID with status.
func (s *stack) waitRuns(workflowID, status string, n int, why string) {
	s.t.Helper()
	require.Eventually(s.t, func() bool {
		resp, err := s.client.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
			Query: fmt.Sprintf("WorkflowId = '%s' AND ExecutionStatus = '%s'", workflowID, status)})
		return err == nil && len(resp.Executions) == n
	}, wait, 100*time.Millisecond, why)
}

func writeHistory(t *testing.T, c client.Client, id, runID, path string) {
	t.Helper()
	it := c.GetWorkflowHistory(context.Background(), id, runID, false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var h historypb.History
	for it.HasNext() {
		e, err := it.Next()
		require.NoError(t, err)
		h.Events = append(h.Events, e)
	}
	data, err := protojson.MarshalOptions{Indent: "  "}.Marshal(&h)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, data, 0o644))
}

// overflowRecordName names the histories TestDevServerRecordOverflowHistories writes:
// history_overflow_N.json were recorded before versionCarryReferences (the runs carried the
// oldest pending requests within Config.MaxCarriedBytes), history_carry_refs_N.json with it
// (every pending request crosses continue-as-new through the OverflowStore). Keep both.
const overflowRecordName = "history_carry_refs_%d.json"

// TestDevServerRecordOverflowHistories records, when envRecordHistories names a directory, the
// histories of a backlog that crosses continue-as-new through the OverflowStore: a run that
// stores the pending requests at continue-as-new, runs that load them back and store what came
// in meanwhile (a redelivery among it), and the last run, which ends idle (overflowRecordName,
// one per run in order).
func TestDevServerRecordOverflowHistories(t *testing.T) {
	dir := recordDir(t)
	s := newStack(t, 1)
	s.startWorker(nil)
	b := s.bridge(BridgeOptions{Config: Config{MaxTurnsPerRun: 4, MaxCarriedBytes: 1500, IdleTimeout: 2 * time.Second}})
	conv := s.cluster.Unique("rec-overflow")
	ctx := context.Background()
	var first, later []turn.Request
	for seq := int64(1); seq <= 14; seq++ {
		first = append(first, request(conv, seq, fmt.Sprintf("m%d", seq)))
	}
	require.NoError(t, b.HandOff(ctx, first))
	s.waitApplied(b, conv, 2)
	for seq := int64(15); seq <= 18; seq++ {
		later = append(later, request(conv, seq, fmt.Sprintf("m%d", seq)))
	}
	require.NoError(t, b.HandOff(ctx, later))
	s.waitApplied(b, conv, 5)
	require.NoError(t, b.HandOff(ctx, first[13:])) // a redelivery of a request waiting in the store
	s.waitApplied(b, conv, 18)
	require.Equal(t, int64(18), int64(len(s.model.sequences())))
	id := b.WorkflowID(conv)
	s.waitRuns(id, "Completed", 1, "the last run ends idle")
	resp, err := s.client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: fmt.Sprintf("WorkflowId = '%s'", id)})
	require.NoError(t, err)
	overflowed := false
	for _, in := range s.continuedInputs(id) {
		overflowed = overflowed || in.state.Overflow > 0
	}
	require.True(t, overflowed, "a run stored overflow")
	for i, e := range resp.Executions {
		n := len(resp.Executions) - i // the list is newest first
		writeHistory(t, s.client, id, e.Execution.RunId, filepath.Join(dir, fmt.Sprintf(overflowRecordName, n)))
	}
}
