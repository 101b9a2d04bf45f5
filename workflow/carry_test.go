package workflow

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"

	"github.com/turnstile-go/turnstile/internal/sqltest"
	"github.com/turnstile-go/turnstile/turn"
)

// With Config.MaxCarriedBytes small, a backlog of sequenced and unsequenced requests travels
// through many runs with every continue-as-new input under the bound (plus the dedup window),
// the rest in the workers' OverflowStore; requests that arrive while some wait there apply
// after them: every request applies once, in arrival order.
func TestBoundedCarryKeepsOrder(t *testing.T) {
	t.Parallel()
	u := newUnit(t)
	const conv = "c-carry"
	cfg := Config{MaxTurnsPerRun: 5, MaxCarriedBytes: 2000, DedupWindow: 60, IdleTimeout: time.Minute}
	var sent []turn.Request
	batch := func(n int) []turn.Request {
		var out []turn.Request
		for range n {
			seq := int64(0)
			if len(sent)%2 == 0 {
				seq = int64(len(sent)/2 + 1)
			}
			r := request(conv, seq, fmt.Sprintf("m%d", len(sent)))
			sent = append(sent, r)
			out = append(out, r)
		}
		return out
	}
	st := State{ConversationID: conv, Config: cfg}
	largest, overflowed := 0, false
	for run := 0; ; run++ {
		require.Less(t, run, 100, "the backlog drains")
		var s testsuite.WorkflowTestSuite
		env := s.NewTestWorkflowEnvironment()
		require.NoError(t, Register(env, u.opts))
		var arrivals []turn.Request
		switch run {
		case 0:
			arrivals = batch(40)
		case 2:
			arrivals = batch(10) // while requests wait in the store
		}
		var again []turn.Request
		if run == 2 {
			// Redeliveries of requests that wait in the store: the next one to come back and
			// the last (its copy is stored behind it), both dropped.
			require.Positive(t, st.Overflow)
			u.states.mu.Lock()
			next := u.states.overflow[conv][st.OverflowFrom]
			u.states.mu.Unlock()
			require.NotEmpty(t, next.Request.ID, "position %d of %v", st.OverflowFrom, st)
			again = []turn.Request{next.Request, sent[39]}
		}
		if len(arrivals) > 0 {
			delay := time.Second // run 0 waits for them; later runs have work at once
			if run > 0 {
				delay = 0
			}
			env.RegisterDelayedCallback(func() {
				for _, r := range arrivals {
					env.SignalWorkflowSkippingWorkflowTask(SignalName, batchOf(r))
				}
				for _, r := range again {
					env.SignalWorkflowSkippingWorkflowTask(SignalName, batchOf(r))
				}
				env.SignalWorkflow(SignalName, batchOf(arrivals[0])) // a duplicate
			}, delay)
		}
		env.ExecuteWorkflow(WorkflowName, st)
		if env.GetWorkflowError() == nil {
			break // idle end: nothing left
		}
		st = continuedState(t, env)
		input, err := json.Marshal(st)
		require.NoError(t, err)
		largest = max(largest, len(input))
		pending := 0
		for _, p := range st.Pending {
			pending += envelopeSize(p)
		}
		require.LessOrEqual(t, pending, cfg.MaxCarriedBytes, "run %d carries at most MaxCarriedBytes of pending requests", run)
		overflowed = overflowed || st.Overflow > 0
	}
	require.True(t, overflowed, "the backlog went through the store")
	t.Logf("largest continue-as-new input: %d bytes (bound %d + the dedup window)", largest, cfg.MaxCarriedBytes)
	got := u.model.ids()
	want := make([]string, len(sent))
	for i, r := range sent {
		want[i] = r.ID
	}
	require.Equal(t, want, got, "every request once, in arrival order")
	require.Equal(t, want, u.publisher.resultIDs(), "one result per request: the redeliveries were dropped")
}

// A request loaded back from the store drops its copies that came in meanwhile (a
// redelivery accept could not see), and takes the dead-letter mark of a copy the consumer
// dead-lettered; other requests stay, in order.
func TestDedupNewerDropsCopies(t *testing.T) {
	t.Parallel()
	c := &conversation{}
	a, b, other := request("c", 1, "a"), request("c", 2, "b"), request("c", 3, "other")
	stranger := a
	stranger.UserID = "u-2"
	loaded := []Envelope{{Request: a}, {Request: b}}
	newer := []Envelope{{Request: other}, {Request: a}, {Request: stranger}, {Request: b, DeadLettered: "refused"}}
	got := c.dedupNewer(loaded, newer)
	require.Equal(t, []Envelope{{Request: other}, {Request: stranger}}, got, "copies of a and b go; another user's request of a's id stays")
	require.Equal(t, "refused", loaded[1].DeadLettered, "b carries the consumer's dead letter")
	require.Empty(t, loaded[0].DeadLettered)
	require.Len(t, newer, 4, "newer itself is left as it was")
}

