package sessiontest

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/session"
)

// testDelete: Delete removes one session with its history; the key can be used again.
func testDelete(t *testing.T, s session.Store) {
	ctx := context.Background()
	key := newKey(t)
	create(t, s, key, json.RawMessage(`"old"`))
	mustAppend(t, s, key, 0, turn("r1", 2))
	other := newKey(t)
	create(t, s, other, nil)
	mustAppend(t, s, other, 0, turn("r1", 1))

	require.NoError(t, s.Delete(ctx, key))
	_, err := s.Get(ctx, key, 10)
	require.ErrorIs(t, err, session.ErrNotFound)
	_, err = s.FindTurn(ctx, key, "r1")
	require.ErrorIs(t, err, session.ErrNotFound)
	_, err = s.Append(ctx, key, 1, turn("r2", 1))
	require.ErrorIs(t, err, session.ErrNotFound)
	require.ErrorIs(t, s.Delete(ctx, key), session.ErrNotFound, "a second Delete")

	// The history went with the session: a new session under the key starts empty.
	again := create(t, s, key, nil)
	require.Zero(t, again.Version)
	got := get(t, s, key, 10)
	require.Zero(t, got.EventCount)
	require.Empty(t, got.Events)
	require.Nil(t, got.State)
	_, err = s.FindTurn(ctx, key, "r1")
	require.ErrorIs(t, err, session.ErrNotFound, "the old turn is gone")
	mustAppend(t, s, key, 0, turn("r1", 1))

	require.EqualValues(t, 1, get(t, s, other, 10).EventCount, "Delete touches one session")
}
