package sessiontest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/session"
)

// concurrentCallers is how many callers the batched subtests start at once: enough to fill
// batches of a few tens.
const concurrentCallers = 24

// Batched is a store whose writes are batched across concurrent callers, for RunBatched.
type Batched struct {
	// Store is the store under test, for this subtest alone.
	Store session.Store
	// Break makes every write of Store fail from now on, the way a database outage would
	// (a dropped connection, a missing table, ...), until the returned mend is called. It may
	// call t.Fatal.
	Break func(t *testing.T) (mend func())
}

// RunBatched checks a store whose writes are batched across concurrent callers (for
// session/sqlsession, one with Options.Batch on), beyond what Run checks of every store: many
// callers at once, each with its own outcome, in the cases a batch must tell apart. Run it in
// addition to Run on the same kind of store.
//
//   - ConflictsInOneBatch: callers at once on distinct sessions, some stale, some repeating a
//     stored turn, some racing on one session: each gets its own outcome (ErrConflict, a
//     duplicate, a success), and exactly the winners' turns are stored.
//   - FailedBatch: while the store is broken, every caller gets an error and no turn is
//     stored; once mended, every turn goes in at the same versions.
//   - CancelOneCaller: one caller's context ends while others' appends go on: that caller gets
//     an error and its turn is not stored, or gets success and its turn is stored (never an
//     error for a stored turn nor a success for a lost one), and every other caller succeeds.
//   - GetsInOneBatch: callers at once reading sessions of different lengths with different
//     recent counts, a missing session and another user's: each gets its own session's
//     newest events in order, or its own ErrNotFound or ErrOwnerMismatch; a caller whose
//     context ends meanwhile gets its context's error or its session, never another's.
//   - GetsOfABrokenStore: while the store is broken every Get fails, and not with
//     ErrNotFound (which would have a Runner create the session again); once mended, every
//     Get reads its session.
//   - JoinFailsForOneCaller (session.TxAppender only): one caller's joined write fails: its
//     turn and write are not stored; every other caller's turn and joined write are, once.
//
// newBatched is called once in each subtest, and subtests run in parallel.
func RunBatched(t *testing.T, newBatched func(t *testing.T) Batched) {
	t.Helper()
	for _, c := range batchCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, newBatched(t))
		})
	}
}

var batchCases = []struct {
	name string
	run  func(t *testing.T, b Batched)
}{
	{"ConflictsInOneBatch", testBatchConflicts},
	{"FailedBatch", testBatchFails},
	{"CancelOneCaller", testBatchCancelOne},
	{"JoinFailsForOneCaller", testBatchJoinFails},
	{"GetsInOneBatch", testBatchGets},
	{"GetsOfABrokenStore", testBatchGetsBroken},
}

// newSessions creates n empty sessions.
func newSessions(t *testing.T, s session.Store, n int) []session.Key {
	t.Helper()
	keys := make([]session.Key, n)
	for i := range keys {
		keys[i] = newKey(t)
		create(t, s, keys[i], nil)
	}
	return keys
}

// appendAtOnce runs f for each of n callers, released at once, and returns their outcomes.
func appendAtOnce(n int, f func(i int) (session.Appended, error)) ([]session.Appended, []error) {
	aps, errs := make([]session.Appended, n), make([]error, n)
	runRacers(n, func(i int) { aps[i], errs[i] = f(i) })
	return aps, errs
}

