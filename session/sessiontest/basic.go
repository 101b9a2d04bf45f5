package sessiontest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/session"
)

func testCreateThenGet(t *testing.T, s session.Store) {
	key := newKey(t)
	state := json.RawMessage(`{"step": 1}`)
	created := create(t, s, key, state)
	require.Equal(t, key, created.Key)
	require.Equal(t, string(state), string(created.State))
	require.Zero(t, created.Version, "a new session is at version 0")
	require.Zero(t, created.EventCount)
	require.Empty(t, created.Events)
	requireRecentTime(t, created.CreatedAt, "CreatedAt")
	requireRecentTime(t, created.UpdatedAt, "UpdatedAt")

	got := get(t, s, key, 10)
	require.Equal(t, key, got.Key)
	require.Equal(t, string(state), string(got.State))
	require.Zero(t, got.Version)
	require.Zero(t, got.EventCount)
	require.Empty(t, got.Events)
	requireSameTime(t, created.CreatedAt, got.CreatedAt, "CreatedAt")
	requireSameTime(t, created.UpdatedAt, got.UpdatedAt, "UpdatedAt")
}

func testCreateNilState(t *testing.T, s session.Store) {
	key := newKey(t)
	created := create(t, s, key, nil)
	require.Nil(t, created.State)
	require.Nil(t, get(t, s, key, 0).State, "an empty state comes back nil")
}

func testCreateExists(t *testing.T, s session.Store) {
	ctx := context.Background()
	key := newKey(t)
	create(t, s, key, json.RawMessage(`"first"`))
	mustAppend(t, s, key, 0, turn("r1", 1))

	_, err := s.Create(ctx, key, json.RawMessage(`"second"`))
	require.ErrorIs(t, err, session.ErrExists)

	got := get(t, s, key, 10)
	require.Equal(t, `"first"`, string(got.State), "a failed Create changes nothing")
	require.EqualValues(t, 1, got.Version)
	require.Len(t, got.Events, 1)
}

func testNotFound(t *testing.T, s session.Store) {
	ctx := context.Background()
	key := newKey(t)

	_, err := s.Get(ctx, key, 10)
	require.ErrorIs(t, err, session.ErrNotFound, "Get")
	_, err = s.Append(ctx, key, 0, turn("r1", 1))
	require.ErrorIs(t, err, session.ErrNotFound, "Append")
	_, err = s.FindTurn(ctx, key, "r1")
	require.ErrorIs(t, err, session.ErrNotFound, "FindTurn without a session")
	require.ErrorIs(t, s.Delete(ctx, key), session.ErrNotFound, "Delete")

	_, err = s.Get(ctx, key, 10)
	require.ErrorIs(t, err, session.ErrNotFound, "Append must not create the session")

	create(t, s, key, nil)
	mustAppend(t, s, key, 0, turn("r1", 1))
	_, err = s.FindTurn(ctx, key, "r2")
	require.ErrorIs(t, err, session.ErrNotFound, "FindTurn of a request with no turn")
}

// testOwnerMismatch: another user naming an existing conversation of the same app gets
// ErrOwnerMismatch from every method, and nothing changes (G7).
func testOwnerMismatch(t *testing.T, s session.Store) {
	ctx := context.Background()
	owner := newKey(t)
	create(t, s, owner, json.RawMessage(`{"owner":true}`))
	first := mustAppend(t, s, owner, 0, turn("r1", 2))

	intruder := owner
	intruder.User = "intruder-" + randID(t)

	_, err := s.Get(ctx, intruder, 10)
	require.ErrorIs(t, err, session.ErrOwnerMismatch, "Get")
	_, err = s.Create(ctx, intruder, json.RawMessage(`{"owner":false}`))
	require.ErrorIs(t, err, session.ErrOwnerMismatch, "Create")
	_, err = s.Append(ctx, intruder, 1, session.Turn{RequestID: "r2", Events: turn("r2", 1).Events, State: json.RawMessage(`{"owner":false}`)})
	require.ErrorIs(t, err, session.ErrOwnerMismatch, "Append at the current version")
	_, err = s.Append(ctx, intruder, 0, turn("r1", 2))
	require.ErrorIs(t, err, session.ErrOwnerMismatch, "Append of a stored turn")
	_, err = s.FindTurn(ctx, intruder, "r1")
	require.ErrorIs(t, err, session.ErrOwnerMismatch, "FindTurn")
	require.ErrorIs(t, s.Delete(ctx, intruder), session.ErrOwnerMismatch, "Delete")

	got := get(t, s, owner, 10)
	require.Equal(t, `{"owner":true}`, string(got.State))
	require.EqualValues(t, 1, got.Version)
	require.EqualValues(t, 2, got.EventCount)
	requireSameEvents(t, first.Events, got.Events)
}

