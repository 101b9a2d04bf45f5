package sqlinbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
	"github.com/turnstile-go/turnstile/internal/sqltest"
)

func TestNewValidates(t *testing.T) {
	t.Parallel()
	db := sqltest.SQLiteMemory(t)
	_, err := sqlinbox.New(db, sqlinbox.SQLite, sqlinbox.Options{PurgeBatch: -1})
	require.Error(t, err)
	_, err = sqlinbox.New(db, sqlinbox.SQLite, sqlinbox.Options{TablePrefix: "x; DROP TABLE y"})
	require.Error(t, err)
	_, err = sqlinbox.New(db, "oracle", sqlinbox.Options{})
	require.Error(t, err)
	_, err = sqlinbox.New(nil, sqlinbox.PostgreSQL, sqlinbox.Options{})
	require.Error(t, err)
	b, err := sqlinbox.New(db, sqlinbox.SQLite, sqlinbox.Options{})
	require.NoError(t, err)
	require.Equal(t, sqlinbox.DefaultTablePrefix, b.TablePrefix())
}

// TestPurgeBatches: Purge goes on batch after batch until none is left, and leaves entries in
// progress alone.
func TestPurgeBatches(t *testing.T) {
	t.Parallel()
	for _, db := range sqltest.DBs {
		t.Run(db.Name, func(t *testing.T) {
			t.Parallel()
			b, _ := newInbox(t, db, sqlinbox.Options{PurgeBatch: 7})
			ctx := context.Background()
			var live []string
			for i := range 50 {
				id := fmt.Sprintf("req-%02d", i)
				_, err := b.Begin(ctx, inbox.Delivery{Key: id, Topic: "t", Offset: int64(i)})
				require.NoError(t, err)
				switch {
				case i < 21: // 21 = 3 full batches: the loop must stop on an empty one
					require.NoError(t, b.Complete(ctx, id, []byte("r")))
				case i < 42:
					require.NoError(t, b.MarkDead(ctx, id, "x"))
				default:
					live = append(live, id)
				}
			}
			n, err := b.Purge(ctx, time.Now().Add(time.Hour))
			require.NoError(t, err)
			require.EqualValues(t, 42, n)
			for _, id := range live {
				_, err := b.Get(ctx, id)
				require.NoError(t, err)
			}
			n, err = b.Purge(ctx, time.Now().Add(time.Hour))
			require.NoError(t, err)
			require.Zero(t, n)
		})
	}
}

// TestMembersBeginConcurrently: members with pools of their own (processes) Begin the same
// requests at once; every delivery counts once.
func TestMembersBeginConcurrently(t *testing.T) {
	t.Parallel()
	for _, db := range []sqltest.DB{sqltest.SQLiteFileDB, sqltest.PostgresDB} {
		t.Run(db.Name, func(t *testing.T) {
			t.Parallel()
			first, sqlDB := newInbox(t, db, sqlinbox.Options{})
			members := []*sqlinbox.Inbox{first}
			for range 3 {
				pool := sqlDB
				if !db.Postgres {
					var path string
					require.NoError(t, sqlDB.QueryRow("SELECT file FROM pragma_database_list WHERE name = 'main'").Scan(&path))
					p, err := sql.Open("sqlite", "file:"+path+"?"+sqltest.SQLitePragmas)
					require.NoError(t, err)
					t.Cleanup(func() { p.Close() })
					pool = p
				}
				m, err := sqlinbox.New(pool, dialectOf(db), sqlinbox.Options{TablePrefix: first.TablePrefix()})
				require.NoError(t, err)
				members = append(members, m)
			}
			ctx := context.Background()
			const requests, perMember = 5, 5
			var (
				wg   sync.WaitGroup
				mu   sync.Mutex
				news = map[string]int{}
				errs []error
			)
			start := make(chan struct{})
			for _, m := range members {
				for range perMember {
					for r := range requests {
						wg.Add(1)
						go func() {
							defer wg.Done()
							<-start
							e, err := m.Begin(ctx, inbox.Delivery{Key: fmt.Sprintf("r%d", r), Topic: "t"})
							mu.Lock()
							defer mu.Unlock()
							if err != nil {
								errs = append(errs, err)
							} else if e.Status == inbox.StatusNew {
								news[e.Key]++
							}
						}()
					}
				}
			}
			close(start)
			wg.Wait()
			require.Empty(t, errs)
			for r := range requests {
				id := fmt.Sprintf("r%d", r)
				require.Equal(t, 1, news[id], "%s: one StatusNew", id)
				e, err := first.Get(ctx, id)
				require.NoError(t, err)
				require.Equal(t, len(members)*perMember, e.Attempts)
			}
		})
	}
}

func TestSQLiteBusyIsRetryable(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "busy.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)") // no busy_timeout
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	b, err := sqlinbox.New(db, sqlinbox.SQLite, sqlinbox.Options{})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, b.Migrate(ctx))

	holder, err := db.Conn(ctx)
	require.NoError(t, err)
	defer holder.Close()
	_, err = holder.ExecContext(ctx, "BEGIN IMMEDIATE")
	require.NoError(t, err)
	_, err = b.Begin(ctx, inbox.Delivery{Key: "r1"})
	require.Error(t, err)
	var r interface{ Retryable() bool }
	require.True(t, errors.As(err, &r) && r.Retryable(), "not retryable: %v", err)
	require.NotErrorIs(t, err, inbox.ErrInvalid)
	_, err = holder.ExecContext(ctx, "ROLLBACK")
	require.NoError(t, err)
	_, err = b.Begin(ctx, inbox.Delivery{Key: "r1"})
	require.NoError(t, err)
}

