package sqldialect

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type stateErr string

func (e stateErr) Error() string    { return "pg error " + string(e) }
func (e stateErr) SQLState() string { return string(e) }

type codeErr int

func (e codeErr) Error() string { return fmt.Sprintf("sqlite error %d", int(e)) }
func (e codeErr) Code() int     { return int(e) }

type safeErr struct{}

func (safeErr) Error() string     { return "not sent" }
func (safeErr) SafeToRetry() bool { return true }

func TestClassify(t *testing.T) {
	t.Parallel()
	retryable := []error{
		driver.ErrBadConn, sql.ErrConnDone, io.ErrUnexpectedEOF, io.EOF,
		&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED},
		fmt.Errorf("read: %w", syscall.ECONNRESET), syscall.EPIPE,
		stateErr("40001"), stateErr("40P01"), stateErr("57P01"), stateErr("08006"), stateErr("53300"),
		codeErr(5), codeErr(6), codeErr(5 | 2<<8), // SQLITE_BUSY, SQLITE_LOCKED, SQLITE_BUSY_SNAPSHOT
		safeErr{},
		fmt.Errorf("wrapped: %w", stateErr("40001")),
	}
	for _, err := range retryable {
		got := Classify(err)
		var r interface{ Retryable() bool }
		require.True(t, errors.As(got, &r) && r.Retryable(), "%v should be retryable", err)
		require.ErrorIs(t, got, err, "the cause stays in the chain")
		require.Same(t, got, Classify(got), "no double wrap")
	}
	permanent := []error{
		errors.New("boom"), stateErr("23505"), stateErr("42P01"), codeErr(1), codeErr(2067),
		context.Canceled, fmt.Errorf("read: %w", context.DeadlineExceeded),
	}
	for _, err := range permanent {
		got := Classify(err)
		var r interface{ Retryable() bool }
		require.False(t, errors.As(got, &r), "%v should not be retryable", err)
		require.Equal(t, err, got)
	}
	require.NoError(t, Classify(nil))
	require.True(t, IsUniqueViolation(stateErr("23505")))
	require.True(t, IsUniqueViolation(codeErr(2067)))
	require.True(t, IsUniqueViolation(codeErr(1555)))
	require.False(t, IsUniqueViolation(codeErr(5)))
}

type sqliteMsgErr struct {
	code int
	msg  string
}

func (e sqliteMsgErr) Error() string { return e.msg }
func (e sqliteMsgErr) Code() int     { return e.code }

func TestIsMissingTable(t *testing.T) {
	t.Parallel()
	require.True(t, IsMissingTable(fmt.Errorf("get: %w", stateErr("42P01"))))
	require.True(t, IsMissingTable(sqliteMsgErr{1, "SQL logic error: no such table: turnstile_inbox (1)"}))
	require.False(t, IsMissingTable(stateErr("23505")))
	require.False(t, IsMissingTable(sqliteMsgErr{1, "SQL logic error: near \"x\": syntax error (1)"}))
	require.False(t, IsMissingTable(sqliteMsgErr{5, "no such table, but busy"}))
	require.False(t, IsMissingTable(errors.New("no such table")), "only a driver's error says so")
	require.False(t, IsMissingTable(nil))
}

func TestQuery(t *testing.T) {
	t.Parallel()
	pg, err := For(PostgreSQL, "")
	require.NoError(t, err)
	require.Equal(t, "turnstile_", pg.Prefix())
	lite, err := For(SQLite, "p_")
	require.NoError(t, err)
	q := "SELECT a FROM {p}t WHERE a = $1 AND b = $12 AND c = $1"
	require.Equal(t, "SELECT a FROM turnstile_t WHERE a = $1 AND b = $12 AND c = $1", pg.Query(q))
	require.Equal(t, "SELECT a FROM p_t WHERE a = ?1 AND b = ?12 AND c = ?1", lite.Query(q))
	require.Equal(t, "CREATE TABLE p_x (id INTEGER PRIMARY KEY, b BLOB, t INTEGER)", lite.DDL("CREATE TABLE {p}x (id {serial}, b {bytes}, t {time})"))
	require.Equal(t, "CREATE TABLE turnstile_x (b BYTEA, t TIMESTAMPTZ)", pg.DDL("CREATE TABLE {p}x (b {bytes}, t {time})"))
	_, err = For("mysql", "")
	require.Error(t, err)
	for _, p := range []string{"1a", "a-b", "a b", "a;", "é", "abcdefghijklmnopqrstuvwxyz0123456"} {
		_, err := For(SQLite, p)
		require.Error(t, err, "prefix %q", p)
	}
}

func TestTime(t *testing.T) {
	t.Parallel()
	lite, _ := For(SQLite, "")
	pg, _ := For(PostgreSQL, "")
	in := time.Date(2025, 3, 4, 5, 6, 7, 891234567, time.FixedZone("X", 3600))
	want := in.UTC().Truncate(time.Microsecond)
	for _, d := range []*Dialect{lite, pg} {
		var got time.Time
		require.NoError(t, TimeScanner{T: &got}.Scan(d.Time(in)))
		require.True(t, want.Equal(got) && got.Location() == time.UTC, "%s: %s", d.Name(), got)
		require.Nil(t, d.Time(time.Time{}))
		require.NoError(t, TimeScanner{T: &got}.Scan(nil))
		require.True(t, got.IsZero())
	}
	require.Equal(t, want, StoredTime(in))
	var got time.Time
	require.Error(t, TimeScanner{T: &got}.Scan("yesterday"))
	require.Nil(t, Bytes(nil))
	require.Nil(t, Bytes([]byte{}))
}