func testInvalidKey(t *testing.T, s session.Store) {
	ctx := context.Background()
	valid := newKey(t)
	create(t, s, valid, nil)
	for name, key := range map[string]session.Key{
		"app":          {User: valid.User, Conversation: valid.Conversation},
		"user":         {App: valid.App, Conversation: valid.Conversation},
		"conversation": {App: valid.App, User: valid.User},
	} {
		t.Run("empty "+name, func(t *testing.T) {
			_, err := s.Get(ctx, key, 10)
			require.ErrorIs(t, err, session.ErrInvalid, "Get")
			_, err = s.Create(ctx, key, nil)
			require.ErrorIs(t, err, session.ErrInvalid, "Create")
			_, err = s.Append(ctx, key, 0, turn("r1", 1))
			require.ErrorIs(t, err, session.ErrInvalid, "Append")
			_, err = s.FindTurn(ctx, key, "r1")
			require.ErrorIs(t, err, session.ErrInvalid, "FindTurn")
			require.ErrorIs(t, s.Delete(ctx, key), session.ErrInvalid, "Delete")
		})
	}
	got := get(t, s, valid, 10)
	require.Zero(t, got.Version, "invalid calls change nothing")
}

func testInvalidTurn(t *testing.T, s session.Store) {
	ctx := context.Background()
	key := newKey(t)
	create(t, s, key, json.RawMessage(`"s"`))

	foreign := turn("r1", 2)
	foreign.Events[1].RequestID = "someone-else"
	nul, badUTF8, farFuture := turn("r1", 1), turn("r1", 1), turn("r1", 1)
	nul.Events[0].Text = "a\x00b"
	badUTF8.Events[0].Text = "\xff\xfe"
	farFuture.Events[0].Time = time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC)
	for name, tr := range map[string]session.Turn{
		"empty request id":     {Events: turn("r1", 1).Events},
		"no events":            {RequestID: "r1"},
		"foreign request id":   foreign,
		"NUL in text":          nul,
		"invalid UTF-8 text":   badUTF8,
		"time after year 9999": farFuture,
	} {
		tr.State = json.RawMessage(`"changed"`)
		_, err := s.Append(ctx, key, 0, tr)
		require.ErrorIs(t, err, session.ErrInvalid, name)
	}
	_, err := s.FindTurn(ctx, key, "")
	require.ErrorIs(t, err, session.ErrInvalid, "FindTurn with an empty request id")

	got := get(t, s, key, 10)
	require.Zero(t, got.Version, "invalid turns change nothing")
	require.Zero(t, got.EventCount)
	require.Equal(t, `"s"`, string(got.State))

	// An event may name the turn's own request id.
	own := turn("r1", 2)
	own.Events[0].RequestID = "r1"
	mustAppend(t, s, key, 0, own)
}

func testAppendFillsSeq(t *testing.T, s session.Store) {
	key := newKey(t)
	create(t, s, key, nil)

	t1, t2 := turn("r1", 3), turn("r2", 2)
	ap1 := mustAppend(t, s, key, 0, t1)
	requireSameEvents(t, stored(t1, 1), ap1.Events)
	ap2 := mustAppend(t, s, key, 1, t2)
	requireSameEvents(t, stored(t2, 4), ap2.Events)

	got := get(t, s, key, 100)
	require.EqualValues(t, 5, got.EventCount)
	requireSameEvents(t, append(stored(t1, 1), stored(t2, 4)...), got.Events)
	for i, e := range got.Events {
		require.EqualValues(t, i+1, e.Seq, "Seq is 1-based and contiguous")
	}
}

func testVersionBumps(t *testing.T, s session.Store) {
	key := newKey(t)
	create(t, s, key, nil)
	for v := range int64(5) {
		ap := mustAppend(t, s, key, v, turn(randID(t), 1))
		require.Equal(t, v+1, ap.Version)
		require.Equal(t, v+1, get(t, s, key, 0).Version)
	}
}

func testStateReplace(t *testing.T, s session.Store) {
	key := newKey(t)
	create(t, s, key, json.RawMessage(`{"a":1}`))

	mustAppend(t, s, key, 0, turn("r1", 1))
	require.Equal(t, `{"a":1}`, string(get(t, s, key, 0).State), "a nil Turn.State keeps the state")

	tr := turn("r2", 1)
	tr.State = json.RawMessage(`{"a":2}`)
	mustAppend(t, s, key, 1, tr)
	require.Equal(t, `{"a":2}`, string(get(t, s, key, 0).State), "a Turn.State replaces the state")

	mustAppend(t, s, key, 2, turn("r3", 1))
	require.Equal(t, `{"a":2}`, string(get(t, s, key, 0).State))
}

