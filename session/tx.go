package session

import (
	"context"
	"database/sql"
)

// SQLTx is a SQL transaction as a TxAppender hands it to a write that joins Append's: the
// methods *sql.Tx and *sql.Conn share. Statements run on it commit or roll back with the turn.
type SQLTx interface {
	// ExecContext runs a statement that returns no rows, as *sql.Tx's does.
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	// QueryContext runs a query that returns rows, as *sql.Tx's does.
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	// QueryRowContext runs a query that returns at most one row, as *sql.Tx's does.
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// JoinFunc is a write that joins Append's transaction (see TxAppender.AppendTx): it runs on tx
// and gets the turn's events as stored, with RequestID and Seq filled in. An error rolls the
// whole transaction back.
type JoinFunc func(ctx context.Context, tx SQLTx, stored []Event) error

// TxAppender is a Store on a SQL database that can make another store's write part of
// Append's transaction. turn.Runner uses it, with an inbox.TxCompleter on the same *sql.DB, to
// store a turn and complete its request in one commit instead of two, so that no crash can
// fall between the two. session/sqlsession's Store implements it; the conformance suite
// (session/sessiontest) checks it on every store that does.
type TxAppender interface {
	Store
	// TxDB returns the database AppendTx's transactions run on. A write can join them only
	// when it is made for the same *sql.DB: another *sql.DB, even on the same database, is
	// another connection and another transaction.
	TxDB() *sql.DB
	// AppendTx is Append, plus join: once the turn's events are written, before the commit, it
	// calls join with the transaction and the stored events: once, or again in a new
	// transaction when a store that batches the appends of several callers in one transaction
	// (session/sqlsession with Options.Batch) rolled the first back for another caller's
	// failure. Only the writes of join's last call can commit, so join must be safe to call
	// again (turn.Runner's is). The turn and join's writes
	// commit together or not at all: when join returns an error, AppendTx rolls back and
	// returns an error wrapping join's, with the zero Appended; when the commit fails, neither
	// is stored (a lost connection during the commit leaves it unknown, as for Append).
	// join is not called when AppendTx writes nothing: Append's errors (ErrConflict,
	// ErrNotFound, ErrOwnerMismatch, ErrInvalid) and a turn already stored (Duplicate set),
	// which the caller finishes on its own. A nil join is ErrInvalid. join must not keep tx, nor use the database other
	// than through tx: on SQLite the transaction holds the write lock, so another connection's
	// write would wait for it.
	AppendTx(ctx context.Context, key Key, expectedVersion int64, turn Turn, join JoinFunc) (Appended, error)
}
