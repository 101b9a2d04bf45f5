package workflow

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	tlog "go.temporal.io/sdk/log"
	twf "go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turntest"
)

// payloadLimit is the bound of issue 35's acceptance lines on every payload of a
// conversation's histories and on every continue-as-new input: 256 KiB.
const payloadLimit = 256 << 10

// The acceptance lines of issue 35 in Temporal mode: one conversation of 1,000 turns, handed
// off in batches (Bridge.HandOff, 50 requests a signal) while it runs, continuing as new every
// 100 turns with a backlog pending. Every request gives exactly one turn in the session, in
// order; every payload of every run's history (signal inputs, activity inputs and results,
// markers, continue-as-new inputs) stays under 256 KiB; and no continue-as-new input holds a
// request's text: the backlog crosses by its positions in the OverflowStore.
func TestDevServerThousandTurnsSmallPayloads(t *testing.T) {
	t.Parallel()
	start := time.Now()
	s := newStack(t, 1)
	// A client whose SDK logs are dropped (the stack's keeps every line, thousands here), and
	// in-memory stores: the test measures Temporal's side, and SQLite under -race would take
	// most of its time.
	c, err := client.Dial(client.Options{HostPort: needServer(t), ContextPropagators: []twf.ContextPropagator{NewContextPropagator()},
		Logger: tlog.NewStructuredLogger(discardLogger())})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	s.client = c
	pub, sessions := &recordingPublisher{}, session.NewMemoryStore()
	s.startWorker(func(o *WorkerOptions) {
		o.Publisher, o.Logger = pub, discardLogger()
		o.Runner = &turn.Runner{Model: s.model, Sessions: sessions, Inbox: inbox.NewMemoryInbox(), TurnTimeout: 30 * time.Second, Logger: discardLogger(),
			Summarizer: &turntest.FactSummarizer{}} // the recording model echoes: its summaries would grow
	})
	b := s.bridge(BridgeOptions{Config: Config{MaxTurnsPerRun: 100, IdleTimeout: time.Minute}, Logger: discardLogger()})
	const n, batch = 1000, 50
	conv := s.cluster.Unique("thousand")
	marker := s.cluster.Unique("text") // in every request's text, and nowhere else
	sent := make([]turn.Request, 0, n)
	ctx := context.Background()
	for len(sent) < n {
		reqs := make([]turn.Request, 0, batch)
		for range batch {
			seq := int64(len(sent) + 1)
			r := request(conv, seq, fmt.Sprintf("%s: question %d, about the size of a user's message in a support thread", marker, seq))
			sent = append(sent, r)
			reqs = append(reqs, r)
		}
		require.NoError(t, b.HandOff(ctx, reqs))
		if len(sent) >= n/2 {
			// A backlog of 500 at once, then batches while the turns run: runs continue as new
			// with requests pending, and signals arrive around those moments.
			waitStatus(t, s, b, conv, func(st Status) bool { return st.Applied >= int64(len(sent)-200) })
		}
	}
	// The run that applied the 1,000th turn (the 100th of its run) continues as new too: wait
	// for the run after it, so that its continue-as-new input is read.
	waitStatus(t, s, b, conv, func(st Status) bool { return st.Applied == n && st.TurnsThisRun == 0 })
	applied := time.Since(start)

	requireTurnsInOrder(t, sessions, session.Key{App: turn.DefaultApp, User: "u-1", Conversation: conv}, sent)
	requireEveryRequestAnswered(t, pub.answered(), sent...)
	pub.mu.Lock()
	require.Empty(t, pub.deadIDs, "no request dead-lettered")
	pub.mu.Unlock()

	h := readHistories(t, s.client, b.WorkflowID(conv))
	h.log(t)
	require.GreaterOrEqual(t, len(h.runs), n/100, "1,000 turns at 100 per run take at least 10 runs")
	require.Less(t, h.largest.size, payloadLimit, "the largest payload of any run's history (%s)", h.largest.event)
	overflowed := false
	for i, in := range h.continued {
		require.Less(t, len(in.data), payloadLimit, "continue-as-new input %d", i)
		require.False(t, bytes.Contains(in.data, []byte(marker)), "continue-as-new input %d holds a request's text", i)
		require.Empty(t, in.state.Pending, "continue-as-new input %d carries pending requests by position only", i)
		overflowed = overflowed || in.state.Overflow > 0
	}
	require.True(t, overflowed, "runs continued as new with a backlog pending, which waited in the OverflowStore")
	t.Logf("%d turns applied in %s, checked in %s", n, applied.Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond))
}

