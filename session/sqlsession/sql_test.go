package sqlsession_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
	"github.com/turnstile-go/turnstile/internal/sqldialect"
	"github.com/turnstile-go/turnstile/internal/sqltest"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/session/sqlsession"
)

func newKey(t testing.TB) session.Key {
	return session.Key{App: "app", User: "user-" + sqltest.ID(t), Conversation: "conv-" + sqltest.ID(t)}
}

func turnOf(req string, n int) session.Turn {
	tr := session.Turn{RequestID: req}
	for i := range n {
		tr.Events = append(tr.Events, session.Event{ID: fmt.Sprintf("%s-%d", req, i), Author: "assistant", Text: fmt.Sprintf("%s %d", req, i)})
	}
	return tr
}

func requireRetryable(t testing.TB, err error) {
	t.Helper()
	require.Error(t, err)
	var r interface{ Retryable() bool }
	require.True(t, errors.As(err, &r), "error is not retryable: %v (%T)", err, errors.Unwrap(err))
	require.True(t, r.Retryable())
	for _, sentinel := range []error{session.ErrConflict, session.ErrNotFound, session.ErrExists, session.ErrOwnerMismatch, session.ErrInvalid} {
		require.NotErrorIs(t, err, sentinel)
	}
}

func countRows(t testing.TB, db *sql.DB, s *sqlsession.Store, d sqlsession.Dialect, table, where string, args ...any) int {
	t.Helper()
	dl, err := sqldialect.For(d, s.TablePrefix())
	require.NoError(t, err)
	var n int
	require.NoError(t, db.QueryRow(dl.Query("SELECT COUNT(*) FROM {p}"+table+" WHERE "+where), args...).Scan(&n))
	return n
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	db := sqltest.SQLiteMemory(t)
	for _, prefix := range []string{"a;drop table x;", "1abc", "has space", "dash-ed", "ünï", "a\"b", "x2345678901234567890123456789012345"} {
		_, err := sqlsession.New(db, sqlsession.SQLite, sqlsession.Options{TablePrefix: prefix})
		require.Error(t, err, "prefix %q", prefix)
	}
	for _, prefix := range []string{"", "a", "_x_", "App_2_"} {
		s, err := sqlsession.New(db, sqlsession.SQLite, sqlsession.Options{TablePrefix: prefix})
		require.NoError(t, err, "prefix %q", prefix)
		if prefix == "" {
			require.Equal(t, sqlsession.DefaultTablePrefix, s.TablePrefix())
		}
	}
	_, err := sqlsession.New(db, "mysql", sqlsession.Options{})
	require.Error(t, err)
	_, err = sqlsession.New(nil, sqlsession.SQLite, sqlsession.Options{})
	require.Error(t, err)
}

// TestGetOrCreateRace: 20 workers get-or-create one conversation: one row, one session, no error.
func TestGetOrCreateRace(t *testing.T) {
	t.Parallel()
	for _, db := range sqltest.DBs {
		t.Run(db.Name, func(t *testing.T) {
			t.Parallel()
			s, sqlDB := newStore(t, db)
			ctx := context.Background()
			key := newKey(t)
			var (
				wg       sync.WaitGroup
				mu       sync.Mutex
				sessions []session.Session
				errs     []error
			)
			start := make(chan struct{})
			for range 20 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					sess, err := s.Create(ctx, key, []byte(`{"n":0}`))
					if errors.Is(err, session.ErrExists) {
						sess, err = s.Get(ctx, key, 20)
					}
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						errs = append(errs, err)
						return
					}
					sessions = append(sessions, sess)
				}()
			}
			close(start)
			wg.Wait()
			require.Empty(t, errs)
			require.Len(t, sessions, 20)
			for _, sess := range sessions {
				require.Equal(t, key, sess.Key)
				require.True(t, sessions[0].CreatedAt.Equal(sess.CreatedAt))
			}
			require.Equal(t, 1, countRows(t, sqlDB, s, dialectOf(db), "sessions", "conversation = $1", key.Conversation))
		})
	}
}

