package turnotel_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
	"github.com/turnstile-go/turnstile/internal/sqltest"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/session/sqlsession"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turn/turnotel"
)

// The instrumented Runner over SQL stores on one database still appends the turn and
// completes the inbox in one transaction (the decorators keep session.TxAppender and
// inbox.TxCompleter): the inbox.Complete span is a child of session.Append. Over the memory
// stores it is a sibling. The Runner given is not changed.
func TestRunnerKeepsTheJointTransaction(t *testing.T) {
	t.Parallel()
	db := sqltest.SQLiteFile(t)
	sessions, err := sqlsession.New(db, sqlsession.SQLite, sqlsession.Options{})
	require.NoError(t, err)
	require.NoError(t, sessions.Migrate(context.Background()))
	ib, err := sqlinbox.New(db, sqlinbox.SQLite, sqlinbox.Options{})
	require.NoError(t, err)
	require.NoError(t, ib.Migrate(context.Background()))

	for _, tc := range []struct {
		name     string
		sessions session.Store
		inbox    inbox.Inbox
		joint    bool
	}{
		{"sql", sessions, ib, true},
		{"memory", session.NewMemoryStore(), inbox.NewMemoryInbox(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exp := tracetest.NewInMemoryExporter()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
			model := turn.ModelFunc(func(_ context.Context, in turn.Input) (turn.Output, error) {
				return turn.Output{Events: []session.Event{{Text: "ok"}}}, nil
			})
			r := &turn.Runner{Model: model, Sessions: tc.sessions, Inbox: tc.inbox}
			traced := turnotel.Runner(r, turnotel.Options{TracerProvider: tp})
			require.NotSame(t, r, traced)
			require.Equal(t, tc.sessions, r.Sessions, "the Runner given is not changed")
			req := turn.Request{Schema: turn.SchemaVersion, ID: uuid.NewString(), ConversationID: "c-" + tc.name, UserID: "u", Text: "hi"}
			_, err := traced.Run(context.Background(), req)
			require.NoError(t, err)

			byName := map[string]tracetest.SpanStub{}
			for _, s := range exp.GetSpans() {
				byName[s.Name] = s
			}
			for _, n := range []string{"inbox.Begin", "session.Get", "session.Create", "model.Respond", "session.Append", "inbox.Complete"} {
				require.Contains(t, byName, n)
			}
			appendSpan, complete := byName["session.Append"], byName["inbox.Complete"]
			require.Equal(t, tc.joint, complete.Parent.SpanID() == appendSpan.SpanContext.SpanID(),
				"inbox.Complete inside session.Append's transaction: %v", tc.joint)
			require.Equal(t, r, turnotel.Runner(r, turnotel.Options{}), "telemetry off: the same Runner")
		})
	}
}

// Wrapped stores keep the Location of the stores they wrap, which a replay compares with
// production's stores to refuse writing there; a store without one gives "".
func TestWrappedStoresKeepTheirLocation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := sqltest.SQLiteFile(t)
	sessions, err := sqlsession.New(db, sqlsession.SQLite, sqlsession.Options{})
	require.NoError(t, err)
	ib, err := sqlinbox.New(db, sqlinbox.SQLite, sqlinbox.Options{})
	require.NoError(t, err)
	o := turnotel.Options{TracerProvider: sdktrace.NewTracerProvider()}
	type locator interface {
		Location(ctx context.Context) (string, error)
	}
	for name, pair := range map[string][2]any{
		"sessions": {sessions, turnotel.Sessions(sessions, o)},
		"inbox":    {ib, turnotel.Inbox(ib, o)},
	} {
		require.NotSame(t, pair[0], pair[1], "%s: wrapped", name)
		want, err := pair[0].(locator).Location(ctx)
		require.NoError(t, err)
		require.NotEmpty(t, want)
		wrapped, ok := pair[1].(locator)
		require.True(t, ok, name)
		got, err := wrapped.Location(ctx)
		require.NoError(t, err)
		require.Equal(t, want, got, name)
	}
	loc, err := turnotel.Inbox(inbox.NewMemoryInbox(), o).(locator).Location(ctx)
	require.NoError(t, err)
	require.Empty(t, loc)
}

// A store wrapped for tracing keeps its bulk deletes (session.Retention), on the plain and on
// the transactional wrapper, and gains none it lacks.
func TestWrappedSessionsKeepRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o := turnotel.Options{TracerProvider: sdktrace.NewTracerProvider()}
	sqlStore, err := sqlsession.New(sqltest.SQLiteFile(t), sqlsession.SQLite, sqlsession.Options{})
	require.NoError(t, err)
	require.NoError(t, sqlStore.Migrate(ctx))
	for name, s := range map[string]session.Store{"memory": session.NewMemoryStore(), "sqlite": sqlStore} {
		key := session.Key{App: "a", User: "u-1", Conversation: "c-1"}
		_, err := s.Create(ctx, key, nil)
		require.NoError(t, err, name)
		wrapped, ok := turnotel.Sessions(s, o).(session.Retention)
		require.True(t, ok, "%s: the wrapper implements session.Retention", name)
		n, err := wrapped.DeleteIdle(ctx, "a", time.Now().Add(-time.Hour))
		require.NoError(t, err, name)
		require.Zero(t, n, "%s: nothing idle for an hour", name)
		n, err = wrapped.DeleteUser(ctx, "a", "u-1")
		require.NoError(t, err, name)
		require.EqualValues(t, 1, n, name)
		_, err = s.Get(ctx, key, 0)
		require.ErrorIs(t, err, session.ErrNotFound, "%s: deleted in the wrapped store", name)
	}
	_, ok := turnotel.Sessions(noRetention{session.NewMemoryStore()}, o).(session.Retention)
	require.False(t, ok, "over a store without bulk deletes the wrapper has none either")
	_, ok = turnotel.Sessions(sqlStore, o).(session.TxAppender)
	require.True(t, ok, "the SQL store keeps its joint transaction beside its bulk deletes")
}

// noRetention is a Store without session.Retention.
type noRetention struct{ session.Store }

// A Runner wrapped for tracing still erases a user: turn.Retention.DeleteUser looks through
// the wrappers (Unwrap) for the inbox's Eraser and the sessions' UserLister.
func TestRetentionDeleteUserThroughWrappers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := turnotel.Runner(&turn.Runner{Model: turn.ModelFunc(func(context.Context, turn.Input) (turn.Output, error) {
		return turn.Output{Events: []session.Event{{Text: "ok"}}}, nil
	}), Sessions: session.NewMemoryStore(), Inbox: inbox.NewMemoryInbox()}, turnotel.Options{TracerProvider: sdktrace.NewTracerProvider()})
	req := turn.Request{Schema: turn.SchemaVersion, ID: uuid.NewString(), ConversationID: "c-1", UserID: "u-1", Text: "hi"}
	_, err := r.Run(ctx, req)
	require.NoError(t, err)
	d, err := turn.NewRetention(r).DeleteUser(ctx, "u-1")
	require.NoError(t, err)
	require.Equal(t, turn.Deleted{Inbox: 1, Sessions: 1}, d)
	_, err = r.Inbox.Get(ctx, r.InboxKey(req))
	require.ErrorIs(t, err, inbox.ErrNotFound)
}
