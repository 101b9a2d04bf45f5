package chaos

import (
	"context"
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
	sqltest.Postgres(t) // skips, or fails under CI=true, when PostgreSQL is unreachable
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, prefix, err := setupTables(ctx, sqltest.PostgresDSN())
	require.NoError(t, err)
	t.Cleanup(func() { dropTables(db, prefix); db.Close() })
	st, err := openStores(childArgs{DSN: sqltest.PostgresDSN(), AppName: "chaos-model-test", Prefix: prefix, MaxInFlight: 2})
	require.NoError(t, err)
	t.Cleanup(func() { st.db.Close() })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	r := &turn.Runner{Model: newModel(st.db, prefix, modelFaults{Seed: 1, FailShare: 1}),
		Sessions: st.sessions, Inbox: st.inbox, Logger: log}

	req := func(text string) turn.Request {
		return turn.Request{Schema: turn.SchemaVersion, ID: uuid.NewString(), ConversationID: "conv-001", UserID: "user-001", Text: text}
	}
	ok := req(userText("conv-001", 1, kindValid))
	_, err = r.Run(ctx, ok)
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