// TestTwoAppenders: two writers at one expected version: one wins, the other gets
// ErrConflict, and the history holds the winner's events only, in order.
func TestTwoAppenders(t *testing.T) {
	t.Parallel()
	for _, db := range sqltest.DBs {
		t.Run(db.Name, func(t *testing.T) {
			t.Parallel()
			s, sqlDB := newStore(t, db)
			ctx := context.Background()
			key := newKey(t)
			_, err := s.Create(ctx, key, nil)
			require.NoError(t, err)
			for round := range 10 {
				version := int64(round)
				turns := []session.Turn{turnOf(fmt.Sprintf("a%d", round), 150), turnOf(fmt.Sprintf("b%d", round), 150)}
				errs := make([]error, 2)
				var wg sync.WaitGroup
				for i := range 2 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						_, errs[i] = s.Append(ctx, key, version, turns[i])
					}()
				}
				wg.Wait()
				winner := 0
				if errs[0] != nil {
					winner = 1
				}
				require.NoError(t, errs[winner], "round %d", round)
				require.ErrorIs(t, errs[1-winner], session.ErrConflict, "round %d", round)

				got, err := s.FindTurn(ctx, key, turns[winner].RequestID)
				require.NoError(t, err)
				require.Len(t, got, 150)
				for i, e := range got {
					require.EqualValues(t, int64(round*150+i+1), e.Seq, "the winner's events are contiguous")
				}
				_, err = s.FindTurn(ctx, key, turns[1-winner].RequestID)
				require.ErrorIs(t, err, session.ErrNotFound)
			}
			sess, err := s.Get(ctx, key, 0)
			require.NoError(t, err)
			require.EqualValues(t, 10, sess.Version)
			require.EqualValues(t, 1500, sess.EventCount)
			require.Equal(t, 1500, countRows(t, sqlDB, s, dialectOf(db), "events", "request_id <> ''"))
		})
	}
}

// TestMigrateConcurrently: Migrate from 4 goroutines at once, sessions and inbox sharing the
// version table, on one pool and (SQLite file) on pools of their own like separate processes.
func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	for _, db := range sqltest.DBs {
		t.Run(db.Name, func(t *testing.T) {
			t.Parallel()
			sqlDB := db.Open(t)
			prefix := sqltest.Prefix(t, sqlDB, db.Postgres)
			pools := []*sql.DB{sqlDB, sqlDB, sqlDB, sqlDB}
			if db.Name == "sqlite-file" {
				path := filepath.Join(t.TempDir(), "shared.db")
				for i := range pools {
					p, err := sql.Open("sqlite", "file:"+path+"?"+sqltest.SQLitePragmas+"&_pragma=journal_mode(WAL)")
					require.NoError(t, err)
					t.Cleanup(func() { p.Close() })
					pools[i] = p
				}
			}
			migrate := func(i int) error {
				if i%2 == 0 {
					s, err := sqlsession.New(pools[i], dialectOf(db), sqlsession.Options{TablePrefix: prefix})
					require.NoError(t, err)
					return s.Migrate(context.Background())
				}
				b, err := sqlinbox.New(pools[i], sqlinbox.Dialect(dialectOf(db)), sqlinbox.Options{TablePrefix: prefix})
				require.NoError(t, err)
				return b.Migrate(context.Background())
			}
			for round := range 2 { // the second round finds everything done
				errs := make([]error, 4)
				var wg sync.WaitGroup
				for i := range 4 {
					wg.Add(1)
					go func() { defer wg.Done(); errs[i] = migrate(i) }()
				}
				wg.Wait()
				for i, err := range errs {
					require.NoError(t, err, "round %d migrator %d", round, i)
				}
			}
			s, err := sqlsession.New(pools[0], dialectOf(db), sqlsession.Options{TablePrefix: prefix})
			require.NoError(t, err)
			// One row per schema version, each applied once: the sessions' two, the inbox's three
			// (v3 added the step journal and the outbox).
			require.Equal(t, 2, countRows(t, pools[0], s, dialectOf(db), "schema_version", "component = 'sessions'"))
			require.Equal(t, 3, countRows(t, pools[0], s, dialectOf(db), "schema_version", "component = 'inbox'"))
			// Four goroutines on one pool, sessions only.
			var wg sync.WaitGroup
			errs := make([]error, 4)
			for i := range 4 {
				wg.Add(1)
				go func() { defer wg.Done(); errs[i] = s.Migrate(context.Background()) }()
			}
			wg.Wait()
			for _, err := range errs {
				require.NoError(t, err)
			}
			require.Equal(t, 2, countRows(t, pools[0], s, dialectOf(db), "schema_version", "component = 'sessions'"))
			key := newKey(t)
			_, err = s.Create(context.Background(), key, nil)
			require.NoError(t, err)
		})
	}
}

