package workflow

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/turn"
)

// The acceptance line: after a per-user deletion the user's workflows are gone from
// visibility (a running one held at a gap, terminated, and a closed one, every run of both
// deleted) and no ledger row of theirs remains (hand-offs, the closed run's State); another
// user's conversation keeps its workflow and rows.
func TestDevServerDeleteUser(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	ledger, err := NewSQLLedger(s.db, SQLite, "")
	require.NoError(t, err)
	require.NoError(t, ledger.Migrate(context.Background()))
	s.startWorker(func(o *WorkerOptions) { o.States = ledger })
	b := s.bridge(BridgeOptions{Ledger: ledger, Config: Config{SearchAttributes: true, IdleTimeout: time.Second}})
	ctx := context.Background()
	user, other := s.cluster.Unique("user"), s.cluster.Unique("other")
	held, idle, kept := s.cluster.Unique("held"), s.cluster.Unique("idle"), s.cluster.Unique("kept")
	send := func(uid, conv string, seq int64) turn.Request {
		req := request(conv, seq, fmt.Sprintf("personal text %d", seq))
		req.UserID = uid
		_, err := b.Handle(ctx, req)
		require.NoError(t, err)
		return req
	}
	send(user, held, 1)
	send(user, held, 3) // 2 never comes: the run keeps waiting
	send(user, idle, 1)
	send(other, kept, 1)
	s.waitApplied(b, held, 1)
	s.waitApplied(b, kept, 1)
	s.waitApplied(b, idle, 1)
	require.Eventually(t, func() bool {
		st, found, err := ledger.LoadState(ctx, idle)
		return err == nil && found && st.UserID == user
	}, wait, 50*time.Millisecond, "the idle run ended and saved its State")

	list := func(q string) int {
		resp, err := s.client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: q})
		require.NoError(t, err)
		return len(resp.Executions)
	}
	byUser := fmt.Sprintf("TurnstileUser = '%s'", user)
	require.Eventually(t, func() bool { return list(byUser) == 2 }, wait, 100*time.Millisecond, "both conversations are visible first")

	deleting := time.Now()
	got, err := DeleteUser(ctx, s.client, user, UserDeletion{IDPrefix: b.opts.IDPrefix, Ledger: ledger})
	require.NoError(t, err)
	t.Logf("deleted: %+v", got)
	require.GreaterOrEqual(t, got.Terminated, 1, "the run held at the gap (the idle one too when visibility lags)")
	require.GreaterOrEqual(t, got.Deleted, 2)
	require.ElementsMatch(t, []string{held, idle}, got.Conversations)
	require.Positive(t, got.LedgerRows)

	byID := fmt.Sprintf("WorkflowId IN ('%s', '%s')", b.WorkflowID(held), b.WorkflowID(idle))
	require.Eventually(t, func() bool { return list(byUser) == 0 && list(byID) == 0 }, wait, 100*time.Millisecond,
		"every run of the user's workflows leaves visibility")
	t.Logf("the user's runs left visibility %s after DeleteUser began", time.Since(deleting).Round(100*time.Millisecond))
	for _, conv := range []string{held, idle} {
		rows, err := ledger.Range(ctx, conv, 0, 100)
		require.NoError(t, err)
		require.Empty(t, rows, "no hand-off of %s", conv)
		_, found, err := ledger.LoadState(ctx, conv)
		require.NoError(t, err)
		require.False(t, found, "no State of %s", conv)
	}
	rows, err := ledger.Range(ctx, kept, 0, 100)
	require.NoError(t, err)
	require.Len(t, rows, 1, "the other user's hand-off stays")
	require.Equal(t, 1, list(fmt.Sprintf("WorkflowId = '%s'", b.WorkflowID(kept))), "the other user's workflow stays")

	again, err := DeleteUser(ctx, s.client, user, UserDeletion{IDPrefix: b.opts.IDPrefix, Ledger: ledger, Conversations: []string{held}})
	require.NoError(t, err, "deleting again is no error")
	require.Zero(t, again.Terminated)
}

