package inboxtest

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/internal/suite"
)

// txCases are the subtests of inbox.TxCompleter, run when the inbox implements it (under
// "CompleteTx"): a completion made in a transaction takes effect when it commits, and not
// when it rolls back.
var txCases = []suite.Case[inbox.TxCompleter]{
	{Name: "CommitCompletes", Run: testTxCommit},
	{Name: "RollbackLeavesInProgress", Run: testTxRollback},
	{Name: "Errors", Run: testTxErrors},
}

// completeIn runs CompleteTx in a transaction of its own on b's database, then commits it
// when commit is true and the call succeeded, or rolls it back. It returns CompleteTx's error.
func completeIn(t *testing.T, b inbox.TxCompleter, requestID string, result []byte, commit bool) error {
	t.Helper()
	ctx := context.Background()
	db := b.TxDB()
	require.NotNil(t, db, "TxDB")
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	err = b.CompleteTx(ctx, tx, requestID, result)
	if err == nil && commit {
		require.NoError(t, tx.Commit())
	}
	return err
}

func testTxCommit(t *testing.T, b inbox.TxCompleter) {
	d := delivery(t, 5)
	begin(t, b, d)
	result := []byte(`{"answer":"in a transaction"}`)
	require.NoError(t, completeIn(t, b, d.Key, result, true))
	result[0] = 'X' // the inbox keeps its own copy
	got := getEntry(t, b, d.Key)
	require.Equal(t, inbox.StatusDone, got.Status)
	require.Equal(t, `{"answer":"in a transaction"}`, string(got.Result))
	require.Equal(t, 1, got.Attempts)

	// A done entry stays as it is, in a transaction as outside one.
	require.NoError(t, completeIn(t, b, d.Key, []byte("second"), true))
	require.Equal(t, `{"answer":"in a transaction"}`, string(getEntry(t, b, d.Key).Result))
}

func testTxRollback(t *testing.T, b inbox.TxCompleter) {
	d := delivery(t, 6)
	begin(t, b, d)
	require.NoError(t, completeIn(t, b, d.Key, []byte("rolled back"), false))
	got := getEntry(t, b, d.Key)
	require.Equal(t, inbox.StatusInProgress, got.Status)
	require.Empty(t, got.Result)
	require.Equal(t, 1, got.Attempts)

	require.NoError(t, b.Complete(context.Background(), d.Key, []byte("kept")))
	require.Equal(t, "kept", string(getEntry(t, b, d.Key).Result), "the rolled back result is not the first")
}

func testTxErrors(t *testing.T, b inbox.TxCompleter) {
	ctx := context.Background()
	require.ErrorIs(t, completeIn(t, b, "req-"+randID(t), []byte("x"), true), inbox.ErrNotFound)
	require.ErrorIs(t, completeIn(t, b, "", []byte("x"), true), inbox.ErrInvalid)

	d := delivery(t, 7)
	begin(t, b, d)
	require.NoError(t, b.MarkDead(ctx, d.Key, "poison"))
	require.ErrorIs(t, completeIn(t, b, d.Key, []byte("x"), true), inbox.ErrDead)
	got := getEntry(t, b, d.Key)
	require.Equal(t, inbox.StatusDead, got.Status)
	require.Empty(t, got.Result)
}
