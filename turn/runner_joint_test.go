package turn_test

import (
	"context"
	"database/sql"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
	"github.com/turnstile-go/turnstile/internal/sqltest"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/session/sqlsession"
	"github.com/turnstile-go/turnstile/turn"
)

// sqlBundle is a Runner on SQLite stores that can take the joint path (one transaction for
// the session append and the inbox completion).
type sqlBundle struct {
	model    *echoModel
	sessions *sqlsession.Store
	inbox    *countingInbox
	runner   *turn.Runner
}

// countingInbox counts Complete calls, the separate path's; CompleteTx, the joint path's,
// goes to the embedded Inbox. Once c is dead, its writes fail as a dead process's would.
type countingInbox struct {
	*sqlinbox.Inbox
	c         *crash
	completes atomic.Int64
}

func (b *countingInbox) Complete(ctx context.Context, id string, res []byte) error {
	b.completes.Add(1)
	return b.Inbox.Complete(ctx, id, res)
}

func (b *countingInbox) Fail(ctx context.Context, id string, f inbox.Failure) error {
	if err := b.c.check(); err != nil {
		return err
	}
	return b.Inbox.Fail(ctx, id, f)
}

// setupSQL builds the Runner's stores on sessionsDB and inboxDB: one *sql.DB for the joint
// path, two for the separate one.
func setupSQL(t *testing.T, sessionsDB, inboxDB *sql.DB) *sqlBundle {
	t.Helper()
	ctx := context.Background()
	s, err := sqlsession.New(sessionsDB, sqlsession.SQLite, sqlsession.Options{})
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))
	b, err := sqlinbox.New(inboxDB, sqlinbox.SQLite, sqlinbox.Options{})
	require.NoError(t, err)
	require.NoError(t, b.Migrate(ctx))
	bundle := &sqlBundle{model: &echoModel{}, sessions: s, inbox: &countingInbox{Inbox: b, c: &crash{}}}
	bundle.runner = &turn.Runner{Model: bundle.model, Sessions: s, Inbox: bundle.inbox, TurnTimeout: 10 * time.Second}
	return bundle
}

func TestJointPathOnOneDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := sqltest.SQLiteFile(t)
	b := setupSQL(t, db, db)
	req := newRequest("c-joint", "u-1", "hello")
	res, err := b.runner.Run(ctx, req)
	require.NoError(t, err)
	require.Equal(t, `echo "hello" after 0 events`, res.Text)
	require.Zero(t, b.inbox.completes.Load(), "the completion joined the append's transaction")

	entry, err := b.inbox.Get(ctx, b.runner.InboxKey(req))
	require.NoError(t, err)
	require.Equal(t, inbox.StatusDone, entry.Status)
	again, err := b.runner.Run(ctx, req)
	require.NoError(t, err)
	require.True(t, again.Replayed)
	again.Replayed, res.Replayed = false, false
	require.Equal(t, res, again, "the stored result is the one returned")
}

func TestSeparatePathOnTwoDatabases(t *testing.T) {
	t.Parallel()
	b := setupSQL(t, sqltest.SQLiteFile(t), sqltest.SQLiteFile(t))
	_, err := b.runner.Run(context.Background(), newRequest("c-separate", "u-1", "hello"))
	require.NoError(t, err)
	require.EqualValues(t, 1, b.inbox.completes.Load(), "two databases: two transactions")
}

// crashingTxSessions crashes the joint write at one of its stages.
type crashingTxSessions struct {
	*sqlsession.Store
	c     *crash
	stage string // "before write", "before commit", "after commit"
}

func (s *crashingTxSessions) AppendTx(ctx context.Context, key session.Key, v int64, t session.Turn, join session.JoinFunc) (session.Appended, error) {
	switch s.stage {
	case "before write":
		s.c.dead.Store(true)
		return session.Appended{}, errCrash
	case "before commit":
		return s.Store.AppendTx(ctx, key, v, t, func(ctx context.Context, tx session.SQLTx, stored []session.Event) error {
			if err := join(ctx, tx, stored); err != nil {
				return err
			}
			s.c.dead.Store(true) // the completion's statement ran; the process dies before COMMIT
			return errCrash
		})
	}
	a, err := s.Store.AppendTx(ctx, key, v, t, join)
	s.c.dead.Store(true)
	if err != nil {
		return a, err
	}
	return session.Appended{}, errCrash
}