// Without search attributes the conversations given (from the user's sessions) reach the
// workflows: every run is deleted.
func TestDevServerDeleteUserByConversation(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	s.startWorker(nil)
	b := s.bridge(BridgeOptions{Config: Config{MaxTurnsPerRun: 2}})
	ctx := context.Background()
	conv := s.cluster.Unique("plain")
	// A user of its own: the dev server is shared by the package's parallel tests, and
	// DeleteUser also erases every run whose TurnstileUser is the user's, so the default
	// "u-1" of request() would reach other tests' workflows (CI saw 5 runs deleted for 3).
	user := s.cluster.Unique("user")
	for seq := int64(1); seq <= 5; seq++ {
		req := request(conv, seq, "text")
		req.UserID = user
		_, err := b.Handle(ctx, req)
		require.NoError(t, err)
	}
	s.waitApplied(b, conv, 5)
	byID := fmt.Sprintf("WorkflowId = '%s'", b.WorkflowID(conv))
	runs := s.runsOf(b.WorkflowID(conv))
	require.GreaterOrEqual(t, runs, 3, "runs continued as new")
	deleting := time.Now()
	got, err := DeleteUser(ctx, s.client, user, UserDeletion{IDPrefix: b.opts.IDPrefix, Conversations: []string{conv}})
	require.NoError(t, err)
	// Terminated counts the runs visibility still listed as running: the open one, and any
	// continued run whose close has not reached visibility yet (UserDeleted's doc).
	require.GreaterOrEqual(t, got.Terminated, 1, "the open run")
	require.LessOrEqual(t, got.Terminated, runs)
	require.Equal(t, runs, got.Deleted, "every run, the continued ones too")
	require.Eventually(t, func() bool {
		resp, err := s.client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: byID})
		return err == nil && len(resp.Executions) == 0
	}, wait, 100*time.Millisecond)
	t.Logf("%d runs left visibility %s after DeleteUser began", runs, time.Since(deleting).Round(100*time.Millisecond))
}

// Bad input is an error, never a panic.
func TestDeleteUserRefusesBadInput(t *testing.T) {
	t.Parallel()
	_, err := DeleteUser(context.Background(), nil, "u-1", UserDeletion{})
	require.ErrorContains(t, err, "nil client")
	for name, open := range ledgerOpeners() {
		_, err := open(t).(LedgerEraser).DeleteUser(context.Background(), "", nil)
		require.ErrorContains(t, err, "empty user id", name)
	}
	require.ErrorContains(t, RunLedgerPurge(context.Background(), nil, inbox.PurgeSchedule{Horizon: time.Hour}), "nil ledger")
	require.ErrorContains(t, RunLedgerPurge(context.Background(), &MemoryLedger{}, inbox.PurgeSchedule{}), "Horizon")
	require.Equal(t, `'it\'s \\ me'`, quoteList(`it's \ me`))
}