// TestPostgresKilledMidAppend: the append's connection is killed (pg_terminate_backend) inside
// its transaction. The error is retryable, and the turn is stored once or not at all: a retry
// at the same version lands it exactly once.
func TestPostgresKilledMidAppend(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		stage    string
		inFlight bool // kill while a statement of the transaction runs, not between two
	}{{"bumped", false}, {"inserted", false}, {"bumped", true}} {
		stage := c.stage
		t.Run(fmt.Sprintf("%s/in-flight=%v", c.stage, c.inFlight), func(t *testing.T) {
			t.Parallel()
			pg := sqltest.PostgresDB
			s, sqlDB := newStore(t, pg)
			ctx := context.Background()
			key := newKey(t)
			_, err := s.Create(ctx, key, []byte(`"before"`))
			require.NoError(t, err)
			var killed atomic.Bool
			sqlsession.SetAppendHook(s, func(ctx context.Context, at string, tx sqldialect.Querier) {
				if at != stage || killed.Swap(true) {
					return
				}
				var pid int
				require.NoError(t, tx.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid))
				kill := func() { // t.Errorf, not require: it may run on another goroutine
					var ok bool
					if err := sqlDB.QueryRowContext(ctx, "SELECT pg_terminate_backend($1)", pid).Scan(&ok); err != nil || !ok {
						t.Errorf("pg_terminate_backend(%d) = %v, %v", pid, ok, err)
					}
				}
				if c.inFlight {
					// Kill the backend once it sleeps in a statement of this transaction.
					done := make(chan struct{})
					go func() {
						defer close(done)
						for range 500 {
							var n int
							if err := sqlDB.QueryRowContext(ctx, "SELECT COUNT(*) FROM pg_stat_activity WHERE pid = $1 AND state = 'active' AND query LIKE '%pg_sleep%'", pid).Scan(&n); err != nil || n > 0 {
								break
							}
							time.Sleep(10 * time.Millisecond)
						}
						kill()
					}()
					_, err := tx.ExecContext(ctx, "SELECT pg_sleep(30)")
					t.Logf("sleeping statement: %v", err)
					<-done
					return
				}
				kill()
				// pg_terminate_backend signals; wait until the backend is gone.
				deadline := time.Now().Add(10 * time.Second)
				for time.Now().Before(deadline) {
					var n int
					require.NoError(t, sqlDB.QueryRowContext(ctx, "SELECT COUNT(*) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&n))
					if n == 0 {
						return
					}
					time.Sleep(10 * time.Millisecond)
				}
				t.Errorf("backend %d still there after pg_terminate_backend", pid)
			})
			tr := turnOf("killed-"+stage, 5)
			tr.State = []byte(`"after"`)
			_, err = s.Append(ctx, key, 0, tr)
			require.True(t, killed.Load())
			t.Logf("append error: %v", err)
			requireRetryable(t, err)

			sess, err := s.Get(ctx, key, 10)
			require.NoError(t, err, "the pool recovers from the killed connection")
			switch sess.Version {
			case 0: // not at all: the retry lands it
				require.Empty(t, sess.Events)
				require.Equal(t, `"before"`, string(sess.State))
				ap, err := s.Append(ctx, key, 0, tr)
				require.NoError(t, err)
				require.False(t, ap.Duplicate)
			case 1: // once (the commit got through before the kill)
			default:
				t.Fatalf("version %d after one append", sess.Version)
			}
			sess, err = s.Get(ctx, key, 10)
			require.NoError(t, err)
			require.EqualValues(t, 1, sess.Version)
			require.Len(t, sess.Events, 5)
			require.Equal(t, `"after"`, string(sess.State))
			ap, err := s.Append(ctx, key, 1, tr)
			require.NoError(t, err)
			require.True(t, ap.Duplicate, "the turn is stored once")
		})
	}
}

