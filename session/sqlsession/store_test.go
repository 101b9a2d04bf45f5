package sqlsession_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
	"github.com/turnstile-go/turnstile/internal/sqltest"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/session/sessiontest"
	"github.com/turnstile-go/turnstile/session/sqlsession"
)

func dialectOf(db sqltest.DB) sqlsession.Dialect {
	if db.Postgres {
		return sqlsession.PostgreSQL
	}
	return sqlsession.SQLite
}

// newStore opens a migrated store with tables of its own on db.
func newStore(t testing.TB, db sqltest.DB) (*sqlsession.Store, *sql.DB) {
	t.Helper()
	sqlDB := db.Open(t)
	return newStoreOn(t, db, sqlDB, sqltest.Prefix(t, sqlDB, db.Postgres), 0), sqlDB
}

// newStoreOn builds a migrated store on sqlDB, a database of db, with the table prefix and
// Options.Concurrency given.
func newStoreOn(t testing.TB, db sqltest.DB, sqlDB *sql.DB, prefix string, concurrency int) *sqlsession.Store {
	t.Helper()
	return newStoreWith(t, db, sqlDB, sqlsession.Options{TablePrefix: prefix, Concurrency: concurrency})
}

// newStoreWith builds a migrated store on sqlDB, a database of db, with opts.
func newStoreWith(t testing.TB, db sqltest.DB, sqlDB *sql.DB, opts sqlsession.Options) *sqlsession.Store {
	t.Helper()
	s, err := sqlsession.New(sqlDB, dialectOf(db), opts)
	require.NoError(t, err)
	require.NoError(t, s.Migrate(context.Background()))
	return s
}

// TestConformance runs the suite against unbatched stores, without a cache and with one.
func TestConformance(t *testing.T) {
	t.Parallel()
	for _, db := range sqltest.DBs {
		for _, cache := range []int{0, cached} {
			t.Run(fmt.Sprintf("%s/cache=%d", db.Name, cache), func(t *testing.T) {
				t.Parallel()
				sessiontest.Run(t, func(t *testing.T) session.Store {
					sqlDB := db.Open(t)
					return newStoreWith(t, db, sqlDB, sqlsession.Options{TablePrefix: sqltest.Prefix(t, sqlDB, db.Postgres), Cache: cache})
				})
			})
		}
	}
}

// cached is the Options.Cache of the suites' cached stores (the batched ones, and one run of
// TestConformance): fewer sessions than some tests write, so that some are dropped.
const cached = 4

// newPair opens a migrated store and inbox on one *sql.DB of db, with tables of their own.
func newPair(t testing.TB, db sqltest.DB) (*sqlsession.Store, *sqlinbox.Inbox) {
	t.Helper()
	return newPairOn(t, db, db.Open(t), 0)
}

// newPairOn builds a migrated store and inbox with tables of their own on sqlDB, a database
// of db, both with the given Options.Concurrency.
func newPairOn(t testing.TB, db sqltest.DB, sqlDB *sql.DB, concurrency int) (*sqlsession.Store, *sqlinbox.Inbox) {
	t.Helper()
	return newPairWith(t, db, sqlDB, concurrency, sqlsession.Batching{})
}

// batching is what the batched variants of the tests use: batches of up to 32 writes, sent
// 2 ms after their first (long enough on a loaded machine for concurrent callers to meet).
var batching = sqlsession.Batching{Size: 32, Wait: 2 * time.Millisecond}

// newPairWith is newPairOn with both stores' Options.Batch set to batch.
func newPairWith(t testing.TB, db sqltest.DB, sqlDB *sql.DB, concurrency int, batch sqlsession.Batching) (*sqlsession.Store, *sqlinbox.Inbox) {
	t.Helper()
	prefix := sqltest.Prefix(t, sqlDB, db.Postgres)
	opts := sqlsession.Options{TablePrefix: prefix, Concurrency: concurrency, Batch: batch}
	if batch.On() {
		opts.Cache = cached
	}
	s := newStoreWith(t, db, sqlDB, opts)
	b, err := sqlinbox.New(sqlDB, sqlinbox.Dialect(dialectOf(db)), sqlinbox.Options{TablePrefix: prefix, Concurrency: concurrency, Batch: batch})
	require.NoError(t, err)
	require.NoError(t, b.Migrate(context.Background()))
	return s, b
}

// TestBatchedConformance runs the suites against stores whose writes are batched.
func TestBatchedConformance(t *testing.T) {
	t.Parallel()
	for _, db := range sqltest.DBs {
		t.Run(db.Name, func(t *testing.T) {
			t.Parallel()
			sessiontest.Run(t, func(t *testing.T) session.Store {
				sqlDB := db.Open(t)
				return newStoreWith(t, db, sqlDB, sqlsession.Options{TablePrefix: sqltest.Prefix(t, sqlDB, db.Postgres), Batch: batching, Cache: cached})
			})
			sessiontest.RunJoint(t, func(t *testing.T) (session.TxAppender, inbox.TxCompleter) {
				return newPairWith(t, db, db.Open(t), 0, batching)
			})
		})
	}
}

func TestJointConformance(t *testing.T) {
	t.Parallel()
	for _, db := range sqltest.DBs {
		t.Run(db.Name, func(t *testing.T) {
			t.Parallel()
			sessiontest.RunJoint(t, func(t *testing.T) (session.TxAppender, inbox.TxCompleter) {
				return newPair(t, db)
			})
		})
	}
}

// TestBatchedSuite runs sessiontest.RunBatched on batched stores (the joint pair's store, so
// that joins can complete requests), broken by renaming the events table.
func TestBatchedSuite(t *testing.T) {
	t.Parallel()
	for _, db := range sqltest.DBs {
		t.Run(db.Name, func(t *testing.T) {
			t.Parallel()
			sessiontest.RunBatched(t, func(t *testing.T) sessiontest.Batched {
				sqlDB := db.Open(t)
				s := newStoreWith(t, db, sqlDB, sqlsession.Options{TablePrefix: sqltest.Prefix(t, sqlDB, db.Postgres), Batch: batching, Cache: cached})
				return sessiontest.Batched{Store: s, Break: func(t *testing.T) func() {
					return sqltest.BreakTable(t, sqlDB, s.TablePrefix()+"events")
				}}
			})
		})
	}
}