// testBatchConflicts: each session i gets one caller of a kind: a fresh turn at the right
// version, a stale one, a repeat of the stored turn, or one of two racers on a session.
func testBatchConflicts(t *testing.T, b Batched) {
	ctx := context.Background()
	s := b.Store
	keys := newSessions(t, s, concurrentCallers)
	for _, k := range keys {
		mustAppend(t, s, k, 0, turn("first", 2))
	}
	// Sessions 0 and 1 get two racers each at version 1 (the second racer is caller n+0, n+1).
	n := len(keys)
	aps, errs := appendAtOnce(n+2, func(i int) (session.Appended, error) {
		k := i
		if i >= n {
			k = i - n
		}
		switch {
		case k < 2:
			return s.Append(ctx, keys[k], 1, turn(fmt.Sprintf("racer-%d", i), 1))
		case k%3 == 0:
			return s.Append(ctx, keys[k], 0, turn("stale", 1))
		case k%3 == 1:
			return s.Append(ctx, keys[k], 1, turn("first", 2))
		}
		return s.Append(ctx, keys[k], 1, turn("second", 3))
	})
	for k := range 2 {
		won := 0
		for _, i := range []int{k, n + k} {
			switch {
			case errs[i] == nil:
				won++
				require.EqualValues(t, 2, aps[i].Version)
			default:
				require.ErrorIs(t, errs[i], session.ErrConflict, "racer %d", i)
			}
		}
		require.Equal(t, 1, won, "one racer of session %d wins", k)
		require.EqualValues(t, 2, get(t, s, keys[k], 0).Version)
	}
	for k := 2; k < n; k++ {
		got := get(t, s, keys[k], 100)
		switch k % 3 {
		case 0:
			require.ErrorIs(t, errs[k], session.ErrConflict, "caller %d is stale", k)
			requireUnchanged(t, s, keys[k], 1, 2, "stale")
		case 1:
			require.NoError(t, errs[k], "caller %d repeats a stored turn", k)
			require.True(t, aps[k].Duplicate)
			require.EqualValues(t, 1, aps[k].Version)
			requireSameEvents(t, stored(turn("first", 2), 1), aps[k].Events)
			require.EqualValues(t, 1, got.Version)
		default:
			require.NoError(t, errs[k], "caller %d", k)
			require.False(t, aps[k].Duplicate)
			require.EqualValues(t, 2, aps[k].Version)
			requireSameEvents(t, stored(turn("second", 3), 3), aps[k].Events)
			requireSameEvents(t, append(stored(turn("first", 2), 1), stored(turn("second", 3), 3)...), got.Events)
		}
	}
}

// testBatchFails: a broken store fails every caller of its batches and stores nothing.
func testBatchFails(t *testing.T, b Batched) {
	ctx := context.Background()
	s := b.Store
	keys := newSessions(t, s, concurrentCallers)
	mend := b.Break(t)
	_, errs := appendAtOnce(len(keys), func(i int) (session.Appended, error) {
		return s.Append(ctx, keys[i], 0, turn("r1", 2))
	})
	mend()
	for i, err := range errs {
		require.Error(t, err, "caller %d of a failed batch", i)
		requireUnchanged(t, s, keys[i], 0, 0, "r1")
	}
	_, errs = appendAtOnce(len(keys), func(i int) (session.Appended, error) {
		return s.Append(ctx, keys[i], 0, turn("r1", 2))
	})
	for i, err := range errs {
		require.NoError(t, err, "caller %d once mended", i)
		require.EqualValues(t, 1, get(t, s, keys[i], 0).Version)
	}
}

// testBatchCancelOne: the context of caller 0 ends soon after its call starts, while the
// others go on.
func testBatchCancelOne(t *testing.T, b Batched) {
	s := b.Store
	keys := newSessions(t, s, concurrentCallers)
	for round := range 5 {
		req := fmt.Sprintf("r%d", round)
		ctx, cancel := context.WithCancel(context.Background())
		aps, errs := appendAtOnce(len(keys), func(i int) (session.Appended, error) {
			c := context.Background()
			if i == 0 {
				c = ctx
				go cancel()
			}
			return s.Append(c, keys[i], int64(round), turn(req, 1))
		})
		cancel()
		_, err := s.FindTurn(context.Background(), keys[0], req)
		if errs[0] != nil {
			require.ErrorIs(t, err, session.ErrNotFound, "round %d: the cancelled caller got %v, yet its turn is stored", round, errs[0])
			_, err := s.Append(context.Background(), keys[0], int64(round), turn(req, 1))
			require.NoError(t, err, "round %d: the cancelled caller's turn goes in at its version", round)
		} else {
			require.NoError(t, err, "round %d: the cancelled caller got success, yet its turn is not stored", round)
			require.EqualValues(t, round+1, aps[0].Version)
		}
		for i := 1; i < len(keys); i++ {
			require.NoError(t, errs[i], "round %d: caller %d", round, i)
			require.EqualValues(t, round+1, aps[i].Version)
		}
	}
}