// A request of 200 KiB of text in Temporal mode, pending across two continue-as-new: the
// largest payload of the histories is then that request (its signal, its turn's activity
// input, the SaveOverflow input and LoadOverflow result that carry it across), still under
// 256 KiB; no continue-as-new input holds it. A text that large is an input: it travels whole
// wherever the request does, up to BridgeOptions.MaxPayloadBytes; only a reference would keep
// it out of the histories.
func TestDevServerLargeTextPayloads(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	pub := &recordingPublisher{}
	s.startWorker(func(o *WorkerOptions) {
		o.Publisher = pub
		// Room for the text in the model's input: the default budget refuses it (ErrOverBudget)
		// inside the activity, after it travelled all the same.
		o.Runner.ContextBudget = 1 << 20
	})
	b := s.bridge(BridgeOptions{Config: Config{MaxTurnsPerRun: 1, IdleTimeout: time.Minute}})
	conv := s.cluster.Unique("large")
	marker := s.cluster.Unique("text")
	big := marker + strings.Repeat(" a pasted log line", 200<<10/18)
	sent := []turn.Request{request(conv, 1, marker+" first"), request(conv, 2, big), request(conv, 3, marker+" third")}
	ctx := context.Background()
	// The large one and the third wait at the gap of the first, then travel across the
	// continue-as-new that follows the first turn.
	require.NoError(t, b.HandOff(ctx, sent[1:]))
	waitStatus(t, s, b, conv, func(st Status) bool { return st.Pending == 2 })
	require.NoError(t, b.HandOff(ctx, sent[:1]))
	s.waitApplied(b, conv, 3)
	require.Eventually(t, func() bool {
		st, err := s.status(ctx, b, conv)
		return err == nil && st.Applied == 3 && st.TurnsThisRun == 0
	}, wait, 50*time.Millisecond, "the last run continued as new")
	requireTurnsInOrder(t, s.sessions, session.Key{App: turn.DefaultApp, User: "u-1", Conversation: conv}, sent)
	requireEveryRequestAnswered(t, pub.answered(), sent...)

	h := readHistories(t, s.client, b.WorkflowID(conv))
	h.log(t)
	t.Logf("request text %d bytes; largest payload %d bytes (%s)", len(big), h.largest.size, h.largest.event)
	require.GreaterOrEqual(t, h.largest.size, len(big), "the text travels whole in some payload")
	require.Less(t, h.largest.size, payloadLimit)
	for _, kind := range []string{"WorkflowExecutionSignaled", "ActivityTaskScheduled " + ActivityName,
		"ActivityTaskScheduled " + SaveOverflowActivityName, "ActivityTaskCompleted " + LoadOverflowActivityName} {
		require.GreaterOrEqual(t, h.byEvent[kind], len(big), "the text is in the payload of %s", kind)
	}
	require.NotEmpty(t, h.continued)
	for i, in := range h.continued {
		require.False(t, bytes.Contains(in.data, []byte(marker)), "continue-as-new input %d holds a request's text", i)
	}
}

// waitStatus waits until the status of the conversation's workflow satisfies ok, asking every
// 200 ms: a query is a task for the worker, and this test asks while a thousand turns run.
func waitStatus(t testing.TB, s *stack, b *Bridge, conv string, ok func(Status) bool) {
	t.Helper()
	var last Status
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := s.status(ctx, b, conv)
		if err == nil {
			last = st
		}
		return err == nil && ok(st)
	}, wait, 200*time.Millisecond, "conversation %s: last status %+v", conv, last)
}

// requireTurnsInOrder fails t unless the session of key holds exactly one turn per request of
// sent, in the order sent: the events of each request id (a compaction's checkpoint among
// them, stored in its turn's append) are one run of consecutive events, and those runs follow
// sent's order with nothing else between.
func requireTurnsInOrder(t testing.TB, store session.Store, key session.Key, sent []turn.Request) {
	t.Helper()
	sess, err := store.Get(context.Background(), key, 100*len(sent))
	require.NoError(t, err)
	require.Equal(t, int64(len(sess.Events)), sess.EventCount, "the whole history was read")
	var turns []string
	for _, e := range sess.Events {
		if len(turns) == 0 || turns[len(turns)-1] != e.RequestID {
			turns = append(turns, e.RequestID)
		}
	}
	want := make([]string, len(sent))
	for i, r := range sent {
		want[i] = r.ID
	}
	require.Equal(t, len(want), len(turns), "one turn per request")
	require.True(t, slices.Equal(want, turns), "the turns follow the requests' order")
}

// histories is what readHistories found in the runs of one workflow id.
type histories struct {
	runs []runHistory
	// largest is the largest payload of any event of any run.
	largest payloadSeen
	// byEvent is the largest payload per event kind (the event type, and the activity type
	// for ActivityTaskScheduled and ActivityTaskCompleted).
	byEvent map[string]int
	// continued are the continue-as-new inputs, in run order.
	continued []continuedPayload
}

