package sessiontest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/internal/suite"
	"github.com/turnstile-go/turnstile/session"
)

// txCases are the subtests of session.TxAppender, run when the store implements it (under
// "AppendTx"): the turn and the joined write commit together or not at all.
var txCases = []suite.Case[session.TxAppender]{
	{Name: "JoinedWriteCommitsWithTheTurn", Run: testJoinCommits},
	{Name: "JoinErrorRollsBackTheTurn", Run: testJoinErrorRollsBack},
	{Name: "FailedCommitStoresNeither", Run: testJoinFailedCommit},
	{Name: "NoJoinWithoutAWrite", Run: testNoJoinWithoutWrite},
	{Name: "JoinRace", Run: testJoinRace},
}

// marks is a table of one subtest's own on the store's database, which joined writes fill with
// ids: what a subtest finds there was committed. Its statements hold no parameters (ids are
// letters, digits and dashes), so they read the same on every SQL database.
type marks struct {
	db    *sql.DB
	table string
}

func newMarks(t *testing.T, s session.TxAppender) marks {
	t.Helper()
	m := marks{db: s.TxDB(), table: "sessiontest_marks_" + randID(t)}
	require.NotNil(t, m.db, "TxDB")
	_, err := m.db.ExecContext(context.Background(), "CREATE TABLE "+m.table+" (id VARCHAR(100) PRIMARY KEY)")
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := m.db.ExecContext(ctx, "DROP TABLE "+m.table); err != nil {
			t.Errorf("drop %s: %v", m.table, err)
		}
	})
	return m
}

// insert writes id on tx.
func (m marks) insert(ctx context.Context, tx session.SQLTx, id string) error {
	_, err := tx.ExecContext(ctx, "INSERT INTO "+m.table+" (id) VALUES ('"+id+"')")
	return err
}

// insertDirect writes id outside any append, committed at once.
func (m marks) insertDirect(ctx context.Context, id string) error {
	_, err := m.db.ExecContext(ctx, "INSERT INTO "+m.table+" (id) VALUES ('"+id+"')")
	return err
}

// all returns the committed ids.
func (m marks) all(t *testing.T) []string {
	t.Helper()
	rows, err := m.db.QueryContext(context.Background(), "SELECT id FROM "+m.table+" ORDER BY id")
	require.NoError(t, err)
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	return ids
}

// requireUnchanged checks that key's session is still at version with count events and holds
// no turn of req.
func requireUnchanged(t *testing.T, s session.Store, key session.Key, version, count int64, req string) {
	t.Helper()
	got := get(t, s, key, 100)
	require.Equal(t, version, got.Version, "version")
	require.Equal(t, count, got.EventCount, "event count")
	_, err := s.FindTurn(context.Background(), key, req)
	require.ErrorIs(t, err, session.ErrNotFound, "the turn of %s is not stored", req)
}

func testJoinCommits(t *testing.T, s session.TxAppender) {
	ctx := context.Background()
	m := newMarks(t, s)
	key := newKey(t)
	create(t, s, key, nil)
	mustAppend(t, s, key, 0, turn("r1", 2))

	var (
		calls  int
		joined []session.Event
	)
	tr := turn("r2", 3)
	tr.State = []byte(`{"step":2}`)
	ap, err := s.AppendTx(ctx, key, 1, tr, func(ctx context.Context, tx session.SQLTx, stored []session.Event) error {
		calls++
		joined = append(joined, stored...)
		return m.insert(ctx, tx, "r2")
	})
	require.NoError(t, err)
	require.Equal(t, 1, calls, "join runs once")
	require.False(t, ap.Duplicate)
	require.EqualValues(t, 2, ap.Version)
	requireSameEvents(t, stored(tr, 3), ap.Events)
	requireSameEvents(t, stored(tr, 3), joined)
	require.Equal(t, []string{"r2"}, m.all(t), "the joined write is committed")

	got := get(t, s, key, 100)
	require.EqualValues(t, 2, got.Version)
	require.EqualValues(t, 5, got.EventCount)
	require.Equal(t, `{"step":2}`, string(got.State))
	found, err := s.FindTurn(ctx, key, "r2")
	require.NoError(t, err)
	requireSameEvents(t, stored(tr, 3), found)
}

