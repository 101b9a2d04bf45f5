package sessiontest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
)

// RunJoint checks a session.TxAppender and an inbox.TxCompleter on the same *sql.DB as
// turn.Runner uses them: the request's completion joins the transaction that appends its turn,
// so the turn is stored exactly when the request is done. No crash can fall between the two;
// an append that conflicts completes nothing; a completion that fails stores no turn.
//
// newPair is called once in each subtest, and subtests run in parallel. Every subtest uses its
// own random ids, so the pair may be shared; it must be one database (TxDB of both the same).
func RunJoint(t *testing.T, newPair func(t *testing.T) (session.TxAppender, inbox.TxCompleter)) {
	t.Helper()
	for _, c := range jointCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s, b := newPair(t)
			require.Same(t, s.TxDB(), b.TxDB(), "the pair must share its *sql.DB")
			c.run(t, s, b)
		})
	}
}

var jointCases = []struct {
	name string
	run  func(t *testing.T, s session.TxAppender, b inbox.TxCompleter)
}{
	{"TurnAndCompletionCommitTogether", testJointCommits},
	{"ConflictCompletesNothing", testJointConflict},
	{"FailedCompletionStoresNoTurn", testJointCompletionFails},
	{"CrashBeforeCommitStoresNeither", testJointCrash},
	{"MembersRacingOneRequest", testJointRace},
}

// joinCompletion is the join turn.Runner makes: complete the request with result.
func joinCompletion(b inbox.TxCompleter, requestID string, result []byte) session.JoinFunc {
	return func(ctx context.Context, tx session.SQLTx, _ []session.Event) error {
		return b.CompleteTx(ctx, tx, requestID, result)
	}
}

// beginNew begins a new request's delivery and checks that it is new.
func beginNew(t *testing.T, b inbox.Inbox, key session.Key) string {
	t.Helper()
	id := "req-" + randID(t)
	e, err := b.Begin(context.Background(), inbox.Delivery{Key: id, Conversation: key.Conversation, Topic: "requests", Offset: 1})
	require.NoError(t, err)
	require.Equal(t, inbox.StatusNew, e.Status)
	return id
}

// requireInProgress checks that the request is not done: in progress, without a result.
func requireInProgress(t *testing.T, b inbox.Inbox, requestID string) {
	t.Helper()
	e, err := b.Get(context.Background(), requestID)
	require.NoError(t, err)
	require.Equal(t, inbox.StatusInProgress, e.Status)
	require.Empty(t, e.Result)
}

func testJointCommits(t *testing.T, s session.TxAppender, b inbox.TxCompleter) {
	ctx := context.Background()
	key := newKey(t)
	create(t, s, key, nil)
	id := beginNew(t, b, key)
	ap, err := s.AppendTx(ctx, key, 0, turn(id, 2), joinCompletion(b, id, []byte(`{"text":"done"}`)))
	require.NoError(t, err)
	require.EqualValues(t, 1, ap.Version)

	e, err := b.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, inbox.StatusDone, e.Status)
	require.Equal(t, `{"text":"done"}`, string(e.Result))
	found, err := s.FindTurn(ctx, key, id)
	require.NoError(t, err)
	requireSameEvents(t, stored(turn(id, 2), 1), found)
}

// testJointConflict: a zombie's append at a stale version fails, and its completion with it.
func testJointConflict(t *testing.T, s session.TxAppender, b inbox.TxCompleter) {
	ctx := context.Background()
	key := newKey(t)
	create(t, s, key, nil)
	id := beginNew(t, b, key)
	mustAppend(t, s, key, 0, turn("another-request", 1))

	_, err := s.AppendTx(ctx, key, 0, turn(id, 2), joinCompletion(b, id, []byte("zombie's result")))
	require.ErrorIs(t, err, session.ErrConflict)
	requireInProgress(t, b, id)
	requireUnchanged(t, s, key, 1, 1, id)
}

// testJointCompletionFails: a request dead-lettered (or purged) meanwhile cannot be completed,
// and its turn is not stored either.
func testJointCompletionFails(t *testing.T, s session.TxAppender, b inbox.TxCompleter) {
	ctx := context.Background()
	key := newKey(t)
	create(t, s, key, nil)
	id := beginNew(t, b, key)
	require.NoError(t, b.MarkDead(ctx, id, "dead-lettered by another member"))

	_, err := s.AppendTx(ctx, key, 0, turn(id, 2), joinCompletion(b, id, []byte("late")))
	require.ErrorIs(t, err, inbox.ErrDead)
	requireUnchanged(t, s, key, 0, 0, id)

	unknown := "req-" + randID(t)
	_, err = s.AppendTx(ctx, key, 0, turn(unknown, 2), joinCompletion(b, unknown, []byte("x")))
	require.ErrorIs(t, err, inbox.ErrNotFound)
	requireUnchanged(t, s, key, 0, 0, unknown)
}

// testJointCrash: the process dies after the completion's statement and before the commit
// (join fails after it): neither the turn nor the completion is stored, and the redelivery
// does both.
func testJointCrash(t *testing.T, s session.TxAppender, b inbox.TxCompleter) {
	ctx := context.Background()
	key := newKey(t)
	create(t, s, key, nil)
	id := beginNew(t, b, key)
	errCrash := errors.New("simulated crash")
	_, err := s.AppendTx(ctx, key, 0, turn(id, 2), func(ctx context.Context, tx session.SQLTx, stored []session.Event) error {
		if err := joinCompletion(b, id, []byte("lost"))(ctx, tx, stored); err != nil {
			return err
		}
		return errCrash
	})
	require.ErrorIs(t, err, errCrash)
	requireInProgress(t, b, id)
	requireUnchanged(t, s, key, 0, 0, id)

	_, err = s.AppendTx(ctx, key, 0, turn(id, 2), joinCompletion(b, id, []byte("redelivered")))
	require.NoError(t, err)
	e, err := b.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, inbox.StatusDone, e.Status)
	require.Equal(t, "redelivered", string(e.Result))
}

// testJointRace: members that received one request during a rebalance run it at once, each
// with its own result. One turn is stored, and the result stored is that member's.
func testJointRace(t *testing.T, s session.TxAppender, b inbox.TxCompleter) {
	ctx := context.Background()
	key := newKey(t)
	create(t, s, key, nil)
	id := beginNew(t, b, key)
	var (
		mu      sync.Mutex
		winners []int
		errs    []error
	)
	runRacers(racers, func(i int) {
		_, err := s.AppendTx(ctx, key, 0, turn(id, 2), joinCompletion(b, id, fmt.Appendf(nil, "member %d", i)))
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil:
			winners = append(winners, i)
		case !errors.Is(err, session.ErrConflict):
			errs = append(errs, fmt.Errorf("member %d: %w", i, err))
		}
	})
	require.Empty(t, errs)
	require.Len(t, winners, 1, "one member's append wins")
	e, err := b.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, inbox.StatusDone, e.Status)
	require.Equal(t, fmt.Sprintf("member %d", winners[0]), string(e.Result), "the result stored is the winner's")
	got := get(t, s, key, 100)
	require.EqualValues(t, 1, got.Version)
	require.EqualValues(t, 2, got.EventCount)
}
