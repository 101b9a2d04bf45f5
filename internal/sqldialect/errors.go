package sqldialect

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"net"
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
// retrying, and returns it unchanged otherwise (nil stays nil). The caller's own context
// ending is not retryable: the caller gave up.
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

// Transient PostgreSQL SQLSTATE codes and classes (PostgreSQL manual, appendix A).
var pgTransientStates = map[string]bool{
	"40001": true, // serialization_failure
	"40P01": true, // deadlock_detected
	"55P03": true, // lock_not_available
	"57P01": true, // admin_shutdown: pg_terminate_backend, a fast shutdown
	"57P02": true, // crash_shutdown
	"57P03": true, // cannot_connect_now: starting up or in recovery
	"53300": true, // too_many_connections
	"25P03": true, // idle_in_transaction_session_timeout (the server closed the session)
}

// SQLite primary result codes (https://www.sqlite.org/rescode.html); extended codes keep the
// primary one in the low byte.
const (
	sqliteBusy            = 5
	sqliteLocked          = 6
	sqliteProtocol        = 15
	sqliteConstraintPK    = 1555 // SQLITE_CONSTRAINT_PRIMARYKEY
	sqliteConstraintUniq  = 2067 // SQLITE_CONSTRAINT_UNIQUE
	pgUniqueViolation     = "23505"
	pgConnectionException = "08" // class 08: connection exception
)

// IsTransient reports whether err is an infrastructure failure worth retrying: a bad or
// closed connection (driver.ErrBadConn, sql.ErrConnDone, io.ErrUnexpectedEOF, io.EOF, a
// net.Error, connection refused/reset/aborted, broken pipe), a PostgreSQL error whose
// SQLSTATE is in class 08 or one of 40001, 40P01, 55P03, 57P01, 57P02, 57P03, 53300, 25P03,
// a driver error that says it is safe to retry (pgconn's SafeToRetry), or SQLITE_BUSY,
// SQLITE_LOCKED or SQLITE_PROTOCOL. Errors are read through interfaces (SQLState() string,
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
		return pgTransientStates[state] || len(state) == 5 && state[:2] == pgConnectionException
	}
	if code, ok := sqliteCode(err); ok {
		switch code & 0xff {
		case sqliteBusy, sqliteLocked, sqliteProtocol:
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
