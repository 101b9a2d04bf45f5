package sqldialect

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
)

// TransientError wraps an infrastructure failure that a caller may retry as it is: a lost or
// refused connection, a PostgreSQL serialization failure or deadlock, a busy SQLite database.
// It is never a contract error (session.ErrConflict and the like are returned bare). The
// outcome of the failed call is unknown only when the connection was lost during a commit;
// the stores' writes are idempotent, so a retry is safe either way.
type TransientError struct {
	Err error
}

// Error implements error.
func (e *TransientError) Error() string { return "retryable: " + e.Err.Error() }

// Unwrap returns the driver's error.
func (e *TransientError) Unwrap() error { return e.Err }

// Retryable reports true: the call may be retried without counting a failed attempt.
func (e *TransientError) Retryable() bool { return true }

// Classify wraps err in a *TransientError when it is an infrastructure failure worth
// retrying, and returns it unchanged otherwise (nil stays nil). A context error is returned
// unchanged: without the caller's context, Classify cannot tell the caller giving up from a
// driver's own timeout; ClassifyContext can.
func Classify(err error) error {
	if err == nil {
		return nil
	}
	var te *TransientError
	if errors.As(err, &te) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if IsTransient(err) {
		return &TransientError{Err: err}
	}
	return err
}

// ClassifyContext is Classify for an error of a call made with ctx: when ctx has ended the
// caller gave up and err is returned unchanged; otherwise a context error in err is the
// driver's own timeout (pgx's connect_timeout, say), an infrastructure failure, and retryable.
func ClassifyContext(ctx context.Context, err error) error {
	if err == nil || ctx.Err() != nil {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return &TransientError{Err: err}
	}
	return Classify(err)
}

// Transient PostgreSQL SQLSTATE codes and classes (PostgreSQL manual, appendix A).
var pgTransientStates = map[string]bool{
	"40001": true, // serialization_failure
	"40P01": true, // deadlock_detected
	"55P03": true, // lock_not_available
	"57P01": true, // admin_shutdown: pg_terminate_backend, a fast shutdown
	"57P02": true, // crash_shutdown
	"57P03": true, // cannot_connect_now: starting up or in recovery
	"25P03": true, // idle_in_transaction_session_timeout (the server closed the session)
	"25006": true, // read_only_sql_transaction: a primary demoted in a failover, a standby
	"58000": true, // system_error
	"58030": true, // io_error
}

// pgTransientClasses are SQLSTATE classes whose every code is an infrastructure failure:
// 08 connection exception, 53 insufficient resources (disk full, out of memory, too many
// connections, configuration limit).
var pgTransientClasses = map[string]bool{"08": true, "53": true}

// SQLite primary result codes (https://www.sqlite.org/rescode.html); extended codes keep the
// primary one in the low byte.
const (
	sqliteBusy           = 5
	sqliteLocked         = 6
	sqliteIOErr          = 10
	sqliteFull           = 13
	sqliteProtocol       = 15
	sqliteConstraintPK   = 1555 // SQLITE_CONSTRAINT_PRIMARYKEY
	sqliteConstraintUniq = 2067 // SQLITE_CONSTRAINT_UNIQUE
	sqliteError          = 1    // SQLITE_ERROR, the generic one
	pgUniqueViolation    = "23505"
	pgUndefinedTable     = "42P01"
)

// IsTransient reports whether err is an infrastructure failure worth retrying: a bad or
// closed connection (driver.ErrBadConn, sql.ErrConnDone, io.ErrUnexpectedEOF, io.EOF, a
// net.Error, connection refused/reset/aborted, broken pipe), a PostgreSQL error whose
// SQLSTATE is in class 08 or 53 or one of 40001, 40P01, 55P03, 57P01, 57P02, 57P03, 25P03,
// 25006, 58000, 58030, a driver error that says it is safe to retry (pgconn's SafeToRetry),
// or SQLITE_BUSY, SQLITE_LOCKED, SQLITE_PROTOCOL, SQLITE_IOERR or SQLITE_FULL. Errors are read through interfaces (SQLState() string,
// Code() int), so no driver is imported here.
func IsTransient(err error) bool {
	if err == nil {
		return false
	}
	switch {
	case errors.Is(err, driver.ErrBadConn), errors.Is(err, sql.ErrConnDone),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.ECONNABORTED), errors.Is(err, syscall.EPIPE):
		return true
	}
	if state, ok := sqlState(err); ok {
		return pgTransientStates[state] || len(state) == 5 && pgTransientClasses[state[:2]]
	}
	if code, ok := sqliteCode(err); ok {
		switch code & 0xff {
		case sqliteBusy, sqliteLocked, sqliteProtocol, sqliteIOErr, sqliteFull:
			return true
		}
		return false
	}
	var safe interface{ SafeToRetry() bool }
	if errors.As(err, &safe) && safe.SafeToRetry() {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne)
}

// Text makes a free-form text (a failure reason quoting a model's or a server's bytes) storable
// in a PostgreSQL TEXT column, which refuses NUL and invalid UTF-8: NULs are dropped and
// invalid bytes become U+FFFD. SQLite would store either, so both databases keep the same.
func Text(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "")
}

// IsUniqueViolation reports whether err is a unique or primary key constraint violation.
func IsUniqueViolation(err error) bool {
	if state, ok := sqlState(err); ok {
		return state == pgUniqueViolation
	}
	if code, ok := sqliteCode(err); ok {
		return code == sqliteConstraintUniq || code == sqliteConstraintPK
	}
	return false
}

// IsMissingTable reports whether err says that a table does not exist: PostgreSQL's SQLSTATE
// 42P01 (undefined_table), or SQLite's "no such table" (an SQLITE_ERROR told apart by its
// message, the only place SQLite says it). A store gets it before Migrate ran, or when its
// table prefix is not the one migrated.
func IsMissingTable(err error) bool {
	if state, ok := sqlState(err); ok {
		return state == pgUndefinedTable
	}
	if code, ok := sqliteCode(err); ok {
		return code == sqliteError && strings.Contains(err.Error(), "no such table")
	}
	return false
}

func sqlState(err error) (string, bool) {
	var e interface{ SQLState() string }
	if errors.As(err, &e) {
		return e.SQLState(), true
	}
	return "", false
}

func sqliteCode(err error) (int, bool) {
	var e interface{ Code() int }
	if errors.As(err, &e) {
		return e.Code(), true
	}
	return 0, false
}
