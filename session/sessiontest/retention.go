package sessiontest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/internal/suite"
	"github.com/turnstile-go/turnstile/session"
)

// retentionCases are the subtests of session.Retention, run when the store implements it
// (under "Retention"). Each works in apps of its own, so a shared store is fine.
var retentionCases = []suite.Case[session.Retention]{
	{Name: "DeleteUser", Run: testDeleteUser},
	{Name: "DeleteUserThenFreshSession", Run: testDeleteUserFresh},
	{Name: "DeleteIdle", Run: testDeleteIdle},
	{Name: "DeleteIdleUnderTraffic", Run: testDeleteIdleUnderTraffic},
	{Name: "RetentionInvalid", Run: testRetentionInvalid},
}

// testDeleteUser: every session of the user in the app goes, with its history; other users'
// sessions and the user's sessions of other apps stay.
func testDeleteUser(t *testing.T, s session.Retention) {
	ctx := context.Background()
	app, other := "app-"+randID(t), "app-"+randID(t)
	user, neighbour := "user-"+randID(t), "user-"+randID(t)
	var gone []session.Key
	for i := range 3 {
		k := session.Key{App: app, User: user, Conversation: "conv-" + randID(t)}
		create(t, s, k, nil)
		mustAppend(t, s, k, 0, turn("req-"+randID(t), i+1))
		gone = append(gone, k)
	}
	kept := []session.Key{
		{App: app, User: neighbour, Conversation: "conv-" + randID(t)},
		{App: other, User: user, Conversation: "conv-" + randID(t)},
	}
	for _, k := range kept {
		create(t, s, k, nil)
		mustAppend(t, s, k, 0, turn("req-"+randID(t), 2))
	}

	n, err := s.DeleteUser(ctx, app, user)
	require.NoError(t, err)
	require.EqualValues(t, 3, n)
	for _, k := range gone {
		_, err := s.Get(ctx, k, 10)
		require.ErrorIs(t, err, session.ErrNotFound, "%s", k)
	}
	for _, k := range kept {
		sess := get(t, s, k, 10)
		require.Len(t, sess.Events, 2, "%s keeps its history", k)
	}
	n, err = s.DeleteUser(ctx, app, user)
	require.NoError(t, err)
	require.Zero(t, n, "nothing left to delete")
}

// testDeleteUserFresh: after the user's sessions are deleted, the same conversation starts
// again at version 0 with no history and no state, and the old turns are not found.
func testDeleteUserFresh(t *testing.T, s session.Retention) {
	ctx := context.Background()
	k := newKey(t)
	create(t, s, k, []byte(`{"plan":"gold"}`))
	old := turn("req-"+randID(t), 3)
	mustAppend(t, s, k, 0, old)
	_, err := s.DeleteUser(ctx, k.App, k.User)
	require.NoError(t, err)

	fresh := create(t, s, k, nil)
	require.Zero(t, fresh.Version)
	require.Zero(t, fresh.EventCount)
	require.Nil(t, fresh.State)
	_, err = s.FindTurn(ctx, k, old.RequestID)
	require.ErrorIs(t, err, session.ErrNotFound)
	ap := mustAppend(t, s, k, 0, turn("req-"+randID(t), 2))
	require.EqualValues(t, 1, ap.Events[0].Seq, "the new history starts at 1")
	require.EqualValues(t, 2, get(t, s, k, 10).EventCount)
}

// idleCutoff creates old sessions in app and returns them with a cutoff, read from the
// store's own clock, that is after their UpdatedAt: markers in a scratch app are created
// until one is updated later than every old session.
func idleCutoff(t *testing.T, s session.Retention, app string, n int) ([]session.Key, time.Time) {
	t.Helper()
	var (
		old    []session.Key
		newest time.Time
	)
	for range n {
		k := session.Key{App: app, User: "user-" + randID(t), Conversation: "conv-" + randID(t)}
		create(t, s, k, nil)
		mustAppend(t, s, k, 0, turn("req-"+randID(t), 1))
		if u := get(t, s, k, 0).UpdatedAt; u.After(newest) {
			newest = u
		}
		old = append(old, k)
	}
	scratch := "app-" + randID(t)
	for {
		marker := create(t, s, session.Key{App: scratch, User: "u", Conversation: "c-" + randID(t)}, nil)
		if marker.UpdatedAt.After(newest) {
			return old, marker.UpdatedAt
		}
	}
}

// testDeleteIdle: sessions of the app last updated before the cutoff go; those updated since,
// and those of other apps, stay.
func testDeleteIdle(t *testing.T, s session.Retention) {
	ctx := context.Background()
	app := "app-" + randID(t)
	old, cutoff := idleCutoff(t, s, app, 4)
	// One old session becomes active again; one new session appears.
	sess := get(t, s, old[0], 0)
	mustAppend(t, s, old[0], sess.Version, turn("req-"+randID(t), 1))
	young := session.Key{App: app, User: "user-" + randID(t), Conversation: "conv-" + randID(t)}
	create(t, s, young, nil)
	elsewhere := newKey(t)
	create(t, s, elsewhere, nil)

	n, err := s.DeleteIdle(ctx, app, cutoff)
	require.NoError(t, err)
	require.EqualValues(t, 3, n)
	for _, k := range old[1:] {
		_, err := s.Get(ctx, k, 0)
		require.ErrorIs(t, err, session.ErrNotFound, "%s", k)
	}
	for _, k := range []session.Key{old[0], young, elsewhere} {
		get(t, s, k, 0)
	}
}

// testDeleteIdleUnderTraffic: while DeleteIdle runs, turns go on in other sessions of the app:
// they all keep their sessions and their turns, and every idle session goes.
func testDeleteIdleUnderTraffic(t *testing.T, s session.Retention) {
	ctx := context.Background()
	app := "app-" + randID(t)
	old, cutoff := idleCutoff(t, s, app, 30)
	var (
		wg      sync.WaitGroup
		deleted int64
		delErr  error
		busy    = make([]session.Key, 20)
		errs    = make([]error, len(busy))
	)
	wg.Go(func() { deleted, delErr = s.DeleteIdle(ctx, app, cutoff) })
	for i := range busy {
		busy[i] = session.Key{App: app, User: "user-" + randID(t), Conversation: "conv-" + randID(t)}
		wg.Go(func() {
			if _, err := s.Create(ctx, busy[i], nil); err != nil {
				errs[i] = err
				return
			}
			for v := range int64(3) {
				if _, err := s.Append(ctx, busy[i], v, turn("req-"+randID(t), 2)); err != nil {
					errs[i] = err
					return
				}
			}
		})
	}
	wg.Wait()
	require.NoError(t, delErr)
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.EqualValues(t, len(old), deleted)
	for _, k := range old {
		_, err := s.Get(ctx, k, 0)
		require.ErrorIs(t, err, session.ErrNotFound)
	}
	for _, k := range busy {
		sess := get(t, s, k, 10)
		require.EqualValues(t, 3, sess.Version)
		require.EqualValues(t, 6, sess.EventCount)
	}
}

func testRetentionInvalid(t *testing.T, s session.Retention) {
	ctx := context.Background()
	_, err := s.DeleteUser(ctx, "", "u")
	require.ErrorIs(t, err, session.ErrInvalid)
	_, err = s.DeleteUser(ctx, "a", "")
	require.ErrorIs(t, err, session.ErrInvalid)
	_, err = s.DeleteIdle(ctx, "", time.Now())
	require.ErrorIs(t, err, session.ErrInvalid)
}