func testJoinErrorRollsBack(t *testing.T, s session.TxAppender) {
	ctx := context.Background()
	m := newMarks(t, s)
	key := newKey(t)
	create(t, s, key, []byte(`{"step":0}`))
	mustAppend(t, s, key, 0, turn("r1", 1))

	errJoin := errors.New("the joined write failed")
	tr := turn("r2", 2)
	tr.State = []byte(`{"step":2}`)
	ap, err := s.AppendTx(ctx, key, 1, tr, func(ctx context.Context, tx session.SQLTx, _ []session.Event) error {
		if err := m.insert(ctx, tx, "r2"); err != nil {
			return err
		}
		return errJoin // after its own write: a crash between the two writes, in effect
	})
	require.ErrorIs(t, err, errJoin)
	require.Equal(t, session.Appended{}, ap)
	requireUnchanged(t, s, key, 1, 1, "r2")
	require.Equal(t, `{"step":0}`, string(get(t, s, key, 0).State), "the state is not replaced")
	require.Empty(t, m.all(t), "the joined write is rolled back")

	// Nothing of the failed call is left in the way: the same turn goes in at the same version.
	ap, err = s.AppendTx(ctx, key, 1, tr, func(ctx context.Context, tx session.SQLTx, _ []session.Event) error {
		return m.insert(ctx, tx, "r2")
	})
	require.NoError(t, err)
	require.False(t, ap.Duplicate)
	require.EqualValues(t, 2, ap.Version)
	require.Equal(t, []string{"r2"}, m.all(t))
}

// testJoinFailedCommit: the caller gives up after the joined write (its context ends), so the
// commit cannot happen: neither write is stored.
func testJoinFailedCommit(t *testing.T, s session.TxAppender) {
	m := newMarks(t, s)
	key := newKey(t)
	create(t, s, key, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := s.AppendTx(ctx, key, 0, turn("r1", 2), func(ctx context.Context, tx session.SQLTx, _ []session.Event) error {
		err := m.insert(ctx, tx, "r1")
		cancel()
		return err
	})
	require.Error(t, err)
	requireUnchanged(t, s, key, 0, 0, "r1")
	require.Empty(t, m.all(t))
}

func testNoJoinWithoutWrite(t *testing.T, s session.TxAppender) {
	ctx := context.Background()
	m := newMarks(t, s)
	key := newKey(t)
	create(t, s, key, nil)
	mustAppend(t, s, key, 0, turn("r1", 2))

	var calls atomic.Int64
	join := func(ctx context.Context, tx session.SQLTx, _ []session.Event) error {
		calls.Add(1)
		return m.insert(ctx, tx, "joined")
	}
	_, err := s.AppendTx(ctx, key, 0, turn("r2", 1), join)
	require.ErrorIs(t, err, session.ErrConflict, "a stale version")
	other := newKey(t)
	_, err = s.AppendTx(ctx, other, 0, turn("r2", 1), join)
	require.ErrorIs(t, err, session.ErrNotFound)
	thief := key
	thief.User = "someone-else"
	_, err = s.AppendTx(ctx, thief, 1, turn("r2", 1), join)
	require.ErrorIs(t, err, session.ErrOwnerMismatch)
	_, err = s.AppendTx(ctx, key, 1, session.Turn{RequestID: "r2"}, join)
	require.ErrorIs(t, err, session.ErrInvalid, "a turn without events")
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = s.AppendTx(cancelled, key, 1, turn("r2", 1), join)
	require.Error(t, err, "a cancelled context")

	// A turn already stored, at the current version: a duplicate, not joined.
	mustAppend(t, s, key, 1, turn("r2", 1))
	ap, err := s.AppendTx(ctx, key, 2, turn("r1", 2), join)
	require.NoError(t, err)
	require.True(t, ap.Duplicate)
	require.EqualValues(t, 2, ap.Version)
	requireSameEvents(t, stored(turn("r1", 2), 1), ap.Events)

	require.Zero(t, calls.Load(), "join is called only when the turn is written")
	require.Empty(t, m.all(t))
	require.EqualValues(t, 2, get(t, s, key, 0).Version)
}

// testJoinRace: racers append distinct turns at the same version, each joining a write of its
// own. One turn and its write are stored; every other racer gets ErrConflict and leaves none.
func testJoinRace(t *testing.T, s session.TxAppender) {
	ctx := context.Background()
	m := newMarks(t, s)
	key := newKey(t)
	create(t, s, key, nil)
	var (
		mu      sync.Mutex
		winners []string
		errs    []error
	)
	runRacers(racers, func(i int) {
		req := fmt.Sprintf("racer-%02d", i)
		_, err := s.AppendTx(ctx, key, 0, turn(req, 2), func(ctx context.Context, tx session.SQLTx, _ []session.Event) error {
			return m.insert(ctx, tx, req)
		})
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil:
			winners = append(winners, req)
		case !errors.Is(err, session.ErrConflict):
			errs = append(errs, fmt.Errorf("racer %d: %w", i, err))
		}
	})
	require.Empty(t, errs)
	require.Len(t, winners, 1, "exactly one append wins")
	require.Equal(t, winners, m.all(t), "and only its joined write is stored")
	got := get(t, s, key, 100)
	require.EqualValues(t, 1, got.Version)
	requireSameEvents(t, stored(turn(winners[0], 2), 1), got.Events)
}
