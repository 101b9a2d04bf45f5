// Package sqlsession is a session.Store on a SQL database: PostgreSQL (through
// github.com/jackc/pgx/v5/stdlib or another database/sql driver) or SQLite (through
// modernc.org/sqlite, pure Go). One code path serves both; what differs lives in
// internal/sqldialect.
//
// # Setup
//
//	db, err := sql.Open("pgx", "postgres://...")          // or sql.Open("sqlite", dsn)
//	store, err := sqlsession.New(db, sqlsession.PostgreSQL, sqlsession.Options{})
//	err = store.Migrate(ctx)                                // once at start-up; safe to race
//
// New sizes db's connection pool for the calls you will make at once (Options.Concurrency,
// default 64): database/sql keeps only 2 idle connections unless told otherwise, and
// concurrent turns would reconnect on nearly every call. It replaces an idle limit you set on
// db yourself; give a negative Concurrency to keep your own pool settings, and CheckPool to
// check them. Give the same Concurrency to the inbox/sqlinbox Inbox on the same *sql.DB, and
// let the consumer check it against its MaxInFlight with turn.Runner.CheckConcurrency.
//
// SQLite wants a busy timeout, so that writers queue for the database's single write lock
// instead of failing with SQLITE_BUSY, and WAL, so that readers do not wait for writers.
// modernc.org/sqlite takes both in the DSN as _pragma parameters:
//
//	file:/var/lib/app/turnstile.db?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)
//
// SQLite has one write lock per database. Writes through one *sql.DB also queue in process
// (a writer slot per *sql.DB), so that a waiting writer starts as soon as the previous one
// ends instead of sleeping in SQLite's busy handler; writers in other processes wait up to the
// busy timeout.
//
// An in-memory SQLite database lives per connection, and database/sql opens several: use a
// named shared-cache database, "file:NAME?mode=memory&cache=shared&_pragma=busy_timeout(5000)",
// and keep one connection open for the life of the store (the database disappears with its
// last connection: leave db.SetConnMaxIdleTime and SetConnMaxLifetime at zero), or limit the
// pool to one connection with db.SetMaxOpenConns(1).
//
// # Schema
//
// Migrate creates two tables (names start with Options.TablePrefix, "turnstile_" by default)
// and records its version in PREFIX+"schema_version":
//
//   - sessions: one row per (app, conversation), unique, with the owner (user_id), the state,
//     version and event_count, and a generated id.
//   - events: one row per event, keyed by (session_id, seq), with a unique (session_id,
//     request_id, idx) that makes a turn's events unique per request.
//
// State and event data are stored as bytes (bytea, BLOB), exactly as given; times as
// timestamptz on PostgreSQL and Unix microseconds on SQLite, so they keep microseconds.
//
// # One transaction with the inbox
//
// Store implements session.TxAppender: AppendTx runs a write of another store inside
// Append's transaction. An inbox/sqlinbox Inbox built on the same *sql.DB implements
// inbox.TxCompleter, and turn.Runner, given both, stores a turn and completes its request in
// one commit: two commits per turn (the inbox's Begin, then the append with the completion)
// instead of three, and no crash between the append and the completion.
//
// # Batching
//
// With Options.Batch on (off by default), the Gets of concurrent callers are one query, their
// appends share one write transaction, and an inbox/sqlinbox Inbox with its own Options.Batch on makes the Begins of
// concurrent callers in one statement: with many turns in flight, a turn then costs a
// fraction of a commit instead of two commits and seven round trips. Each caller still
// returns only once its write committed, with its own outcome; Options.Batch has the rules.
// On PostgreSQL a batched statement takes its rows as one array per column (unnest), so its
// text is the same for any batch size: the driver prepares it once per connection and the
// server plans it once.
//
// # Errors
//
// Contract errors are the session package's sentinels. Infrastructure failures (a lost or
// refused connection, a PostgreSQL serialization failure or deadlock, a busy SQLite database)
// come back wrapped in an error that satisfies interface{ Retryable() bool }, so the caller
// can retry them without counting a failed attempt. Other database errors are wrapped as they
// are.
package sqlsession

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/turnstile-go/turnstile/internal/sqldialect"
	"github.com/turnstile-go/turnstile/session"
)

// Dialect names the database behind the *sql.DB: PostgreSQL or SQLite.
type Dialect = sqldialect.Name

const (
	// PostgreSQL: any database/sql driver whose errors expose SQLState() string; turnstile
	// tests github.com/jackc/pgx/v5/stdlib (driver name "pgx"). PostgreSQL 12 or later.
	PostgreSQL = sqldialect.PostgreSQL
	// SQLite: modernc.org/sqlite (driver name "sqlite"), SQLite 3.35 or later (RETURNING).
	SQLite = sqldialect.SQLite
)

// DefaultTablePrefix is the table prefix used when Options.TablePrefix is empty.
const DefaultTablePrefix = sqldialect.DefaultPrefix