// testBatchJoinFails: of callers at once, one's join fails after a write of its own, another's
// writes a row that is there already (on PostgreSQL a failed statement ends the transaction);
// neither is stored, every other one is, with its joined write once.
func testBatchJoinFails(t *testing.T, b Batched) {
	s, ok := b.Store.(session.TxAppender)
	if !ok {
		t.Skipf("%T does not implement session.TxAppender", b.Store)
	}
	ctx := context.Background()
	m := newMarks(t, s)
	keys := newSessions(t, s, concurrentCallers)
	require.NoError(t, m.insertDirect(ctx, "taken"))
	errJoin := errors.New("the joined write failed")
	var (
		mu    sync.Mutex
		calls = map[int]int{}
	)
	_, errs := appendAtOnce(len(keys), func(i int) (session.Appended, error) {
		return s.AppendTx(ctx, keys[i], 0, turn("r1", 2), func(ctx context.Context, tx session.SQLTx, _ []session.Event) error {
			mu.Lock()
			calls[i]++
			mu.Unlock()
			switch i {
			case 0:
				if err := m.insert(ctx, tx, "caller-00"); err != nil {
					return err
				}
				return errJoin
			case 1:
				return m.insert(ctx, tx, "taken")
			}
			return m.insert(ctx, tx, fmt.Sprintf("caller-%02d", i))
		})
	})
	require.ErrorIs(t, errs[0], errJoin)
	require.Error(t, errs[1], "a joined write that fails in SQL")
	want := []string{}
	for i := range keys {
		if i < 2 {
			requireUnchanged(t, s, keys[i], 0, 0, "r1")
			continue
		}
		require.NoError(t, errs[i], "caller %d", i)
		require.EqualValues(t, 1, get(t, s, keys[i], 0).Version)
		require.GreaterOrEqual(t, calls[i], 1, "caller %d's join ran", i)
		want = append(want, fmt.Sprintf("caller-%02d", i))
	}
	require.Equal(t, append(want, "taken"), m.all(t), "every other caller's joined write is stored, once")
}

// historyOf appends i%4 turns of two events each to key and returns the stored events.
func historyOf(t *testing.T, s session.Store, key session.Key, i int) []session.Event {
	t.Helper()
	var all []session.Event
	for v := range i % 4 {
		tr := turn(fmt.Sprintf("turn-%d-%d", i, v), 2)
		mustAppend(t, s, key, int64(v), tr)
		all = append(all, stored(tr, int64(len(all))+1)...)
	}
	return all
}

// newest returns the last n of events (all of them when n is larger).
func newest(events []session.Event, n int) []session.Event {
	return events[len(events)-min(n, len(events)):]
}

func testBatchGets(t *testing.T, b Batched) {
	s := b.Store
	keys := newSessions(t, s, concurrentCallers)
	histories := make([][]session.Event, len(keys))
	for i, k := range keys {
		histories[i] = historyOf(t, s, k, i)
	}
	recents := []int{0, 1, 3, 100}
	missing := newKey(t)
	stranger := keys[3]
	stranger.User = "another-" + stranger.User
	cancelled := len(keys) + 2 // the caller whose context ends while the batch may run
	n := len(keys) + 3
	sessions, errs := make([]session.Session, n), make([]error, n)
	runRacers(n, func(i int) {
		ctx := context.Background()
		key := missing
		switch {
		case i < len(keys):
			key = keys[i]
		case i == len(keys)+1:
			key = stranger
		case i == cancelled:
			key = keys[5]
			c, cancel := context.WithCancel(ctx)
			ctx = c
			go cancel()
		}
		sessions[i], errs[i] = s.Get(ctx, key, recents[i%len(recents)])
	})
	check := func(i, k int) {
		t.Helper()
		require.NoError(t, errs[i], "caller %d", i)
		require.Equal(t, keys[k], sessions[i].Key, "caller %d", i)
		require.EqualValues(t, i%4, sessions[i].Version, "caller %d", i)
		require.EqualValues(t, len(histories[k]), sessions[i].EventCount, "caller %d", i)
		requireSameEvents(t, newest(histories[k], recents[i%len(recents)]), sessions[i].Events)
	}
	for i := range keys {
		check(i, i)
	}
	require.ErrorIs(t, errs[len(keys)], session.ErrNotFound)
	require.ErrorIs(t, errs[len(keys)+1], session.ErrOwnerMismatch)
	require.Empty(t, sessions[len(keys)+1].Events, "another user's Get reads no events")
	if errs[cancelled] != nil {
		require.ErrorIs(t, errs[cancelled], context.Canceled)
	} else {
		check(cancelled, 5)
	}
}

func testBatchGetsBroken(t *testing.T, b Batched) {
	s := b.Store
	keys := newSessions(t, s, concurrentCallers)
	for i, k := range keys {
		historyOf(t, s, k, i)
	}
	read := func() ([]session.Session, []error) {
		sessions, errs := make([]session.Session, len(keys)), make([]error, len(keys))
		runRacers(len(keys), func(i int) { sessions[i], errs[i] = s.Get(context.Background(), keys[i], 100) })
		return sessions, errs
	}
	mend := b.Break(t)
	_, errs := read()
	mend()
	for i, err := range errs {
		require.Error(t, err, "caller %d of a broken store", i)
		require.NotErrorIs(t, err, session.ErrNotFound, "caller %d of a broken store", i)
	}
	sessions, errs := read()
	for i, err := range errs {
		require.NoError(t, err, "caller %d after the mend", i)
		require.EqualValues(t, 2*(i%4), sessions[i].EventCount, "caller %d", i)
	}
}