// runHistory is one run's history measured: its id, events and bytes (encoded events).
type runHistory struct {
	runID  string
	events int
	bytes  int
}

// payloadSeen is a payload's encoded size (data and metadata) and the event that holds it.
type payloadSeen struct {
	size  int
	event string
}

// continuedPayload is a continue-as-new input: its payloads' data and the State it decodes to.
type continuedPayload struct {
	data  []byte
	state State
}

// readHistories reads every run of workflowID, from the first run on through each
// continue-as-new (WorkflowExecutionContinuedAsNew's new run id) to the latest, and measures
// every payload of every event.
func readHistories(t testing.TB, c client.Client, workflowID string) histories {
	t.Helper()
	first := ""
	events(t, c, workflowID, "", func(e *historypb.HistoryEvent) {
		if a := e.GetWorkflowExecutionStartedEventAttributes(); a != nil {
			first = a.GetFirstExecutionRunId()
		}
	})
	require.NotEmpty(t, first, "the latest run names the first")
	h := histories{byEvent: map[string]int{}}
	scheduled := map[int64]string{} // activity type by its scheduled event's id
	for runID := first; runID != ""; {
		run, next := runHistory{runID: runID}, ""
		events(t, c, workflowID, runID, func(e *historypb.HistoryEvent) {
			run.events++
			run.bytes += proto.Size(e)
			kind := e.GetEventType().String() // the API's name: WorkflowExecutionSignaled
			if a := e.GetActivityTaskScheduledEventAttributes(); a != nil {
				scheduled[e.GetEventId()] = a.GetActivityType().GetName()
				kind += " " + a.GetActivityType().GetName()
			}
			if a := e.GetActivityTaskCompletedEventAttributes(); a != nil {
				kind += " " + scheduled[a.GetScheduledEventId()]
			}
			eachPayload(e.ProtoReflect(), func(p *commonpb.Payload) {
				size := proto.Size(p)
				h.byEvent[kind] = max(h.byEvent[kind], size)
				if size > h.largest.size {
					h.largest = payloadSeen{size: size, event: kind}
				}
			})
			if a := e.GetWorkflowExecutionContinuedAsNewEventAttributes(); a != nil {
				var in continuedPayload
				for _, p := range a.GetInput().GetPayloads() {
					in.data = append(in.data, p.GetData()...)
				}
				require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(a.GetInput(), &in.state))
				h.continued = append(h.continued, in)
				next = a.GetNewExecutionRunId()
			}
		})
		scheduled = map[int64]string{}
		h.runs = append(h.runs, run)
		runID = next
	}
	return h
}

// log writes the measures to t's log: per run, events and bytes; the largest payload per
// event kind; the continue-as-new inputs' sizes.
func (h histories) log(t testing.TB) {
	t.Helper()
	largestRun, events := runHistory{}, 0
	for _, r := range h.runs {
		events += r.events
		if r.bytes > largestRun.bytes {
			largestRun = r
		}
	}
	t.Logf("%d runs, %d events; largest run history %d bytes (%d events)", len(h.runs), events, largestRun.bytes, largestRun.events)
	kinds := make([]string, 0, len(h.byEvent))
	for k := range h.byEvent {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	for _, k := range kinds {
		t.Logf("largest payload of %s: %d bytes", k, h.byEvent[k])
	}
	largestInput := 0
	for _, in := range h.continued {
		largestInput = max(largestInput, len(in.data))
	}
	t.Logf("largest payload %d bytes (%s); %d continue-as-new inputs, the largest %d bytes", h.largest.size, h.largest.event, len(h.continued), largestInput)
}

// events calls fn with every event of a run of workflowID ("" for the latest run).
func events(t testing.TB, c client.Client, workflowID, runID string, fn func(*historypb.HistoryEvent)) {
	t.Helper()
	it := c.GetWorkflowHistory(context.Background(), workflowID, runID, false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		require.NoError(t, err)
		fn(e)
	}
}

// eachPayload calls fn with every Payload message within m, at any depth.
func eachPayload(m protoreflect.Message, fn func(*commonpb.Payload)) {
	if p, ok := m.Interface().(*commonpb.Payload); ok {
		fn(p)
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList():
			if fd.Message() != nil {
				for i, l := 0, v.List(); i < l.Len(); i++ {
					eachPayload(l.Get(i).Message(), fn)
				}
			}
		case fd.IsMap():
			if fd.MapValue().Message() != nil {
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					eachPayload(mv.Message(), fn)
					return true
				})
			}
		case fd.Message() != nil:
			eachPayload(v.Message(), fn)
		}
		return true
	})
}