// TestPurgeSparesAnEntryRedrivenMeanwhile: a dead entry older than the cutoff that a Redrive
// makes runnable while Purge waits for its row lock is kept. PostgreSQL re-checks only the
// DELETE's own WHERE on a row updated under it (EvalPlanQual, READ COMMITTED), not a subquery
// that picked the row from the older snapshot, so Purge must repeat the conditions there.
func TestPurgeSparesAnEntryRedrivenMeanwhile(t *testing.T) {
	t.Parallel()
	b, db := newInbox(t, sqltest.PostgresDB, sqlinbox.Options{})
	ctx := context.Background()
	const id = "req-dead"
	_, err := b.Begin(ctx, inbox.Delivery{Key: id, Topic: "t"})
	require.NoError(t, err)
	require.NoError(t, b.MarkDead(ctx, id, "poison"))
	dead, err := b.Get(ctx, id)
	require.NoError(t, err)
	cutoff := dead.UpdatedAt.Add(time.Millisecond)

	// An operator's Redrive holds the row: the statement inbox.Redrive runs, left uncommitted.
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer tx.Rollback()
	_, err = tx.ExecContext(ctx, fmt.Sprintf(`UPDATE %sinbox SET status = 'in_progress', attempts = 0, reason = '',
		redrives = '[{"reason":"poison","attempts":1,"at":"2026-01-01T00:00:00Z"}]', updated_at = $2
		WHERE request_id = $1 AND status = 'dead'`, b.TablePrefix()), id, cutoff.Add(time.Hour))
	require.NoError(t, err)

	purged := make(chan int64, 1)
	go func() {
		n, err := b.Purge(ctx, cutoff)
		if err != nil {
			n = -1
		}
		purged <- n
	}()
	// Wait until the purge blocks on the row, then let the Redrive commit.
	sqltest.WaitForLockWait(t, db, "WITH gone AS (DELETE FROM "+b.TablePrefix()+"inbox")
	require.NoError(t, tx.Commit())

	require.Zero(t, <-purged, "the re-driven entry is no longer dead: nothing to purge")
	e, err := b.Get(ctx, id)
	require.NoError(t, err, "the re-driven entry survived the purge")
	require.Equal(t, inbox.StatusInProgress, e.Status)
	require.Len(t, e.Redrives, 1)
}

// TestLocationNamesTheTablesWhateverTheDSN: the same tables reached through differently spelled
// DSNs (a symlinked, relative or dotted SQLite path; a PostgreSQL URL or keyword/value string)
// have one Location, which a replay compares to refuse production's stores; other tables have
// another.
func TestLocationNamesTheTablesWhateverTheDSN(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	location := func(driver, dsn string, d sqlinbox.Dialect, prefix string) string {
		t.Helper()
		db, err := sql.Open(driver, dsn)
		require.NoError(t, err)
		defer db.Close()
		b, err := sqlinbox.New(db, d, sqlinbox.Options{TablePrefix: prefix, Concurrency: -1})
		require.NoError(t, err)
		loc, err := b.Location(ctx)
		require.NoError(t, err, dsn)
		return loc
	}

	dir := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(dir, "data"), 0o755))
	require.NoError(t, os.Symlink(filepath.Join(dir, "data"), filepath.Join(dir, "link")))
	file := filepath.Join(dir, "data", "svc.db")
	wd, err := os.Getwd()
	require.NoError(t, err)
	rel, err := filepath.Rel(wd, file)
	require.NoError(t, err)
	want := location("sqlite", "file:"+file, sqlinbox.SQLite, "")
	require.Contains(t, want, "svc.db")
	for _, dsn := range []string{file, "file:" + filepath.Join(dir, "link", "svc.db"), "file:" + dir + "/data/../data/./svc.db",
		"file:" + rel + "?_pragma=busy_timeout(5000)"} {
		require.Equal(t, want, location("sqlite", dsn, sqlinbox.SQLite, ""), dsn)
	}
	require.NotEqual(t, want, location("sqlite", "file:"+filepath.Join(dir, "other.db"), sqlinbox.SQLite, ""))
	require.NotEqual(t, want, location("sqlite", "file:"+file, sqlinbox.SQLite, "sandbox_"))
	require.Empty(t, location("sqlite", ":memory:", sqlinbox.SQLite, ""), "an in-memory database is nobody else's")

	sqltest.Postgres(t) // skips, or fails under CI, without PostgreSQL
	cfg, err := pgconn.ParseConfig(sqltest.PostgresDSN())
	require.NoError(t, err)
	if cfg.TLSConfig != nil {
		t.Skip("the keyword/value spelling below is for a server without TLS")
	}
	kv := fmt.Sprintf("host=%s port=%d user=%s dbname=%s sslmode=disable application_name=sandbox", cfg.Host, cfg.Port, cfg.User, cfg.Database)
	if cfg.Password != "" {
		kv += " password=" + cfg.Password
	}
	pgWant := location("pgx", sqltest.PostgresDSN(), sqlinbox.PostgreSQL, "")
	require.Equal(t, pgWant, location("pgx", kv, sqlinbox.PostgreSQL, ""))
	require.NotEqual(t, pgWant, location("pgx", kv, sqlinbox.PostgreSQL, "sandbox_"))
}
