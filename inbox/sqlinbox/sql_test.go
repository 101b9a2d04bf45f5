package sqlinbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

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
