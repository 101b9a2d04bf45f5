package sqlsession_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
	"github.com/turnstile-go/turnstile/internal/sqltest"
	"github.com/turnstile-go/turnstile/session/sqlsession"
)

// A Store and an Inbox built with the default options keep DefaultConcurrency connections
// between calls, where database/sql alone keeps 2.
func TestNewSizesThePool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := sqltest.SQLiteFile(t)
	require.ErrorIs(t, sqlsession.CheckPool(ctx, db, 8), sqlsession.ErrPoolTooSmall, "database/sql's default")

	_, err := sqlsession.New(db, sqlsession.SQLite, sqlsession.Options{})
	require.NoError(t, err)
	require.NoError(t, sqlsession.CheckPool(ctx, db, sqlsession.DefaultConcurrency))
}

// A pool configured by its owner stays as it is with a negative Concurrency, and a
// Concurrency above its MaxOpenConns is refused by both stores.
func TestNewRespectsTheCallersPool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := sqltest.SQLiteFile(t)
	db.SetMaxOpenConns(8)

	_, err := sqlsession.New(db, sqlsession.SQLite, sqlsession.Options{Concurrency: -1})
	require.NoError(t, err)
	require.ErrorIs(t, sqlsession.CheckPool(ctx, db, 8), sqlsession.ErrPoolTooSmall, "the idle limit was left alone")

	_, err = sqlsession.New(db, sqlsession.SQLite, sqlsession.Options{Concurrency: 12})
	require.ErrorIs(t, err, sqlsession.ErrPoolTooSmall)
	_, err = sqlinbox.New(db, sqlinbox.SQLite, sqlinbox.Options{Concurrency: 12})
	require.ErrorIs(t, err, sqlinbox.ErrPoolTooSmall)

	_, err = sqlinbox.New(db, sqlinbox.SQLite, sqlinbox.Options{Concurrency: 8})
	require.NoError(t, err)
	require.NoError(t, sqlinbox.CheckPool(ctx, db, 8))
}
