package sessiontest

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/session"
)

// testAppsIsolated: (app, conversation) is the unit; one conversation id in two apps is two
// sessions, with owners of their own.
func testAppsIsolated(t *testing.T, s session.Store) {
	ctx := context.Background()
	a := newKey(t)
	b := session.Key{App: "other-" + a.App, User: "user-" + randID(t), Conversation: a.Conversation}
	create(t, s, a, json.RawMessage(`"a"`))
	create(t, s, b, json.RawMessage(`"b"`))
	sameUser := b
	sameUser.User = a.User
	_, err := s.Get(ctx, sameUser, 0)
	require.ErrorIs(t, err, session.ErrOwnerMismatch, "b's owner is b's user, whatever a's is")

	mustAppend(t, s, a, 0, turn("r1", 2))
	gb := get(t, s, b, 10)
	require.Zero(t, gb.Version)
	require.Empty(t, gb.Events)
	require.Equal(t, `"b"`, string(gb.State))
	_, err = s.FindTurn(ctx, b, "r1")
	require.ErrorIs(t, err, session.ErrNotFound)

	mustAppend(t, s, b, 0, turn("r1", 1))
	require.NoError(t, s.Delete(ctx, a))
	gb = get(t, s, b, 10)
	require.EqualValues(t, 1, gb.Version)
	require.Len(t, gb.Events, 1)
}