// TestJointCrashPoints is TestCrashPoints for the joint path: a crash before, inside or after
// the one transaction, then the request run again on a fresh Runner over the same stores. The
// separate path's "after session append" (a turn stored, its request not done) cannot happen.
func TestJointCrashPoints(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		stage     string
		wantCalls int64
	}{
		{"before write", 2},  // the model ran; nothing stored: it runs again
		{"before commit", 2}, // rolled back: neither the turn nor the completion, so as above
		{"after commit", 1},  // both stored: the redelivery replays the result
	} {
		t.Run(tc.stage, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := sqltest.SQLiteFile(t)
			b := setupSQL(t, db, db)
			_, err := b.runner.Run(ctx, newRequest("c-crash", "u-1", "earlier"))
			require.NoError(t, err)
			b.model.calls.Store(0)

			doomed := *b.runner
			doomed.Sessions = &crashingTxSessions{Store: b.sessions, c: b.inbox.c, stage: tc.stage}
			req := newRequest("c-crash", "u-1", "the crashed one")
			_, err = doomed.Run(ctx, req)
			require.ErrorIs(t, err, errCrash)
			b.inbox.c.dead.Store(false) // the next member is alive

			res, err := b.runner.Run(ctx, req)
			require.NoError(t, err)
			require.Equal(t, `echo "the crashed one" after 3 events`, res.Text)
			require.Equal(t, tc.wantCalls, b.model.calls.Load())
			require.Equal(t, tc.stage == "after commit", res.Replayed)
			n, total := historyOf(t, b.sessions, b.runner.Key(req), req.ID)
			require.Equal(t, 3, n, "exactly one turn of the request")
			require.EqualValues(t, 6, total)
			require.Zero(t, b.inbox.completes.Load(), "every completion joined an append")
		})
	}
}

// A zombie that lost its partition finishes its turn after the new owner did: its joint write
// conflicts, so neither its turn nor its result is stored.
func TestJointZombieConflicts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := sqltest.SQLiteFile(t)
	b := setupSQL(t, db, db)
	req := newRequest("c-zombie", "u-1", "who wins?")

	slow := &blockingModel{entered: make(chan struct{}), release: make(chan struct{})}
	zombie := *b.runner
	zombie.Model = slow
	zombieErr := make(chan error, 1)
	go func() {
		_, err := zombie.Run(ctx, req)
		zombieErr <- err
	}()
	<-slow.entered

	res, err := b.runner.Run(ctx, req)
	require.NoError(t, err)
	close(slow.release)
	err = <-zombieErr
	require.ErrorIs(t, err, session.ErrConflict)
	require.Equal(t, turn.KindUnavailable, turn.Classify(err))

	entry, err := b.inbox.Get(ctx, b.runner.InboxKey(req))
	require.NoError(t, err)
	require.Equal(t, inbox.StatusDone, entry.Status)
	stored, err := turn.DecodeResult(entry.Result)
	require.NoError(t, err)
	require.Equal(t, res.Text, stored.Text, "the new owner's result stands")
	n, total := historyOf(t, b.sessions, b.runner.Key(req), req.ID)
	require.Equal(t, 3, n)
	require.EqualValues(t, 3, total)
}

// joinSkipper breaks the TxAppender contract: it appends without running join.
type joinSkipper struct{ *sqlsession.Store }

func (s joinSkipper) AppendTx(ctx context.Context, key session.Key, v int64, t session.Turn, _ session.JoinFunc) (session.Appended, error) {
	return s.Append(ctx, key, v, t)
}

// A store that appends without the joined completion gets an error, not a Result that the
// inbox does not hold.
func TestJointPathWithoutTheCompletionIsAnError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := sqltest.SQLiteFile(t)
	b := setupSQL(t, db, db)
	r := *b.runner
	r.Sessions = joinSkipper{b.sessions}
	req := newRequest("c-skip", "u-1", "hello")
	_, err := r.Run(ctx, req)
	require.ErrorContains(t, err, "without the inbox completion")
	entry, err := b.inbox.Get(ctx, r.InboxKey(req))
	require.NoError(t, err)
	require.Equal(t, inbox.StatusInProgress, entry.Status)
}

func TestCheckConcurrency(t *testing.T) {
	t.Parallel()
	db := sqltest.SQLiteFile(t)
	ctx := context.Background()
	s, err := sqlsession.New(db, sqlsession.SQLite, sqlsession.Options{Concurrency: 8})
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))
	b, err := sqlinbox.New(db, sqlinbox.SQLite, sqlinbox.Options{Concurrency: 8})
	require.NoError(t, err)
	r := &turn.Runner{Model: &echoModel{}, Sessions: s, Inbox: b}

	require.NoError(t, r.CheckConcurrency(8))
	err = r.CheckConcurrency(12)
	require.ErrorIs(t, err, sqlsession.ErrPoolTooSmall)
	require.ErrorContains(t, err, "Runner.Sessions cannot serve 12 turns at once")

	memory := &turn.Runner{Model: &echoModel{}, Sessions: session.NewMemoryStore(), Inbox: inbox.NewMemoryInbox()}
	require.NoError(t, memory.CheckConcurrency(1000), "memory stores have no pool")
}