func testGetRecent(t *testing.T, s session.Store) {
	key := newKey(t)
	create(t, s, key, nil)
	var all []session.Event
	for i := range 3 {
		tr := turn(randID(t), 2)
		all = append(all, stored(tr, int64(len(all)+1))...)
		mustAppend(t, s, key, int64(i), tr)
	}

	for _, recent := range []int{1, 4, 6, 7, 1000} {
		got := get(t, s, key, recent)
		require.EqualValues(t, 6, got.EventCount, "recent=%d", recent)
		require.EqualValues(t, 3, got.Version)
		requireSameEvents(t, all[max(0, 6-recent):], got.Events)
	}
	for _, recent := range []int{0, -1} {
		got := get(t, s, key, recent)
		require.Empty(t, got.Events, "recent=%d returns no events", recent)
		require.EqualValues(t, 6, got.EventCount, "recent=%d still counts the history", recent)
	}
}

func testDuplicateAppend(t *testing.T, s session.Store) {
	ctx := context.Background()
	key := newKey(t)
	create(t, s, key, json.RawMessage(`"before"`))
	tr := turn("r1", 2)
	tr.State = json.RawMessage(`"after r1"`)
	first := mustAppend(t, s, key, 0, tr)

	// The same request at the current version: a no-op returning the stored turn, even when
	// the events differ this time (the model answered differently on a retry).
	again := turn("r1", 3)
	again.Events[0].Text = "a different answer"
	again.State = json.RawMessage(`"after the retry"`)
	dup, err := s.Append(ctx, key, 1, again)
	require.NoError(t, err)
	require.True(t, dup.Duplicate)
	require.EqualValues(t, 1, dup.Version, "a duplicate reports the current version")
	requireSameEvents(t, first.Events, dup.Events)

	got := get(t, s, key, 10)
	require.EqualValues(t, 1, got.Version, "a duplicate bumps nothing")
	require.EqualValues(t, 2, got.EventCount)
	require.Equal(t, `"after r1"`, string(got.State), "a duplicate leaves the state")
	requireSameEvents(t, first.Events, got.Events)

	// An older request's turn, no longer the newest (a redelivery after an inbox purge or an
	// offset reset): still a duplicate, whatever the store loads as recent.
	mustAppend(t, s, key, 1, turn("r2", 1))
	old, err := s.Append(ctx, key, 2, turn("r1", 2))
	require.NoError(t, err)
	require.True(t, old.Duplicate, "an older request's turn is not stored twice")
	requireSameEvents(t, first.Events, old.Events)
	got = get(t, s, key, 10)
	require.EqualValues(t, 2, got.Version)
	require.EqualValues(t, 3, got.EventCount)
}

func testStaleAppend(t *testing.T, s session.Store) {
	ctx := context.Background()
	key := newKey(t)
	create(t, s, key, nil)
	mustAppend(t, s, key, 0, turn("r1", 1))

	_, err := s.Append(ctx, key, 0, turn("r2", 1))
	require.ErrorIs(t, err, session.ErrConflict, "a stale version")
	_, err = s.Append(ctx, key, 0, turn("r1", 1))
	require.ErrorIs(t, err, session.ErrConflict, "a stale version, even for a stored turn")
	_, err = s.Append(ctx, key, 5, turn("r2", 1))
	require.ErrorIs(t, err, session.ErrConflict, "a version from the future")
	_, err = s.Append(ctx, key, -1, turn("r2", 1))
	require.ErrorIs(t, err, session.ErrConflict, "a negative version")

	got := get(t, s, key, 10)
	require.EqualValues(t, 1, got.Version)
	require.EqualValues(t, 1, got.EventCount)
	_, err = s.FindTurn(ctx, key, "r2")
	require.ErrorIs(t, err, session.ErrNotFound, "a conflicting turn is not stored")
}

func testFindTurnOld(t *testing.T, s session.Store) {
	ctx := context.Background()
	key := newKey(t)
	create(t, s, key, nil)
	first := turn("first", 3)
	mustAppend(t, s, key, 0, first)
	for v := int64(1); v < 30; v++ {
		mustAppend(t, s, key, v, turn(randID(t), 2))
	}
	require.Len(t, get(t, s, key, 2).Events, 2)

	found, err := s.FindTurn(ctx, key, "first")
	require.NoError(t, err)
	requireSameEvents(t, stored(first, 1), found)
}
