package sqlsession_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/internal/sqltest"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/session/sqlsession"
)

// TestCacheAgreesWithTheDatabase: two stores with Options.Cache on the same tables (two
// members) append to and read a few sessions in a random order, with sessions deleted (one by
// one and by user) and created again under the same key, by another user too; every Get of
// either returns what a store without a cache reads, whatever the other wrote meanwhile.
func TestCacheAgreesWithTheDatabase(t *testing.T) {
	t.Parallel()
	for _, db := range sqltest.DBs {
		for _, batched := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/batched=%v", db.Name, batched), func(t *testing.T) {
				t.Parallel()
				sqlDB := db.Open(t)
				prefix := sqltest.Prefix(t, sqlDB, db.Postgres)
				opts := sqlsession.Options{TablePrefix: prefix, Concurrency: 4, Cache: 3}
				if batched {
					opts.Batch = batching
				}
				members := []*sqlsession.Store{newStoreWith(t, db, sqlDB, opts), newStoreWith(t, db, sqlDB, opts)}
				plain := newStoreWith(t, db, sqlDB, sqlsession.Options{TablePrefix: prefix, Concurrency: 4})
				checkCache(t, members, plain, rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1)))
			})
		}
	}
}

func checkCache(t *testing.T, members []*sqlsession.Store, plain *sqlsession.Store, rnd *rand.Rand) {
	ctx := context.Background()
	users := []string{"ann", "bob"}
	keys := make([]session.Key, 5) // more sessions than the cache holds, so that some are dropped
	for i := range keys {
		keys[i] = session.Key{App: "app", Conversation: fmt.Sprintf("c%d", i), User: users[0]}
		_, err := plain.Create(ctx, keys[i], nil)
		require.NoError(t, err)
	}
	turns := 0
	for step := range 400 {
		i := rnd.IntN(len(keys))
		key, m := keys[i], members[rnd.IntN(len(members))]
		switch op := rnd.IntN(20); {
		case op == 0: // the session deleted and created again, maybe for the other user
			require.NoError(t, members[rnd.IntN(len(members))].Delete(ctx, key))
			key.User = users[rnd.IntN(len(users))]
			keys[i] = key
			_, err := plain.Create(ctx, key, nil)
			require.NoError(t, err)
		case op == 1: // every session of a user deleted, then the keys created again
			user := users[rnd.IntN(len(users))]
			_, err := m.DeleteUser(ctx, "app", user)
			require.NoError(t, err)
			for j, k := range keys {
				if k.User == user {
					_, err := plain.Create(ctx, k, nil)
					require.NoError(t, err, "step %d: create %s again", step, keys[j])
				}
			}
		case op < 12: // a turn of one to three events, appended by either member
			s, err := m.Get(ctx, key, 0)
			require.NoError(t, err)
			turns++
			req := fmt.Sprintf("r%d", turns)
			var events []session.Event
			for e := range 1 + rnd.IntN(3) {
				events = append(events, session.Event{ID: fmt.Sprintf("%s-%d", req, e), Author: "user",
					Text: fmt.Sprintf("%s event %d", req, e), Data: []byte(`{"n":1}`), Time: time.Now()})
			}
			_, err = m.Append(ctx, key, s.Version, session.Turn{RequestID: req, Events: events})
			require.NoError(t, err, "step %d", step)
		default: // a read of the newest events, as many as a turn's history or fewer
			recent := rnd.IntN(8)
			got, err := m.Get(ctx, key, recent)
			require.NoError(t, err, "step %d", step)
			want, err := plain.Get(ctx, key, recent)
			require.NoError(t, err)
			require.Equal(t, want, got, "step %d: Get(%s, %d) through a cache", step, key, recent)
			if len(got.Events) > 0 {
				got.Events[0].Text = "changed by the caller" // the caller's copy, not the cache's
				again, err := m.Get(ctx, key, recent)
				require.NoError(t, err)
				require.Equal(t, want, again)
			}
			other := key
			other.User = users[0]
			if key.User == users[0] {
				other.User = users[1]
			}
			_, err = m.Get(ctx, other, recent)
			require.ErrorIs(t, err, session.ErrOwnerMismatch, "step %d", step)
		}
	}
	require.Positive(t, turns)
	for _, m := range members {
		require.Positive(t, sqlsession.CachedEvents(m), "a cache that never served an event tests nothing")
	}
}

// TestCacheSeesASessionCreatedAgain: a member holds a session's events; another deletes the
// session, creates it again and appends as many events: the first member's Get returns the
// new session's events, not the ones it held (the same count, another row).
func TestCacheSeesASessionCreatedAgain(t *testing.T) {
	t.Parallel()
	for _, db := range sqltest.DBs {
		t.Run(db.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			sqlDB := db.Open(t)
			prefix := sqltest.Prefix(t, sqlDB, db.Postgres)
			opts := sqlsession.Options{TablePrefix: prefix, Concurrency: 4, Cache: 8}
			a, b := newStoreWith(t, db, sqlDB, opts), newStoreWith(t, db, sqlDB, opts)
			key := session.Key{App: "app", Conversation: "c", User: "ann"}
			turns := func(s *sqlsession.Store, text string) {
				_, err := s.Create(ctx, key, nil)
				require.NoError(t, err)
				for i := range 3 {
					req := fmt.Sprintf("%s-%d", text, i)
					_, err := s.Append(ctx, key, int64(i), session.Turn{RequestID: req,
						Events: []session.Event{{ID: req, Author: "user", Text: req, Time: time.Now()}}})
					require.NoError(t, err)
				}
			}
			turns(a, "first")
			held, err := b.Get(ctx, key, 2)
			require.NoError(t, err)
			require.Len(t, held.Events, 2)
			require.NoError(t, a.Delete(ctx, key))
			turns(a, "second")
			got, err := b.Get(ctx, key, 2)
			require.NoError(t, err)
			require.Len(t, got.Events, 2)
			for i, e := range got.Events {
				require.Equal(t, fmt.Sprintf("second-%d", i+1), e.Text)
			}
		})
	}
}

func TestCacheRefusesANegativeSize(t *testing.T) {
	t.Parallel()
	_, err := sqlsession.New(sqltest.SQLiteMemory(t), sqlsession.SQLite, sqlsession.Options{Cache: -1})
	require.ErrorContains(t, err, "Options.Cache")
}
