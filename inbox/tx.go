package inbox

import (
	"context"
	"database/sql"
)

// SQLTx is a SQL transaction that CompleteTx joins: the methods *sql.Tx and *sql.Conn share
// (and session.SQLTx has). Statements run on it commit or roll back with it.
type SQLTx interface {
	// ExecContext runs a statement that returns no rows, as *sql.Tx's does.
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	// QueryContext runs a query that returns rows, as *sql.Tx's does.
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	// QueryRowContext runs a query that returns at most one row, as *sql.Tx's does.
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// TxCompleter is an Inbox on a SQL database that can complete a request inside a transaction
// someone else opened on it: turn.Runner completes the request in the transaction that stores
// its turn (a session.TxAppender's on the same *sql.DB), so the request is done exactly when
// its turn is stored. inbox/sqlinbox's Inbox implements it; the conformance suite
// (inbox/inboxtest) checks it on every inbox that does.
type TxCompleter interface {
	Inbox
	// TxDB returns the inbox's database: CompleteTx takes transactions on this *sql.DB only.
	TxDB() *sql.DB
	// CompleteTx is Complete with its statements run on tx, a transaction on TxDB(): the entry
	// becomes done when tx commits, and stays as it was when tx rolls back. Errors as
	// Complete's: ErrNotFound, ErrDead, ErrInvalid; on any error the caller should roll tx back.
	CompleteTx(ctx context.Context, tx SQLTx, key string, result []byte) error
}
