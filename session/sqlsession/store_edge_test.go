package sqlsession_test

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/internal/sqltest"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/session/sqlsession"
)

// The database host accepts TCP but never answers (a failover in progress, a hung server, a
// black-holed proxy). With connect_timeout in the DSN, pgx gives up on its own while the
// caller's context is still live: an infrastructure failure, retryable, not a failed attempt
// (which would dead-letter records while the database is sick).
func TestPostgresConnectTimeoutIsRetryable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // hold the connection open, say nothing
		}
	}()
	db, err := sql.Open("pgx", "postgres://postgres@"+ln.Addr().String()+"/test?sslmode=disable&connect_timeout=1")
	require.NoError(t, err)
	defer db.Close()
	s, err := sqlsession.New(db, sqlsession.PostgreSQL, sqlsession.Options{})
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = s.Get(ctx, session.Key{App: "a", User: "u", Conversation: "c"}, 10)
	require.Error(t, err)
	require.NoError(t, ctx.Err(), "the caller's context is live")
	t.Logf("error: %v (deadline in chain: %v)", err, errors.Is(err, context.DeadlineExceeded))
	var r interface{ Retryable() bool }
	require.True(t, errors.As(err, &r), "a database that does not answer is not retryable: %v", err)
}

// The Runner builds a Result from Append's returned events on the first run and from FindTurn
// on a retry; both must be identical, down to the time's location and precision, and so must
// Get's copy.
func TestAppendMatchesFindTurnAndGet(t *testing.T) {
	paris := time.FixedZone("CEST", 2*3600)
	times := []time.Time{
		time.Date(2025, 6, 7, 8, 9, 10, 123456789, paris),
		time.Date(1969, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(1, 1, 1, 0, 0, 0, 1000, time.UTC),
		time.Now(), // with a monotonic reading
		{},
	}
	for _, db := range sqltest.DBs {
		t.Run(db.Name, func(t *testing.T) {
			s, _ := newStore(t, db)
			ctx := context.Background()
			key := newKey(t)
			_, err := s.Create(ctx, key, nil)
			require.NoError(t, err)
			tr := session.Turn{RequestID: "r1"}
			for i, at := range times {
				tr.Events = append(tr.Events, session.Event{ID: string(rune('a' + i)), Author: "assistant", Text: "t", Time: at, Data: []byte(`{"x":1}`)})
			}
			ap, err := s.Append(ctx, key, 0, tr)
			require.NoError(t, err)
			found, err := s.FindTurn(ctx, key, "r1")
			require.NoError(t, err)
			require.True(t, reflect.DeepEqual(ap.Events, found), "Append %+v\nFindTurn %+v", ap.Events, found)
			sess, err := s.Get(ctx, key, 100)
			require.NoError(t, err)
			require.True(t, reflect.DeepEqual(ap.Events, sess.Events), "Append %+v\nGet %+v", ap.Events, sess.Events)
			dup, err := s.Append(ctx, key, 1, tr)
			require.NoError(t, err)
			require.True(t, dup.Duplicate)
			require.True(t, reflect.DeepEqual(ap.Events, dup.Events))
		})
	}
}

// An event time SQLite's Unix-microsecond column cannot hold (after year 294246) would be
// silently wrapped, and a Result rebuilt on a retry would differ from the first run's: it is
// ErrInvalid on every database.
func TestOutOfRangeTime(t *testing.T) {
	for _, db := range sqltest.DBs {
		t.Run(db.Name, func(t *testing.T) {
			s, _ := newStore(t, db)
			ctx := context.Background()
			key := newKey(t)
			_, err := s.Create(ctx, key, nil)
			require.NoError(t, err)
			far := time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC)
			ap, err := s.Append(ctx, key, 0, session.Turn{RequestID: "r1", Events: []session.Event{{Author: "assistant", Text: "x", Time: far}}})
			if err != nil {
				t.Logf("append: %v (ErrInvalid %v)", err, errors.Is(err, session.ErrInvalid))
				require.ErrorIs(t, err, session.ErrInvalid)
				return
			}
			found, err := s.FindTurn(ctx, key, "r1")
			require.NoError(t, err)
			require.True(t, ap.Events[0].Time.Equal(found[0].Time), "Append returned %s, FindTurn %s", ap.Events[0].Time, found[0].Time)
		})
	}
}
