package chaos

import (
	"context"
	"database/sql"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/internal/sqltest"
	"github.com/turnstile-go/turnstile/turn"
)

// The agent on the PostgreSQL stores, as a member runs it: a request whose refund step fails
// its first attempt runs that step again with its key on the next, and neither model step;
// the deferred email waits for the commit, and the relay delivers it once. A request whose
// session store panics after its steps leaves no intent.
func TestModelRunsEachStepOnceAndDefersTheEmail(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a := childArgs{DSN: sqltest.PostgresDSN(), AppName: "chaos-model-test", MaxInFlight: 2}
	db, prefix, st := modelTables(ctx, t, &a)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	r := &turn.Runner{Model: newModel(st.db, prefix, modelFaults{Seed: 1, FailShare: 1}),
		Sessions: st.sessions, Inbox: st.inbox, Logger: log}

	req := func(text string) turn.Request {
		return turn.Request{Schema: turn.SchemaVersion, ID: uuid.NewString(), ConversationID: "conv-001", UserID: "user-001", Text: text}
	}
	ok := req(userText("conv-001", 1, kindValid))
	_, err := r.Run(ctx, ok)
	require.ErrorContains(t, err, "HTTP 500", "the first attempt fails after its refund")
	pending, err := st.inbox.Intents(ctx, inbox.IntentFilter{Status: inbox.IntentPending})
	require.NoError(t, err)
	require.Empty(t, pending, "no intent before the commit")
	res, err := r.Run(ctx, ok)
	require.NoError(t, err)
	require.Equal(t, replyText(ok.Text, ""), res.Text)

	// Its refund fails the first attempt too; the second panics in the store after its steps.
	panicky := req(userText("conv-001", 2, kindPanicStore))
	for range 2 {
		func() {
			defer func() { _ = recover() }()
			_, _ = r.Run(ctx, panicky)
		}()
	}

	left, err := drainOutbox(ctx, db, st.inbox, prefix, 30*time.Second, log)
	require.NoError(t, err)
	require.Zero(t, left)
	tb, err := readTables(ctx, db, prefix)
	require.NoError(t, err)
	require.Equal(t, map[string]int{ok.ID: 1, panicky.ID: 1}, tb.refunds)
	require.Equal(t, 2+2, tb.refundCalls, "each failed refund step ran again, under its key")
	require.Equal(t, map[stepRun]int{{ok.ID, 1}: 1, {ok.ID, 4}: 1, {panicky.ID, 1}: 1, {panicky.ID, 4}: 1}, tb.steps,
		"each model step ran once, whatever ran again after it")
	require.Equal(t, map[string]int{ok.ID: 1}, tb.emails, "the committed turn's email, and only its")
	require.Equal(t, 1, tb.emailCalls)
	require.Empty(t, tb.deadIntents)
}

// The members' Runner compacts with the model as its summarizer, on the PostgreSQL stores:
// eight turns of a conversation compact in the fifth and the eighth, each turn failing its
// first attempt after the compaction (the refund's HTTP 500) and running again, which takes
// the compaction from the journal (one execution each); the checker's compaction rules hold
// on what is stored, and the compacted turns' model steps come one later.
func TestModelCompactsOnceAJournaledStep(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a := childArgs{DSN: sqltest.PostgresDSN(), AppName: "chaos-compaction-test", MaxInFlight: 2, Faults: modelFaults{Seed: 1, FailShare: 1}}
	db, prefix, st := modelTables(ctx, t, &a)
	r := newRunner(a, st, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.Equal(t, chaosHistoryLimit, r.HistoryLimit)

	var ids []string
	prev := ""
	for n := 1; n <= 8; n++ {
		req := turn.Request{Schema: turn.SchemaVersion, ID: uuid.NewString(), ConversationID: "conv-001", UserID: "user-001", Text: userText("conv-001", n, kindValid)}
		_, err := r.Run(ctx, req)
		require.ErrorContains(t, err, "HTTP 500", "turn %d: the first attempt fails after its refund", n)
		res, err := r.Run(ctx, req)
		require.NoError(t, err)
		require.Equal(t, replyText(req.Text, prev), res.Text, "turn %d: the reply quotes the message before it, in view after the compaction", n)
		ids, prev = append(ids, req.ID), req.Text
	}
	events, err := readHistories(ctx, db, prefix)
	require.NoError(t, err)
	tb, err := readTables(ctx, db, prefix)
	require.NoError(t, err)
	require.Equal(t, map[stepRun]int{{ids[4], 1}: 1, {ids[7], 1}: 1}, tb.compactions, "one execution per compaction: the second attempt took it from the journal")
	require.Len(t, tb.deliveries, 8, "every request delivered twice")
	require.Equal(t, 2, tb.deliveries[ids[4]])
	var bad problems
	f := &Figures{}
	compacted := checkCompactions(events, tb, &bad, f)
	require.Zero(t, bad.n, "%v", bad.examples)
	require.Equal(t, 2, f.Compactions)
	require.Equal(t, map[string]bool{ids[4]: true, ids[7]: true}, compacted)
	for i, id := range ids {
		shift := 0
		if compacted[id] {
			shift = 1
		}
		for _, ord := range modelOrdinals {
			require.Equal(t, 1, tb.steps[stepRun{id, ord + shift}], "turn %d: model step %d ran once", i+1, ord+shift)
		}
	}
}

// modelTables makes the run's tables under a prefix of the test's own (set in a) and opens a
// child's stores on them, as a member does; the test skips, or fails under CI=true, when
// PostgreSQL is unreachable.
func modelTables(ctx context.Context, t *testing.T, a *childArgs) (*sql.DB, string, *memberStores) {
	t.Helper()
	sqltest.Postgres(t)
	db, prefix, err := setupTables(ctx, sqltest.PostgresDSN())
	require.NoError(t, err)
	t.Cleanup(func() { dropTables(db, prefix); db.Close() })
	a.Prefix = prefix
	st, err := openStores(*a)
	require.NoError(t, err)
	t.Cleanup(func() { st.db.Close() })
	return db, prefix, st
}