// Requests loaded back from the store (versionCarryReferences) drop the copies of a request
// queued before them, in the load or among the older pending requests, whose dead-letter mark
// the queued one takes, and the requests applied within the dedup window; a re-drive of an
// applied request and another user's request of an applied id stay.
func TestDedupLoadedDropsCopies(t *testing.T) {
	t.Parallel()
	c := &conversation{strict: true, redrive: true, recentSet: map[string]bool{}}
	applied, old, a, b := request("c", 1, "applied"), request("c", 2, "old"), request("c", 3, "a"), request("c", 4, "b")
	c.recentSet[applied.ID], c.UserID = true, applied.UserID
	stranger := applied
	stranger.UserID = "u-2"
	older := []Envelope{{Request: old}}
	loaded := []Envelope{{Request: applied}, {Request: old, DeadLettered: "refused"}, {Request: a}, {Request: b},
		{Request: a, DeadLettered: "gave up"}, {Request: applied, RedrivenFrom: "t/0/7"}, {Request: stranger}, {Request: b}}
	got := c.dedupLoaded(loaded, older)
	require.Equal(t, []Envelope{{Request: a, DeadLettered: "gave up"}, {Request: b}, {Request: applied, RedrivenFrom: "t/0/7"}, {Request: stranger}}, got)
	require.Equal(t, "refused", older[0].DeadLettered, "the older pending copy takes the loaded copy's dead letter")
	require.Empty(t, loaded[2].DeadLettered, "loaded itself is left as it was")
}

// Both stores keep the overflow by position, load it back in order within the byte bound,
// forget what was loaded before, and say when a position is missing.
func TestOverflowStores(t *testing.T) {
	t.Parallel()
	for name, open := range ledgerOpeners() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l := open(t).(OverflowStore)
			ctx := context.Background()
			var envs []Envelope
			for i := range 5 {
				envs = append(envs, Envelope{Request: request("c-of", int64(i+1), "text")})
			}
			require.NoError(t, l.SaveOverflow(ctx, "c-of", -2, envs))
			require.NoError(t, l.SaveOverflow(ctx, "c-of", -2, envs[:1]), "saving again replaces")
			got, err := l.LoadOverflow(ctx, "c-of", -2, 10, 1)
			require.NoError(t, err)
			require.Len(t, got, 1, "the first one alone passes maxBytes")
			one := envelopeSize(envs[0]) // the five are of one size
			got, err = l.LoadOverflow(ctx, "c-of", -2, 10, 3*one-1)
			require.NoError(t, err)
			require.Len(t, got, 2, "a load stops before the envelope that would pass maxBytes")
			got, err = l.LoadOverflow(ctx, "c-of", -1, 3, 1<<20)
			require.NoError(t, err)
			require.Len(t, got, 3, "limit")
			require.Equal(t, envs[1].Request.ID, got[0].Request.ID)
			require.Equal(t, envs[3].Request.ID, got[2].Request.ID)
			_, err = l.LoadOverflow(ctx, "c-of", -2, 1, 1<<20)
			require.ErrorIs(t, err, ErrOverflowMissing, "positions below the last load are forgotten")
			_, err = l.LoadOverflow(ctx, "nobody", 0, 1, 1<<20)
			require.ErrorIs(t, err, ErrOverflowMissing)
		})
	}
}

// ledgerOpeners returns a fresh ledger per kind: memory, SQLite and PostgreSQL.
func ledgerOpeners() map[string]func(t *testing.T) Ledger {
	ledgers := map[string]func(t *testing.T) Ledger{"memory": func(*testing.T) Ledger { return &MemoryLedger{} }}
	for _, db := range []sqltest.DB{sqltest.SQLiteFileDB, sqltest.PostgresDB} {
		ledgers[db.Name] = func(t *testing.T) Ledger {
			conn := db.Open(t)
			dialect := SQLite
			if db.Postgres {
				dialect = PostgreSQL
			}
			l, err := NewSQLLedger(conn, dialect, sqltest.Prefix(t, conn, db.Postgres))
			require.NoError(t, err)
			require.NoError(t, l.Migrate(context.Background()))
			return l
		}
	}
	return ledgers
}

// long selects the long form of the backlog test: 5,000 requests at the default bound.
var long = flag.Bool("long", false, "long tests: TestDevServerBacklogBoundedCarry with 5,000 requests")