// The acceptance line: the ledger purge removes the hand-offs older than its cutoff and keeps
// the younger ones and the States; DeleteUser removes a user's rows and those of the
// conversations named, and keeps the rest.
func TestLedgerPurgeAndDeleteUser(t *testing.T) {
	t.Parallel()
	for name, open := range ledgerOpeners() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l := open(t)
			er := l.(LedgerEraser)
			ctx := context.Background()
			old := Envelope{Request: request("c-old", 1, "old")}
			require.NoError(t, l.Record(ctx, old))
			require.NoError(t, l.(StateStore).SaveState(ctx, State{ConversationID: "c-old", UserID: "u-1", NextSequence: 2}))
			time.Sleep(5 * time.Millisecond) // two distinct times, not a bound on anything
			cutoff := time.Now()
			time.Sleep(5 * time.Millisecond)
			young := Envelope{Request: request("c-young", 1, "young")}
			require.NoError(t, l.Record(ctx, young))

			n, err := er.Purge(ctx, cutoff)
			require.NoError(t, err)
			require.Equal(t, int64(1), n)
			got, err := l.Range(ctx, "c-old", 0, 10)
			require.NoError(t, err)
			require.Empty(t, got, "the older hand-off is gone")
			got, err = l.Range(ctx, "c-young", 0, 10)
			require.NoError(t, err)
			require.Len(t, got, 1, "the younger one stays")
			_, found, err := l.(StateStore).LoadState(ctx, "c-old")
			require.NoError(t, err)
			require.True(t, found, "the purge keeps States: the sequence mark of the next run")

			theirs := Envelope{Request: request("c-shared", 1, "theirs")}
			theirs.Request.UserID = "u-2"
			require.NoError(t, l.Record(ctx, theirs))
			require.NoError(t, l.(OverflowStore).SaveOverflow(ctx, "c-young", 0, []Envelope{young}))
			n, err = er.DeleteUser(ctx, "u-1", []string{"c-shared"})
			require.NoError(t, err)
			require.Equal(t, int64(4), n, "c-young's hand-off and overflow, c-old's State, c-shared's hand-off")
			for _, conv := range []string{"c-young", "c-shared"} {
				got, err = l.Range(ctx, conv, 0, 10)
				require.NoError(t, err)
				require.Empty(t, got, conv)
			}
			_, found, err = l.(StateStore).LoadState(ctx, "c-old")
			require.NoError(t, err)
			require.False(t, found)
			_, err = l.(OverflowStore).LoadOverflow(ctx, "c-young", 0, 1, 1<<20)
			require.ErrorIs(t, err, ErrOverflowMissing)
		})
	}
}

// RunLedgerPurge purges on the inbox's schedule until its context ends.
func TestRunLedgerPurge(t *testing.T) {
	t.Parallel()
	l := &MemoryLedger{}
	require.NoError(t, l.Record(context.Background(), Envelope{Request: request("c", 1, "x")}))
	ctx, cancel := context.WithCancel(context.Background())
	purged := make(chan int64, 10)
	done := make(chan error, 1)
	go func() {
		done <- RunLedgerPurge(ctx, l, inbox.PurgeSchedule{Horizon: time.Nanosecond, Every: time.Millisecond, Logger: discardLogger(),
			NowFunc: func() time.Time { return time.Now().Add(time.Hour) },
			PurgedFunc: func(n int64, _ error) {
				select {
				case purged <- n:
				default:
				}
			}})
	}()
	require.Equal(t, int64(1), <-purged)
	cancel()
	require.NoError(t, <-done)
	high, err := l.HighWater(context.Background(), "c")
	require.NoError(t, err)
	require.Zero(t, high, "the high-water mark goes with the rows, as in SQLLedger")
}

// A ledger finds the conversations where a user handed off requests and no other user has a
// row (a held conversation that has no session), and counts what DeleteUser then deletes.
func TestLedgerUserConversations(t *testing.T) {
	t.Parallel()
	for name, open := range ledgerOpeners() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			led := open(t)
			l := led.(LedgerUserEraser)
			ctx := context.Background()
			record := func(conv, user string, seq int64) {
				env := Envelope{Request: request(conv, seq, "text")}
				env.Request.UserID = user
				require.NoError(t, led.Record(ctx, env))
			}
			record("c-held", "u-1", 2)
			record("c-held", "u-1", 3)
			record("c-mine", "u-1", 1)
			record("c-theirs", "u-2", 1)
			record("c-theirs", "u-1", 2) // a stranger's request in u-2's conversation
			got, err := l.UserConversations(ctx, "u-1")
			require.NoError(t, err)
			require.Equal(t, []string{"c-held", "c-mine"}, got)
			n, err := l.CountUser(ctx, "u-1", got)
			require.NoError(t, err)
			require.Equal(t, int64(4), n, "its three hand-offs and the stranger's one")
			again, err := l.CountUser(ctx, "u-1", got)
			require.NoError(t, err)
			require.Equal(t, n, again, "counting deletes nothing")
			deleted, err := l.DeleteUser(ctx, "u-1", got)
			require.NoError(t, err)
			require.Equal(t, n, deleted)
			rows, err := led.Range(ctx, "c-theirs", 0, 10)
			require.NoError(t, err)
			require.Len(t, rows, 1, "u-2's hand-off stays")
			_, err = l.UserConversations(ctx, "")
			require.Error(t, err)
		})
	}
}
