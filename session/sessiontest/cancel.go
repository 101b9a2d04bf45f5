package sessiontest

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/session"
)

// testCancelledContext: every method fails on an ended context and writes nothing.
func testCancelledContext(t *testing.T, s session.Store) {
	key := newKey(t)
	create(t, s, key, json.RawMessage(`"s"`))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()

	_, err := s.Get(ctx, key, 10)
	require.Error(t, err, "Get")
	fresh := newKey(t)
	_, err = s.Create(ctx, fresh, nil)
	require.Error(t, err, "Create")
	tr := turn("r1", 1)
	tr.State = json.RawMessage(`"changed"`)
	_, err = s.Append(ctx, key, 0, tr)
	require.Error(t, err, "Append")
	_, err = s.FindTurn(ctx, key, "r1")
	require.Error(t, err, "FindTurn")
	require.Error(t, s.Delete(ctx, key), "Delete")

	got := get(t, s, key, 10)
	require.Zero(t, got.Version, "a cancelled Append writes nothing")
	require.Equal(t, `"s"`, string(got.State))
	_, err = s.Get(context.Background(), fresh, 0)
	require.ErrorIs(t, err, session.ErrNotFound, "a cancelled Create writes nothing")
}
