package sqlsession_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/internal/sqltest"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/session/sqlsession"
)

// List finds a conversation's session whoever owns it, and lists what DeleteUser and
// DeleteIdle then delete.
func TestList(t *testing.T) {
	t.Parallel()
	for _, db := range sqltest.DBs {
		t.Run(db.Name, func(t *testing.T) {
			t.Parallel()
			s, _ := newStore(t, db)
			ctx := context.Background()
			app := "app-" + sqltest.ID(t)
			keys := []session.Key{{App: app, User: "u-1", Conversation: "c-1"}, {App: app, User: "u-1", Conversation: "c-2"},
				{App: app, User: "u-2", Conversation: "c-3"}, {App: "other-" + app, User: "u-1", Conversation: "c-1"}}
			for _, k := range keys {
				_, err := s.Create(ctx, k, nil)
				require.NoError(t, err)
			}
			_, err := s.Append(ctx, keys[0], 0, turnOf("r1", 2))
			require.NoError(t, err)

			got, err := s.List(ctx, sqlsession.ListFilter{App: app, Conversation: "c-1"})
			require.NoError(t, err)
			require.Len(t, got, 1)
			require.Equal(t, keys[0], got[0].Key, "the owner comes back with the conversation")
			require.EqualValues(t, 1, got[0].Version)
			require.EqualValues(t, 2, got[0].EventCount)
			require.False(t, got[0].UpdatedAt.Before(got[0].CreatedAt))

			got, err = s.List(ctx, sqlsession.ListFilter{App: app, User: "u-1"})
			require.NoError(t, err)
			require.Equal(t, []session.Key{keys[1], keys[0]}, summaryKeys(got), "least recently updated first")
			got, err = s.List(ctx, sqlsession.ListFilter{App: app, User: "u-1", Limit: 1})
			require.NoError(t, err)
			require.Equal(t, []session.Key{keys[1]}, summaryKeys(got))
			got, err = s.List(ctx, sqlsession.ListFilter{App: app, User: "u-1", Conversation: "c-3"})
			require.NoError(t, err)
			require.Empty(t, got, "c-3 is u-2's")

			got, err = s.List(ctx, sqlsession.ListFilter{App: app, UpdatedBefore: time.Now().Add(-time.Hour)})
			require.NoError(t, err)
			require.Empty(t, got)
			idle, err := s.List(ctx, sqlsession.ListFilter{App: app, UpdatedBefore: time.Now().Add(time.Hour)})
			require.NoError(t, err)
			require.Len(t, idle, 3)

			listed, err := s.List(ctx, sqlsession.ListFilter{App: app, User: "u-1"})
			require.NoError(t, err)
			n, err := s.DeleteUser(ctx, app, "u-1")
			require.NoError(t, err)
			require.EqualValues(t, len(listed), n, "List shows what DeleteUser deletes")
			n, err = s.DeleteIdle(ctx, app, time.Now().Add(time.Hour))
			require.NoError(t, err)
			require.EqualValues(t, 1, n)

			_, err = s.List(ctx, sqlsession.ListFilter{})
			require.ErrorIs(t, err, session.ErrInvalid)
		})
	}
}

func summaryKeys(s []sqlsession.Summary) []session.Key {
	var out []session.Key
	for _, x := range s {
		out = append(out, x.Key)
	}
	return out
}
