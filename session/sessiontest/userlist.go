package sessiontest

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/internal/suite"
	"github.com/turnstile-go/turnstile/session"
)

// userListerCases are the subtests of session.UserLister, run when the store implements it
// (under "UserLister"). Each works in apps of its own, so a shared store is fine.
var userListerCases = []suite.Case[session.UserLister]{
	{Name: "UserSessions", Run: testUserSessions},
}

// testUserSessions: every session of the user in the app, sorted by conversation, and no
// other user's or app's; none is an empty slice; an empty app or user is ErrInvalid; a
// cancelled context fails.
func testUserSessions(t *testing.T, s session.UserLister) {
	ctx := context.Background()
	app, other := "app-"+randID(t), "app-"+randID(t)
	user, neighbour := "user-"+randID(t), "user-"+randID(t)
	var want []session.Key
	for _, conv := range []string{"conv-c-" + randID(t), "conv-a-" + randID(t), "conv-b-" + randID(t)} {
		k := session.Key{App: app, User: user, Conversation: conv}
		create(t, s, k, nil)
		want = append(want, k)
	}
	want[0], want[1], want[2] = want[1], want[2], want[0]
	for _, k := range []session.Key{
		{App: app, User: neighbour, Conversation: "conv-" + randID(t)},
		{App: other, User: user, Conversation: "conv-" + randID(t)},
	} {
		create(t, s, k, nil)
	}

	got, err := s.UserSessions(ctx, app, user)
	require.NoError(t, err)
	require.Equal(t, want, got)

	got, err = s.UserSessions(ctx, app, "user-"+randID(t))
	require.NoError(t, err)
	require.NotNil(t, got)
	require.Empty(t, got)

	_, err = s.UserSessions(ctx, "", user)
	require.ErrorIs(t, err, session.ErrInvalid)
	_, err = s.UserSessions(ctx, app, "")
	require.ErrorIs(t, err, session.ErrInvalid)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = s.UserSessions(cctx, app, user)
	require.Error(t, err)
}
