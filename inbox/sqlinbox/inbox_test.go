package sqlinbox_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/inbox/inboxtest"
	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
	"github.com/turnstile-go/turnstile/internal/sqltest"
)

func dialectOf(db sqltest.DB) sqlinbox.Dialect {
	if db.Postgres {
		return sqlinbox.PostgreSQL
	}
	return sqlinbox.SQLite
}

// newInbox opens a migrated inbox with tables of its own on db.
func newInbox(t testing.TB, db sqltest.DB, opts sqlinbox.Options) (*sqlinbox.Inbox, *sql.DB) {
	t.Helper()
	sqlDB := db.Open(t)
	opts.TablePrefix = sqltest.Prefix(t, sqlDB, db.Postgres)
	b, err := sqlinbox.New(sqlDB, dialectOf(db), opts)
	require.NoError(t, err)
	require.NoError(t, b.Migrate(context.Background()))
	return b, sqlDB
}

func TestConformance(t *testing.T) {
	t.Parallel()
	for _, db := range sqltest.DBs {
		t.Run(db.Name, func(t *testing.T) {
			t.Parallel()
			inboxtest.Run(t, func(t *testing.T) inbox.Inbox {
				b, _ := newInbox(t, db, sqlinbox.Options{})
				return b
			})
		})
	}
}

// TestRelay runs inboxtest.RunRelay on the SQL outboxes.
func TestRelay(t *testing.T) {
	t.Parallel()
	for _, db := range sqltest.DBs {
		t.Run(db.Name, func(t *testing.T) {
			t.Parallel()
			inboxtest.RunRelay(t, func(t *testing.T) inbox.Outbox {
				b, _ := newInbox(t, db, sqlinbox.Options{})
				return b
			})
		})
	}
}

// batching is what the batched variants of the tests use: batches of up to 32 writes, sent
// 2 ms after their first (long enough on a loaded machine for concurrent callers to meet).
var batching = sqlinbox.Batching{Size: 32, Wait: 2 * time.Millisecond}

// TestBatchedConformance runs the suite against inboxes whose Begins are batched.
func TestBatchedConformance(t *testing.T) {
	t.Parallel()
	for _, db := range sqltest.DBs {
		t.Run(db.Name, func(t *testing.T) {
			t.Parallel()
			inboxtest.Run(t, func(t *testing.T) inbox.Inbox {
				b, _ := newInbox(t, db, sqlinbox.Options{Batch: batching})
				return b
			})
		})
	}
}

// TestBatchedSuite runs inboxtest.RunBatched on batched inboxes, broken by renaming the table.
func TestBatchedSuite(t *testing.T) {
	t.Parallel()
	for _, db := range sqltest.DBs {
		t.Run(db.Name, func(t *testing.T) {
			t.Parallel()
			inboxtest.RunBatched(t, func(t *testing.T) inboxtest.Batched {
				b, sqlDB := newInbox(t, db, sqlinbox.Options{Batch: batching})
				return inboxtest.Batched{Inbox: b, Break: func(t *testing.T) func() {
					return sqltest.BreakTable(t, sqlDB, b.TablePrefix()+"inbox")
				}}
			})
		})
	}
}