// The acceptance line: a backlog of one conversation's requests produced at once (5,000 under
// -long at the default MaxCarriedBytes; 500 by default, with a 16 KiB bound so that the
// overflow is used), continue-as-new every 100 turns: every turn once, in order, no run
// terminated or failed, and the largest continue-as-new input under the documented bound
// (MaxCarriedBytes + 40 bytes per DedupWindow id + 1 KB).
func TestDevServerBacklogBoundedCarry(t *testing.T) {
	t.Parallel()
	n, bound, within := 500, 16<<10, wait
	if *long {
		n, bound, within = 5000, DefaultMaxCarriedBytes, 30*time.Minute
	}
	s := newStack(t, 1)
	s.startWorker(nil)
	b := s.bridge(BridgeOptions{Config: Config{MaxTurnsPerRun: 100, MaxSignalsPerRun: serverSignalLimit / 2, MaxCarriedBytes: bound, IdleTimeout: time.Minute}})
	s.startMember(b, nil)
	conv := s.cluster.Unique("backlog")
	start := time.Now()
	for seq := int64(1); seq <= int64(n); seq++ {
		s.produce(request(conv, seq, fmt.Sprintf("message %d of a long backlog, about the size of a user's question", seq)), nil)
	}
	t.Cleanup(func() {
		if t.Failed() {
			qst, qerr := s.status(context.Background(), b, conv)
			t.Logf("status: %+v %v", qst, qerr)
			msgs := s.logs.matching("")
			for _, m := range msgs {
				if !strings.HasPrefix(m, "DEBUG") {
					t.Log(m)
				}
			}
		}
	})
	st := s.waitAppliedWithin(b, conv, int64(n), within)
	t.Logf("%d turns in %s", n, time.Since(start).Round(time.Second))
	require.Equal(t, int64(n), st.LastAppliedSequence)
	require.Zero(t, st.Pending)
	seqs := s.model.sequences()
	require.Len(t, seqs, n, "the model ran once per request")
	for i, seq := range seqs {
		require.Equal(t, int64(i+1), seq, "turn %d applied in sequence order", i)
	}
	wid := b.WorkflowID(conv)
	resp, err := s.client.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
		Query: fmt.Sprintf("WorkflowId = '%s' AND ExecutionStatus IN ('Terminated', 'Failed', 'TimedOut')", wid)})
	require.NoError(t, err)
	require.Empty(t, resp.Executions, "no run terminated or failed")
	largest, overflowed, runs := 0, false, 0
	for _, in := range s.continuedInputs(wid) {
		runs++
		largest = max(largest, in.size)
		overflowed = overflowed || in.state.Overflow > 0
	}
	documented := bound + 40*DefaultDedupWindow + 1<<10
	t.Logf("%d runs continued as new; largest continue-as-new input %d bytes (documented bound %d, MaxCarriedBytes %d)", runs, largest, documented, bound)
	require.GreaterOrEqual(t, runs, n/100-1)
	require.True(t, overflowed, "the backlog passed the bound and waited in the OverflowStore")
	require.Less(t, largest, documented)
}

// continuedInput is the input of a run's continue-as-new: its encoded size and its State.
type continuedInput struct {
	size  int
	state State
}

// continuedInputs returns the continue-as-new input of every continued run of a workflow id.
func (s *stack) continuedInputs(workflowID string) []continuedInput {
	s.t.Helper()
	ctx := context.Background()
	var out []continuedInput
	var token []byte
	for {
		resp, err := s.client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{NextPageToken: token,
			Query: fmt.Sprintf("WorkflowId = '%s' AND ExecutionStatus = 'ContinuedAsNew'", workflowID)})
		require.NoError(s.t, err)
		for _, e := range resp.Executions {
			it := s.client.GetWorkflowHistory(ctx, workflowID, e.Execution.RunId, false, enums.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT)
			for it.HasNext() {
				ev, err := it.Next()
				require.NoError(s.t, err)
				if attrs := ev.GetWorkflowExecutionContinuedAsNewEventAttributes(); attrs != nil {
					var in continuedInput
					for _, p := range attrs.Input.GetPayloads() {
						in.size += len(p.GetData())
					}
					require.NoError(s.t, converter.GetDefaultDataConverter().FromPayloads(attrs.Input, &in.state))
					out = append(out, in)
				}
			}
		}
		if token = resp.NextPageToken; len(token) == 0 {
			return out
		}
	}
}

// A store forgets a conversation's overflow when it saves a State with nothing pending (a run
// that ends idle: every row left is one a run loaded), and keeps it otherwise.
func TestSaveStateForgetsLoadedOverflow(t *testing.T) {
	t.Parallel()
	for name, open := range ledgerOpeners() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l := open(t)
			states, overflow := l.(StateStore), l.(OverflowStore)
			ctx := context.Background()
			for _, conv := range []string{"c-idle", "c-other"} {
				require.NoError(t, overflow.SaveOverflow(ctx, conv, 0, []Envelope{{Request: request(conv, 1, "a")}, {Request: request(conv, 2, "b")}}))
			}
			require.NoError(t, states.SaveState(ctx, State{ConversationID: "c-idle", Overflow: 1, OverflowFrom: 1}))
			_, err := overflow.LoadOverflow(ctx, "c-idle", 1, 1, 1<<20)
			require.NoError(t, err, "a State with requests waiting keeps them")
			require.NoError(t, states.SaveState(ctx, State{ConversationID: "c-idle", NextSequence: 3, OverflowFrom: 2}))
			_, err = overflow.LoadOverflow(ctx, "c-idle", 1, 1, 1<<20)
			require.ErrorIs(t, err, ErrOverflowMissing, "nothing pending: the loaded rows are forgotten")
			got, err := overflow.LoadOverflow(ctx, "c-other", 0, 2, 1<<20)
			require.NoError(t, err)
			require.Len(t, got, 2, "another conversation's overflow stays")
		})
	}
}
