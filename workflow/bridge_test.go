package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/turnstile-go/turnstile/attachment"
	"github.com/turnstile-go/turnstile/turn"
)

// Temporal's errors map to the kinds that steer the consumer: transient ones spend no attempt
// and are never dead-lettered, what Temporal can never accept is permanent, and a context the
// consumer ended is abandonment.
func TestClassifyTemporal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, tc := range map[string]struct {
		err  error
		want turn.Kind
	}{
		"unavailable":        {serviceerror.NewUnavailable("frontend down"), turn.KindUnavailable},
		"resource exhausted": {serviceerror.NewResourceExhausted(0, "rps limit"), turn.KindUnavailable},
		"deadline exceeded":  {serviceerror.NewDeadlineExceeded("slow"), turn.KindUnavailable},
		"closing run":        {serviceerror.NewFailedPrecondition("workflow is closing"), turn.KindUnavailable},
		"signal limit":       {serviceerror.NewInvalidArgument("exceeded workflow execution limit for signal events"), turn.KindUnavailable}, // the dev server's words
		"too large":          {serviceerror.NewInvalidArgument("Blob data size exceeds limit."), turn.KindPermanent},
		"invalid id":         {serviceerror.NewInvalidArgument("WorkflowId is too long"), turn.KindPermanent},
		"client timeout":     {context.DeadlineExceeded, turn.KindUnavailable},
	} {
		require.Equal(t, tc.want, turn.Classify(classifyTemporal(ctx, tc.err)), name)
	}
	ended, cancel := context.WithCancel(ctx)
	cancel()
	require.Equal(t, turn.KindAbandoned, turn.Classify(classifyTemporal(ended, errors.New("canceled"))))
}

// A request too large for a signal is permanent (the consumer dead-letters it) and never
// reaches the server.
func TestHandleTooLargeIsPermanent(t *testing.T) {
	t.Parallel()
	c, err := client.NewLazyClient(client.Options{HostPort: "127.0.0.1:1"})
	require.NoError(t, err)
	defer c.Close()
	b, err := NewBridge(c, BridgeOptions{TaskQueue: "q", MaxPayloadBytes: 64 << 10})
	require.NoError(t, err)
	_, err = b.Handle(context.Background(), request("c-big", 1, strings.Repeat("x", 100<<10)))
	require.Equal(t, turn.KindPermanent, turn.Classify(err))
	require.ErrorContains(t, err, "over the limit")
	_, err = NewBridge(c, BridgeOptions{})
	require.ErrorContains(t, err, "TaskQueue")
}

// NewBridge refuses a configuration whose continue-as-new input could pass the server's
// payload limit: a carried bound over MaxCarriedBytesLimit, a dedup window over
// MaxDedupWindow (its ids travel in every input).
func TestNewBridgeBoundsTheCarriedState(t *testing.T) {
	t.Parallel()
	c, err := client.NewLazyClient(client.Options{HostPort: "127.0.0.1:1"})
	require.NoError(t, err)
	defer c.Close()
	_, err = NewBridge(c, BridgeOptions{TaskQueue: "q", Config: Config{DedupWindow: MaxDedupWindow}})
	require.NoError(t, err)
	_, err = NewBridge(c, BridgeOptions{TaskQueue: "q", Config: Config{DedupWindow: MaxDedupWindow + 1}})
	require.ErrorContains(t, err, "DedupWindow")
	_, err = NewBridge(c, BridgeOptions{TaskQueue: "q", Config: Config{MaxCarriedBytes: MaxCarriedBytesLimit + 1}})
	require.ErrorContains(t, err, "MaxCarriedBytes")
	st := State{ConversationID: strings.Repeat("c", turn.MaxIDBytes), UserID: strings.Repeat("u", turn.MaxIDBytes), Config: Config{DedupWindow: MaxDedupWindow}.withDefaults()}
	for range MaxDedupWindow {
		st.Recent = append(st.Recent, request("c", 0, "").ID)
	}
	for s := range int64(maxSkippedKept) {
		st.Skipped = append(st.Skipped, 1<<62+s)
	}
	require.Less(t, len(mustJSON(t, st)), 160<<10, "the largest carried State without pending requests")
}

// The size a hand-off is checked at counts the attachment references a request carries: at
// least their encoded bytes.
func TestPayloadSizeCountsAttachments(t *testing.T) {
	t.Parallel()
	base := Envelope{Request: request("c-refs", 1, "see the log")}
	refs := base
	for i := range turn.MaxAttachments {
		content := []byte(strings.Repeat("x", i+1))
		refs.Request.Attachments = append(refs.Request.Attachments,
			attachment.Ref{ID: attachment.IDOf(content), Size: int64(len(content)), Name: "part.log", MediaType: "text/plain"})
	}
	require.GreaterOrEqual(t, payloadSize([]Envelope{refs})-payloadSize([]Envelope{base}), len(mustJSON(t, refs))-len(mustJSON(t, base)))
}

// mustJSON returns v encoded.
func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	require.NoError(t, err)
	return data
}

// signalRecorder is a client.Client that records the SignalWithStartWorkflow calls it gets,
// for the bridge's unit tests; its other methods are the nil embedded client's (they panic).
type signalRecorder struct {
	client.Client
	mu          sync.Mutex
	workflowIDs []string
	batches     []Batch
}

func (r *signalRecorder) SignalWithStartWorkflow(_ context.Context, workflowID, _ string, arg any, _ client.StartWorkflowOptions, _ any, _ ...any) (client.WorkflowRun, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.workflowIDs = append(r.workflowIDs, workflowID)
	r.batches = append(r.batches, arg.(Batch))
	return nil, nil
}

// A batched hand-off keeps each signal's payload within maxBatchSignalBytes: a conversation's
// requests past it go in further signals, in order, a request larger than it alone; the
// conversations go in the order of their first request.
func TestHandOffSplitsLargeBatches(t *testing.T) {
	t.Parallel()
	rec := &signalRecorder{}
	b, err := NewBridge(rec, BridgeOptions{TaskQueue: "q", IDPrefix: "p-"})
	require.NoError(t, err)
	var reqs, long []turn.Request
	for i := range 10 {
		r := request("c-long", int64(i+1), strings.Repeat("x", 30<<10))
		if i == 7 {
			r.Text = strings.Repeat("y", 200<<10)
		}
		long = append(long, r)
		reqs = append(reqs, r)
		if i == 1 {
			reqs = append(reqs, request("c-short", 1, "a"), request("c-short", 2, "b"))
		}
	}
	require.NoError(t, b.HandOff(context.Background(), reqs))
	require.Equal(t, []string{"p-c-long", "p-c-long", "p-c-long", "p-c-long", "p-c-short"}, rec.workflowIDs)
	var got []string
	for i, bt := range rec.batches[:4] {
		require.LessOrEqual(t, len(mustJSON(t, bt)), max(maxBatchSignalBytes, 201<<10), "signal %d", i)
		for _, e := range bt.Envelopes {
			got = append(got, e.Request.ID)
		}
	}
	require.Len(t, rec.batches[2].Envelopes, 1, "the 200 KiB request goes alone")
	want := make([]string, len(long))
	for i, r := range long {
		want[i] = r.ID
	}
	require.Equal(t, want, got, "one conversation's requests in order over its signals")
	require.Len(t, rec.batches[4].Envelopes, 2)
}
