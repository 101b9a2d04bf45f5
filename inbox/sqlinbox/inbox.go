// Package sqlinbox is an inbox.Inbox on a SQL database: PostgreSQL (through
// github.com/jackc/pgx/v5/stdlib or another database/sql driver) or SQLite (through
// modernc.org/sqlite, pure Go). One code path serves both; what differs lives in
// internal/sqldialect.
//
// # Setup
//
//	db, err := sql.Open("pgx", "postgres://...")     // or sql.Open("sqlite", dsn)
//	ib, err := sqlinbox.New(db, sqlinbox.PostgreSQL, sqlinbox.Options{})
//	err = ib.Migrate(ctx)                              // once at start-up; safe to race
//
// For SQLite, give the DSN a busy timeout and WAL, and for an in-memory database a shared
// cache, as the session/sqlsession package doc shows:
//
//	file:/var/lib/app/turnstile.db?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)
//	file:NAME?mode=memory&cache=shared&_pragma=busy_timeout(5000)   (or db.SetMaxOpenConns(1))
//
// # Schema
//
// Migrate creates the table PREFIX+"inbox" ("turnstile_inbox" by default), keyed by
// request_id, and records its version in PREFIX+"schema_version". The status column holds
// "in_progress", "done" or "dead" (StatusNew is never stored); deliveries counts the Begins
// that counted an attempt, never refunded, so that Begin can tell that it created the entry
// (deliveries = 1) in the same statement. A partial index on updated_at over done and dead
// entries serves Purge.
//
// The step journal (inbox.Journal) is PREFIX+"inbox_steps", keyed by (request_id, ordinal);
// the outbox's intents (inbox.Outbox) are PREFIX+"outbox", keyed by id
// (inbox.IntentID), with an index on (status, next_at) for Claim. Purge deletes a purged
// entry's steps in the same transaction, and delivered and dead intents last updated before
// its cutoff; Redrive deletes the entry's steps in its transaction. Erase (inbox.Eraser, a
// data-deletion request's part) deletes the entries, steps and intents of given conversations
// whatever their status, reading the tables through once per 200 conversations.
//
// # The outbox
//
// Inbox implements inbox.TxOutbox: PromoteTx turns a request's deferred steps into pending
// intents inside the transaction that commits its turn. Claim leases intents with
// UPDATE ... RETURNING (on PostgreSQL over FOR UPDATE SKIP LOCKED, so several relays share
// one outbox without waiting for each other). The journal's and the outbox's calls are never
// batched: Options.Batch batches Begin only.
//
// New sizes db's connection pool for Options.Concurrency (default 64), as session/sqlsession's
// New does; give both stores on one *sql.DB the same figure.
//
// # One transaction with the session store
//
// Inbox implements inbox.TxCompleter: CompleteTx completes a request inside a transaction
// on the same *sql.DB. turn.Runner uses it with a session/sqlsession Store on that *sql.DB to
// commit a turn and its completion together (see that package's doc).
//
// # Batching
//
// With Options.Batch on (off by default), the Begins of concurrent callers are made in one
// statement, each caller getting its own entry once that statement committed; the
// session/sqlsession package doc says what its own batching adds.
//
// # Errors
//
// Contract errors are the inbox package's sentinels. Infrastructure failures (a lost or
// refused connection, a PostgreSQL serialization failure or deadlock, a busy SQLite database)
// come back wrapped in an error that satisfies interface{ Retryable() bool }.
package sqlinbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/internal/sqldialect"
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

// DefaultPurgeBatch is how many entries one Purge statement deletes when
// Options.PurgeBatch is zero.
const DefaultPurgeBatch = 1000

// Options configures an Inbox. The zero value is ready to use.
type Options struct {
	// TablePrefix starts the name of every table and index the inbox uses. Letters, digits
	// and underscores, not starting with a digit, at most 32 bytes. Default DefaultTablePrefix.
	// An Inbox and a session/sqlsession Store with the same prefix share the version table.
	TablePrefix string
	// PurgeBatch is how many entries one Purge statement deletes at most, so that a purge of
	// millions of entries holds no long lock and no huge transaction. Default
	// DefaultPurgeBatch; must not be negative.
	PurgeBatch int
	// Concurrency is how many calls may run at once through the *sql.DB, a number of
	// connections: the turns in flight at once in this process (the consumer's
	// Config.MaxInFlight). New sizes db's pool for it with db.SetMaxIdleConns(Concurrency),
	// replacing an idle limit you set (stores sharing a *sql.DB never lower each other's: the
	// largest wins), and fails with ErrPoolTooSmall when db's MaxOpenConns is set below a
	// Concurrency you give. Zero means DefaultConcurrency (64), lowered to MaxOpenConns when
	// that is set below it; a negative value leaves the pool as you configured it (check it
	// with CheckPool). The session/sqlsession Options.Concurrency doc says why it matters.
	Concurrency int
	// Batch turns on the batching of Begin across concurrent callers: their Begins are made in
	// one INSERT statement, one row and one outcome each, one commit for all. Every caller
	// still returns only after the statement holding its write committed, with its own entry,
	// and a failed statement fails each of its callers; Batching says when a batch is sent,
	// and Begin what a cancelled caller gets. (Whatever Batch says, the completions that
	// CompleteTx joins to a batched transaction of a session/sqlsession Store are made in one
	// statement at the end of that transaction; see CompleteTx.)
	//
	// Default off (the zero Batching): a batched write waits up to Batching.Wait for others,
	// which only pays when many turns are in flight at once (the consumer's MaxInFlight in the
	// tens or more, a fast model); one caller alone would see each Begin slower. Size it to
	// half of MaxInFlight (Batching.Size says why).
	Batch Batching
}

