package sqldialect_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/internal/sqldialect"
	_ "github.com/turnstile-go/turnstile/internal/sqltest" // registers the "sqlite" driver
)

// newPool opens a pool of private in-memory SQLite databases: connections are cheap, and
// each test has a *sql.DB of its own, as the pool settings are per *sql.DB.
func newPool(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", ":memory:")
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

func TestCheckPoolFindsTheDefaultIdleLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newPool(t)
	err := sqldialect.CheckPool(ctx, db, 8)
	require.ErrorIs(t, err, sqldialect.ErrPoolTooSmall, "database/sql keeps 2 idle connections by default")
	require.NoError(t, sqldialect.SizePool(db, 8))
	require.NoError(t, sqldialect.CheckPool(ctx, db, 8))
	require.Equal(t, 8, db.Stats().Idle, "the checked connections stay in the pool")
}

func TestSizePoolDefault(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newPool(t)
	require.NoError(t, sqldialect.SizePool(db, 0))
	require.NoError(t, sqldialect.CheckPool(ctx, db, sqldialect.DefaultConcurrency))
}

func TestSizePoolWithinMaxOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newPool(t)
	db.SetMaxOpenConns(4)
	err := sqldialect.SizePool(db, 8)
	require.ErrorIs(t, err, sqldialect.ErrPoolTooSmall, "an explicit concurrency above MaxOpenConns is refused")
	require.ErrorContains(t, err, "MaxOpenConns is 4")
	require.ErrorIs(t, sqldialect.CheckPool(ctx, db, 8), sqldialect.ErrPoolTooSmall, "and CheckPool does not wait for connections it cannot get")
	require.ErrorIs(t, sqldialect.CheckPool(ctx, db, 4), sqldialect.ErrPoolTooSmall, "the refused SizePool changed nothing")

	require.NoError(t, sqldialect.SizePool(db, 0), "the default concurrency is lowered to MaxOpenConns")
	require.NoError(t, sqldialect.CheckPool(ctx, db, 4))
}

func TestSizePoolNeverLowers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newPool(t)
	require.NoError(t, sqldialect.SizePool(db, 16))
	require.NoError(t, sqldialect.SizePool(db, 4), "a second store on the same *sql.DB")
	require.NoError(t, sqldialect.CheckPool(ctx, db, 16), "the larger limit stands")
}

func TestSizePoolNegativeLeavesThePool(t *testing.T) {
	t.Parallel()
	db := newPool(t)
	require.NoError(t, sqldialect.SizePool(db, -1))
	require.ErrorIs(t, sqldialect.CheckPool(context.Background(), db, 8), sqldialect.ErrPoolTooSmall,
		"the idle limit is still database/sql's 2")
}

func TestCheckSized(t *testing.T) {
	t.Parallel()
	db := newPool(t)
	require.NoError(t, sqldialect.CheckSized(db, 100), "a pool never sized: only MaxOpenConns can be checked")
	require.NoError(t, sqldialect.SizePool(db, 8))
	require.NoError(t, sqldialect.CheckSized(db, 8))
	err := sqldialect.CheckSized(db, 9)
	require.ErrorIs(t, err, sqldialect.ErrPoolTooSmall)
	require.ErrorContains(t, err, "sized for 8")

	db.SetMaxOpenConns(4)
	require.ErrorIs(t, sqldialect.CheckSized(db, 8), sqldialect.ErrPoolTooSmall, "MaxOpenConns lowered since")
	require.NoError(t, sqldialect.CheckSized(db, 4))
}
