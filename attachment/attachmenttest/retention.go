package attachmenttest

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/attachment"
	"github.com/turnstile-go/turnstile/internal/suite"
)

// retentionCases are the subtests of attachment.Retention, run when the store implements it
// (under "Retention"). Each works in apps of its own, so a shared store is fine.
var retentionCases = []suite.Case[attachment.Retention]{
	{Name: "DeleteUser", Run: testDeleteUser},
	{Name: "DeleteIdle", Run: testDeleteIdle},
	{Name: "DeleteIdleWhilePutting", Run: testDeleteIdleWhilePutting},
	{Name: "RetentionInvalid", Run: testRetentionInvalid},
}

// testDeleteUser: every attachment of the user in the app goes; another user's entry of the
// same bytes, and the user's attachments in another app, stay whole.
func testDeleteUser(t *testing.T, s attachment.Retention) {
	ctx := context.Background()
	user := newOwner(t)
	neighbour := attachment.Owner{App: user.App, User: "user-" + randID(t)}
	elsewhere := attachment.Owner{App: "app-" + randID(t), User: user.User}
	shared := content(t, 300_000)
	var gone []attachment.Ref
	for _, data := range [][]byte{shared, content(t, 10), nil} {
		gone = append(gone, put(t, s, user, "", data))
	}
	kept := map[attachment.Owner]attachment.Ref{neighbour: put(t, s, neighbour, "", shared), elsewhere: put(t, s, elsewhere, "", shared)}

	n, err := s.DeleteUser(ctx, user.App, user.User)
	require.NoError(t, err)
	require.EqualValues(t, 3, n)
	for _, ref := range gone {
		requireNotFound(t, s, user, ref.ID)
	}
	for owner, ref := range kept {
		require.Equal(t, shared, readAll(t, s, owner, ref.ID), "%s keeps its attachment", owner)
	}
	n, err = s.DeleteUser(ctx, user.App, user.User)
	require.NoError(t, err)
	require.Zero(t, n, "nothing left to delete")
	again := put(t, s, user, "", shared)
	require.Equal(t, shared, readAll(t, s, user, again.ID), "the user can put attachments again")
}

// testDeleteIdle: the app's attachments last put before the cutoff go, whoever owns them; one
// put again after the cutoff, a newer one and another app's stay.
func testDeleteIdle(t *testing.T, s attachment.Retention) {
	ctx := context.Background()
	a := newOwner(t)
	b := attachment.Owner{App: a.App, User: "user-" + randID(t)}
	other := attachment.Owner{App: "app-" + randID(t), User: a.User}
	old := []attachment.Ref{put(t, s, a, "", content(t, 300_000)), put(t, s, b, "", content(t, 20))}
	refreshedData := content(t, 30)
	refreshed := put(t, s, a, "", refreshedData)
	otherApp := put(t, s, other, "", content(t, 40))
	time.Sleep(20 * time.Millisecond)
	cutoff := time.Now()
	time.Sleep(20 * time.Millisecond)
	put(t, s, a, "", refreshedData)
	newer := put(t, s, b, "", content(t, 50))

	n, err := s.DeleteIdle(ctx, a.App, cutoff)
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	requireNotFound(t, s, a, old[0].ID)
	requireNotFound(t, s, b, old[1].ID)
	for _, kept := range []struct {
		owner attachment.Owner
		ref   attachment.Ref
	}{{a, refreshed}, {b, newer}, {other, otherApp}} {
		got, err := s.Stat(ctx, kept.owner, kept.ref.ID)
		require.NoError(t, err, "%s keeps %s", kept.owner, kept.ref.ID)
		require.Equal(t, kept.ref, got)
	}
	n, err = s.DeleteIdle(ctx, a.App, cutoff)
	require.NoError(t, err)
	require.Zero(t, n)
}

// testDeleteIdleWhilePutting: Puts of the same bytes racing DeleteIdle all succeed, and the
// attachment is then either gone or whole.
func testDeleteIdleWhilePutting(t *testing.T, s attachment.Retention) {
	ctx := context.Background()
	owner := newOwner(t)
	data := content(t, 300_000)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 10 {
				_, err := s.Put(ctx, owner, "", "", bytes.NewReader(data))
				assert.NoError(t, err)
			}
		})
	}
	wg.Go(func() {
		for range 10 {
			_, err := s.DeleteIdle(ctx, owner.App, time.Now())
			assert.NoError(t, err)
		}
	})
	wg.Wait()
	id := attachment.IDOf(data)
	if _, err := s.Stat(ctx, owner, id); errors.Is(err, attachment.ErrNotFound) {
		return
	}
	require.Equal(t, data, readAll(t, s, owner, id))
}

// testRetentionInvalid: an empty app or user is ErrInvalid.
func testRetentionInvalid(t *testing.T, s attachment.Retention) {
	ctx := context.Background()
	_, err := s.DeleteUser(ctx, "", "u")
	require.ErrorIs(t, err, attachment.ErrInvalid)
	_, err = s.DeleteUser(ctx, "a", "")
	require.ErrorIs(t, err, attachment.ErrInvalid)
	_, err = s.DeleteIdle(ctx, "", time.Now())
	require.ErrorIs(t, err, attachment.ErrInvalid)
}