// Options configures a Store. The zero value is ready to use.
type Options struct {
	// TablePrefix starts the name of every table and index the store uses, so that several
	// stores (or several applications) can share one database or schema. Letters, digits and
	// underscores, not starting with a digit, at most 32 bytes. Default DefaultTablePrefix.
	// A Store and an inbox/sqlinbox Inbox with the same prefix share the version table.
	TablePrefix string
	// Concurrency is how many calls may run at once through the *sql.DB, a number of
	// connections: the turns in flight at once in this process (the consumer's
	// Config.MaxInFlight). A turn makes one store call at a time, so a Store and an Inbox
	// sharing one *sql.DB need Concurrency connections between them, not twice that.
	//
	// New sizes the pool for it with db.SetMaxIdleConns(Concurrency), so that connections stay
	// open between calls: database/sql keeps 2 idle connections by default and closes every
	// other one on release, so concurrent turns reconnect constantly (on PostgreSQL with 12
	// concurrent turns that cost nearly two thirds of the throughput; see BENCHMARKS.md,
	// "Stores"). This
	// replaces an idle limit you set on db yourself (database/sql cannot report it), except
	// that stores sharing a *sql.DB never lower each other's: the largest wins. MaxOpenConns
	// stays yours: New fails with ErrPoolTooSmall when it is set below a Concurrency you give.
	//
	// Zero means DefaultConcurrency (64), lowered to db's MaxOpenConns when that is set below
	// it; a negative value leaves the pool as you configured it (check it with CheckPool).
	Concurrency int
	// Batch turns on the batching of reads and writes across concurrent callers: the Gets
	// that callers make at about the same time are made in one query (each caller gets its
	// own session, ErrNotFound or ErrOwnerMismatch), their Creates in one INSERT statement,
	// and their Appends
	// and AppendTxs in one write transaction (one UPDATE for all the version bumps, one INSERT
	// for all the events, the joined writes, one COMMIT), so that many turns cost one commit
	// and a few round trips. Every caller still returns only after the statement or
	// transaction holding its write committed, with its own outcome (ErrExists, ErrConflict,
	// a duplicate, ...); a failed batch fails each of its callers, and none of their writes is
	// stored. Batching says when a batch is sent, and Append what a cancelled caller gets.
	//
	// Batched, AppendTx may call join more than once: when another caller's join fails, the
	// transaction is rolled back and made again without that caller, calling the others'
	// joins again in the new transaction (only the last call's writes can commit). An
	// inbox/sqlinbox Inbox on the same *sql.DB defers the completions CompleteTx joins to such
	// a transaction to its end and makes all of them in one statement.
	//
	// Default off (the zero Batching): a batched append waits up to Batching.Wait for others,
	// which only pays when many turns are in flight at once (the consumer's MaxInFlight in the
	// tens or more, a fast model), and a join must then be safe to call again (turn.Runner's
	// is). Size it to half of MaxInFlight, as the inbox's (Batching.Size says why).
	Batch Batching
	// Cache is how many sessions the store keeps the newest events of in memory, between
	// calls, so that a Get reads from the database only the session's row and the events it
	// gained since (none when this process made the session's last append): on PostgreSQL
	// with 64 turns in flight that is most of a turn's reading (see BENCHMARKS.md, "Session cache
	// and one statement for bumps and events").
	// What is held is only ever a copy of what was committed, checked against the session's
	// row on every Get: its id (a session deleted and created again is another row) and its
	// event_count (events are never changed once stored and are numbered without gaps), so a
	// Get returns what it would without the cache, whichever process wrote the session.
	// Each session holds up to the recent of its last Get (turn.Runner's HistoryLimit) events;
	// the least recently used are dropped past Cache sessions. The events' Data that Get
	// returns is shared with the cache: do not modify it.
	//
	// Default 0: no cache. A good figure is the conversations a member serves at once (a few
	// times the consumer's MaxInFlight).
	Cache int
}

// DefaultConcurrency is the Options.Concurrency used when it is zero: 64, the consumer's
// default MaxInFlight.
const DefaultConcurrency = sqldialect.DefaultConcurrency

// ErrPoolTooSmall is the error (matched with errors.Is) of New when Options.Concurrency is
// above the *sql.DB's MaxOpenConns, and of CheckPool.
var ErrPoolTooSmall = sqldialect.ErrPoolTooSmall

// CheckPool reports whether db's pool can serve concurrency calls at once (a number of
// connections), each on a connection kept open between calls; use it on a pool you size
// yourself (Options.Concurrency < 0). It takes concurrency connections at once, opening those
// the pool lacks, and hands them back; they stay in the pool. Run it at start-up, before the
// pool is busy. Errors: ErrPoolTooSmall (wrapped) when db's MaxOpenConns is below concurrency
// or db closed connections on release instead of keeping them idle (its SetMaxIdleConns limit
// is below concurrency); ctx's error; the driver's failure to connect.
func CheckPool(ctx context.Context, db *sql.DB, concurrency int) error {
	return sqldialect.CheckPool(ctx, db, concurrency)
}