// DefaultConcurrency is the Options.Concurrency used when it is zero: 64, the consumer's
// default MaxInFlight.
const DefaultConcurrency = sqldialect.DefaultConcurrency

// ErrPoolTooSmall is the error (matched with errors.Is) of New when Options.Concurrency is
// above the *sql.DB's MaxOpenConns, and of CheckPool. It is session/sqlsession's
// ErrPoolTooSmall.
var ErrPoolTooSmall = sqldialect.ErrPoolTooSmall

// CheckPool reports whether db's pool can serve concurrency calls at once (a number of
// connections), each on a connection kept open between calls: it is session/sqlsession's
// CheckPool, which says how. Errors: ErrPoolTooSmall (wrapped), ctx's error, the driver's
// failure to connect.
func CheckPool(ctx context.Context, db *sql.DB, concurrency int) error {
	return sqldialect.CheckPool(ctx, db, concurrency)
}

func (o *Options) setDefaults() {
	if o.PurgeBatch == 0 {
		o.PurgeBatch = DefaultPurgeBatch
	}
}

func (o *Options) validate() error {
	if o.PurgeBatch < 0 {
		return fmt.Errorf("Options.PurgeBatch: %d is negative", o.PurgeBatch)
	}
	if err := o.Batch.Validate(); err != nil {
		return fmt.Errorf("Options.Batch: %w", err)
	}
	return nil
}

// Inbox is an inbox.Inbox on PostgreSQL or SQLite. It is safe for concurrent use by many
// goroutines and processes; build one with New and run Migrate before the first call.
type Inbox struct {
	db    *sql.DB
	d     *sqldialect.Dialect
	q     queries
	oq    outboxQueries
	batch int
	// begins batches Begin when Options.Batch is on; nil otherwise.
	begins *sqldialect.Batcher[inbox.Delivery, inbox.Entry]
}

// component names the inbox's schema in the version table.
const component = "inbox"

// New returns an Inbox on db and sizes db's connection pool for Options.Concurrency. It does
// not touch the database; call Migrate for the schema.
// Errors: a nil db, an unknown dialect, an invalid Options.TablePrefix, a negative
// Options.PurgeBatch, an invalid Options.Batch (see Batching), or ErrPoolTooSmall (wrapped) when Options.Concurrency is above db's
// MaxOpenConns.
func New(db *sql.DB, dialect Dialect, opts Options) (*Inbox, error) {
	if db == nil {
		return nil, errors.New("sqlinbox: nil *sql.DB")
	}
	opts.setDefaults()
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("sqlinbox: %w", err)
	}
	d, err := sqldialect.For(dialect, opts.TablePrefix)
	if err != nil {
		return nil, fmt.Errorf("sqlinbox: %w", err)
	}
	d = d.On(db)
	if err := sqldialect.SizePool(db, opts.Concurrency); err != nil {
		return nil, fmt.Errorf("sqlinbox: %w", err)
	}
	b := &Inbox{db: db, d: d, q: buildQueries(d), oq: buildOutboxQueries(d), batch: opts.PurgeBatch}
	if opts.Batch.On() {
		b.begins = sqldialect.NewBatcher(opts.Batch, d, db, b.runBegins)
	}
	return b, nil
}

// Migrate creates or upgrades the inbox's table to this code's schema version. It is
// idempotent and safe to run from several processes at once: they take turns (a PostgreSQL
// advisory lock, SQLite's write lock), and all but the first find nothing to do.
func (b *Inbox) Migrate(ctx context.Context) error {
	if err := b.d.Migrate(ctx, b.db, component, migrations); err != nil {
		return fmt.Errorf("sqlinbox: %w", err)
	}
	return nil
}

// Location names the inbox's table the same way whichever *sql.DB reaches it:
// "postgres:SYSTEM_ID/DATABASE/SCHEMA.TABLE" or "sqlite:PATH/TABLE", "" for an in-memory SQLite
// database. consumer's replay mode compares it with the production inbox's to refuse writing
// there. Errors: the database's.
func (b *Inbox) Location(ctx context.Context) (string, error) {
	loc, err := b.d.Location(ctx, b.db, "inbox")
	if err != nil {
		return "", fmt.Errorf("sqlinbox: location: %w", sqldialect.ClassifyContext(ctx, err))
	}
	return loc, nil
}

// TablePrefix returns the table prefix in use.
func (b *Inbox) TablePrefix() string { return b.d.Prefix() }

// CheckConcurrency reports whether the Inbox's pool is sized for n calls at once, as
// session/sqlsession's Store.CheckConcurrency does (turn.Runner.CheckConcurrency asks it).
// Errors: ErrPoolTooSmall (wrapped). It does not touch the database.
func (b *Inbox) CheckConcurrency(n int) error {
	if err := sqldialect.CheckSized(b.db, n); err != nil {
		return fmt.Errorf("sqlinbox: %w", err)
	}
	return nil
}
