package sqldialect

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"sync"
	"time"
)

// Querier is what both *sql.DB and *Tx offer: the stores run the same statements in and out
// of a transaction.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Tx is a write transaction. Call Rollback in a defer; after Commit it does nothing.
type Tx struct {
	Querier
	commit   func() error
	rollback func() error
	done     bool
}

// Commit commits the transaction.
func (t *Tx) Commit() error {
	if t.done {
		return errors.New("sqldialect: transaction already ended")
	}
	t.done = true
	return t.commit()
}

// Rollback rolls the transaction back; it does nothing once the transaction ended.
func (t *Tx) Rollback() error {
	if t.done {
		return nil
	}
	t.done = true
	return t.rollback()
}

// sqliteWriters holds one writer slot (a channel of capacity 1) per SQLite *sql.DB.
var sqliteWriters sync.Map

// lockWrites takes db's writer slot on SQLite, waiting for ctx at most; on PostgreSQL it does
// nothing. SQLite has one write lock per database, and a writer that finds it taken sleeps in
// the busy handler in steps of 1 to 100 ms (sqliteDefaultBusyCallback), while writers of one
// process queueing here are woken at once by a release: at 32 concurrent conversations that
// gave a third more turns per second (BenchmarkTurn, measured side by side). Writers in other
// processes still meet at the database's lock and wait up to busy_timeout. The map keeps one
// small channel per *sql.DB ever used for the life of the process.
func (d *Dialect) lockWrites(ctx context.Context, db *sql.DB) (unlock func(), err error) {
	if d.name != SQLite || ctx.Value(heldKey{}) == db {
		return func() {}, nil // no slot, or a batch holds it for this write
	}
	ch := writerSlot(db)
	select {
	case ch <- struct{}{}:
		return func() { <-ch }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// writerSlot returns db's writer slot (see lockWrites), made on first use.
func writerSlot(db *sql.DB) chan struct{} {
	slot, ok := sqliteWriters.Load(db)
	if !ok {
		slot, _ = sqliteWriters.LoadOrStore(db, make(chan struct{}, 1))
	}
	return slot.(chan struct{})
}

// Write runs fn, which writes to db with autocommit statements, holding db's writer slot on
// SQLite (see BeginWrite). fn must not start another write on db.
func (d *Dialect) Write(ctx context.Context, db *sql.DB, fn func() error) error {
	unlock, err := d.lockWrites(ctx, db)
	if err != nil {
		return err
	}
	defer unlock()
	return fn()
}

// endTimeout bounds a ROLLBACK run after the caller's context ended.
const endTimeout = 5 * time.Second

// BeginWrite starts a transaction that will write.
//
// PostgreSQL: a READ COMMITTED transaction (db.BeginTx); row locks taken by the first UPDATE
// serialize writers of one row.
//
// SQLite: the process's writer slot for db (see lockWrites), then BEGIN IMMEDIATE on a
// connection of its own, which takes the database's write lock
// up front (waiting up to busy_timeout). A plain (deferred) transaction that reads before it
// writes can fail to upgrade its lock with SQLITE_BUSY at once, without waiting, when another
// writer committed in between (https://www.sqlite.org/lang_transaction.html). When the
// transaction cannot be ended cleanly the connection is discarded rather than handed back to
// the pool with a transaction still open.
func (d *Dialect) BeginWrite(ctx context.Context, db *sql.DB) (*Tx, error) {
	if d.name != SQLite {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return nil, err
		}
		return &Tx{Querier: tx, commit: tx.Commit, rollback: tx.Rollback}, nil
	}
	unlock, err := d.lockWrites(ctx, db)
	if err != nil {
		return nil, err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		unlock()
		return nil, err
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		// A failed BEGIN leaves no transaction open; the connection is fine.
		conn.Close()
		unlock()
		return nil, err
	}
	end := func(stmt string) error {
		defer unlock()
		_, err := conn.ExecContext(ctx, stmt)
		if err != nil {
			// The context may have ended or the COMMIT failed: try to leave no transaction
			// open, and drop the connection when that cannot be known.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), endTimeout)
			_, rerr := conn.ExecContext(rctx, "ROLLBACK")
			cancel()
			if rerr != nil {
				_ = conn.Raw(func(any) error { return driver.ErrBadConn })
			}
		}
		conn.Close()
		return err
	}
	return &Tx{
		Querier:  conn,
		commit:   func() error { return end("COMMIT") },
		rollback: func() error { return end("ROLLBACK") },
	}, nil
}