// Store is a session.Store on PostgreSQL or SQLite. It is safe for concurrent use by many
// goroutines and processes; build one with New and run Migrate before the first call.
type Store struct {
	db *sql.DB
	d  *sqldialect.Dialect
	q  queries

	// appendHook, when set (tests only), runs inside Append's transaction at two stages:
	// "bumped" right after the version bump, "inserted" right before the commit.
	appendHook func(ctx context.Context, stage string, tx sqldialect.Querier)

	// appends batches Append and AppendTx when Options.Batch is on; nil otherwise.
	appends *sqldialect.Batcher[appendReq, session.Appended]
	// gets batches Get when Options.Batch is on; nil otherwise.
	gets *sqldialect.Batcher[getReq, session.Session]
	// creates batches Create's insert when Options.Batch is on; nil otherwise.
	creates *sqldialect.Batcher[createReq, bool]
	// cache holds sessions' newest events when Options.Cache is set; nil otherwise.
	cache *recentCache
}

var (
	_ session.TxAppender = (*Store)(nil)
	_ session.Retention  = (*Store)(nil)
)

// component names the session store's schema in the version table.
const component = "sessions"

// New returns a Store on db and sizes db's connection pool for Options.Concurrency. It does
// not touch the database; call Migrate for the schema.
// Errors: a nil db, an unknown dialect, an invalid Options.TablePrefix, an invalid
// Options.Batch (see Batching), a negative Options.Cache, or ErrPoolTooSmall
// (wrapped) when Options.Concurrency is above db's MaxOpenConns.
func New(db *sql.DB, dialect Dialect, opts Options) (*Store, error) {
	if db == nil {
		return nil, errors.New("sqlsession: nil *sql.DB")
	}
	d, err := sqldialect.For(dialect, opts.TablePrefix)
	if err != nil {
		return nil, fmt.Errorf("sqlsession: %w", err)
	}
	d = d.On(db)
	if err := opts.Batch.Validate(); err != nil {
		return nil, fmt.Errorf("sqlsession: Options.Batch: %w", err)
	}
	if err := sqldialect.SizePool(db, opts.Concurrency); err != nil {
		return nil, fmt.Errorf("sqlsession: %w", err)
	}
	if opts.Cache < 0 {
		return nil, fmt.Errorf("sqlsession: Options.Cache: %d is negative", opts.Cache)
	}
	s := &Store{db: db, d: d, q: buildQueries(d), cache: newRecentCache(opts.Cache)}
	if opts.Batch.On() {
		s.appends = sqldialect.NewBatcher(opts.Batch, d, db, s.runAppends)
		s.creates = sqldialect.NewBatcher(opts.Batch, d, db, s.runCreates)
		s.gets = sqldialect.NewReadBatcher(opts.Batch, s.runGets)
	}
	return s, nil
}

// Migrate creates or upgrades the store's tables to this code's schema version. It is
// idempotent and safe to run from several processes at once: they take turns, and all but
// the first find nothing to do (see the Schema section of the package doc).
func (s *Store) Migrate(ctx context.Context) error {
	if err := s.d.Migrate(ctx, s.db, component, migrations); err != nil {
		return fmt.Errorf("sqlsession: %w", err)
	}
	return nil
}

// Location names the store's sessions table the same way whichever *sql.DB reaches it:
// "postgres:SYSTEM_ID/DATABASE/SCHEMA.TABLE" or "sqlite:PATH/TABLE", "" for an in-memory SQLite
// database. consumer's replay mode compares it with the production store's to refuse writing
// there. Errors: the database's.
func (s *Store) Location(ctx context.Context) (string, error) {
	loc, err := s.d.Location(ctx, s.db, "sessions")
	if err != nil {
		return "", fmt.Errorf("sqlsession: location: %w", sqldialect.ClassifyContext(ctx, err))
	}
	return loc, nil
}

// TablePrefix returns the table prefix in use.
func (s *Store) TablePrefix() string { return s.d.Prefix() }

// CheckConcurrency reports whether the Store's pool is sized for n calls at once, a number of
// connections (turn.Runner.CheckConcurrency asks it). Errors: ErrPoolTooSmall (wrapped) when
// db's MaxOpenConns is below n, or the idle limit a store's Options.Concurrency set on db is.
// For a pool you sized yourself (Options.Concurrency < 0) only MaxOpenConns can be checked
// here; CheckPool probes the rest. It does not touch the database.
func (s *Store) CheckConcurrency(n int) error {
	if err := sqldialect.CheckSized(s.db, n); err != nil {
		return fmt.Errorf("sqlsession: %w", err)
	}
	return nil
}