// TestSQLiteBusyIsRetryable: without a busy timeout, a writer that finds the database locked
// gets SQLITE_BUSY at once, which must come back retryable.
func TestSQLiteBusyIsRetryable(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "busy.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)") // no busy_timeout
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	s, err := sqlsession.New(db, sqlsession.SQLite, sqlsession.Options{})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, s.Migrate(ctx))
	key := newKey(t)
	_, err = s.Create(ctx, key, nil)
	require.NoError(t, err)

	holder, err := db.Conn(ctx)
	require.NoError(t, err)
	defer holder.Close()
	_, err = holder.ExecContext(ctx, "BEGIN IMMEDIATE")
	require.NoError(t, err)

	_, err = s.Append(ctx, key, 0, turnOf("r1", 1))
	t.Logf("append error: %v", err)
	requireRetryable(t, err)
	_, err = s.Create(ctx, newKey(t), nil)
	requireRetryable(t, err)

	_, err = holder.ExecContext(ctx, "ROLLBACK")
	require.NoError(t, err)
	_, err = s.Append(ctx, key, 0, turnOf("r1", 1))
	require.NoError(t, err, "the retry succeeds once the lock is free")
}

// TestBigTurn: a turn of more events than one INSERT carries.
func TestBigTurn(t *testing.T) {
	t.Parallel()
	for _, db := range sqltest.DBs {
		t.Run(db.Name, func(t *testing.T) {
			t.Parallel()
			s, _ := newStore(t, db)
			ctx := context.Background()
			key := newKey(t)
			_, err := s.Create(ctx, key, nil)
			require.NoError(t, err)
			mustAppendN(t, s, key, 0, turnOf("small", 3))
			ap := mustAppendN(t, s, key, 1, turnOf("big", 250))
			require.EqualValues(t, 253, ap.Events[249].Seq)
			got, err := s.FindTurn(ctx, key, "big")
			require.NoError(t, err)
			require.Len(t, got, 250)
			for i, e := range got {
				require.EqualValues(t, i+4, e.Seq)
				require.Equal(t, fmt.Sprintf("big-%d", i), e.ID)
			}
			sess, err := s.Get(ctx, key, 1000)
			require.NoError(t, err)
			require.Len(t, sess.Events, 253)
		})
	}
}

func mustAppendN(t testing.TB, s session.Store, key session.Key, v int64, tr session.Turn) session.Appended {
	t.Helper()
	ap, err := s.Append(context.Background(), key, v, tr)
	require.NoError(t, err)
	return ap
}

// TestDeleteIdleSparesASessionActiveMeanwhile: an idle session that a turn updates while
// DeleteIdle waits for its row lock is kept: PostgreSQL re-checks the DELETE's own WHERE on
// the updated row (EvalPlanQual, READ COMMITTED), which must therefore say "idle" itself.
func TestDeleteIdleSparesASessionActiveMeanwhile(t *testing.T) {
	t.Parallel()
	s, db := newStore(t, sqltest.PostgresDB)
	ctx := context.Background()
	k := newKey(t)
	_, err := s.Create(ctx, k, nil)
	require.NoError(t, err)
	_, err = s.Append(ctx, k, 0, turnOf("req-1", 1))
	require.NoError(t, err)
	idle, err := s.Get(ctx, k, 0)
	require.NoError(t, err)
	cutoff := idle.UpdatedAt.Add(time.Millisecond)

	// A turn of the session holds its row: the update of its append, not committed yet.
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer tx.Rollback()
	_, err = tx.ExecContext(ctx, fmt.Sprintf(`UPDATE %ssessions SET version = version + 1, updated_at = $3
		WHERE app = $1 AND conversation = $2`, s.TablePrefix()), k.App, k.Conversation, cutoff.Add(time.Hour))
	require.NoError(t, err)

	deleted := make(chan int64, 1)
	go func() {
		n, err := s.DeleteIdle(ctx, k.App, cutoff)
		if err != nil {
			n = -1
		}
		deleted <- n
	}()
	sqltest.WaitForLockWait(t, db, "DELETE FROM "+s.TablePrefix()+"sessions")
	require.NoError(t, tx.Commit())

	require.Zero(t, <-deleted, "the session became active: not idle")
	sess, err := s.Get(ctx, k, 10)
	require.NoError(t, err, "the active session survived")
	require.EqualValues(t, 2, sess.Version)
}
