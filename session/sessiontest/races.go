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

// racers is how many goroutines the race subtests start on one conversation.
const racers = 20

// maxRetries bounds the retry loop of SequentialWriters, so a broken store fails the test
// instead of hanging it.
const maxRetries = 10_000

// runRacers starts n goroutines at once (they wait on a shared start) and waits for them.
func runRacers(n int, f func(i int)) {
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	ready.Add(n)
	done.Add(n)
	for i := range n {
		go func() {
			defer done.Done()
			ready.Done()
			<-start
			f(i)
		}()
	}
	ready.Wait()
	close(start)
	done.Wait()
}

// testCreateRace: many workers get-or-create one conversation at once (Create, and on
// ErrExists, Get). Exactly one Create wins; everyone sees the same session; nothing else fails.
func testCreateRace(t *testing.T, s session.Store) {
	ctx := context.Background()
	key := newKey(t)
	var (
		mu       sync.Mutex
		wins     int
		sessions []session.Session
		errs     []error
	)
	runRacers(racers, func(i int) {
		sess, err := s.Create(ctx, key, []byte(`"initial"`))
		won := err == nil
		if errors.Is(err, session.ErrExists) {
			sess, err = s.Get(ctx, key, 10)
		}
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs = append(errs, fmt.Errorf("racer %d: %w", i, err))
			return
		}
		if won {
			wins++
		}
		sessions = append(sessions, sess)
	})
	require.Empty(t, errs)
	require.Equal(t, 1, wins, "exactly one Create wins")
	require.Len(t, sessions, racers)
	for _, sess := range sessions {
		require.Equal(t, key, sess.Key)
		require.Zero(t, sess.Version)
		require.Equal(t, `"initial"`, string(sess.State))
		requireSameTime(t, sessions[0].CreatedAt, sess.CreatedAt, "every racer sees one session")
	}
}

// testAppendRace: many workers append distinct turns at the same expected version (zombies
// after a rebalance). One wins, the rest get ErrConflict, and the history holds one turn.
func testAppendRace(t *testing.T, s session.Store) {
	ctx := context.Background()
	key := newKey(t)
	create(t, s, key, nil)
	var (
		mu        sync.Mutex
		winners   []string
		conflicts int
		errs      []error
	)
	runRacers(racers, func(i int) {
		req := fmt.Sprintf("racer-%02d", i)
		_, err := s.Append(ctx, key, 0, turn(req, 3))
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil:
			winners = append(winners, req)
		case errors.Is(err, session.ErrConflict):
			conflicts++
		default:
			errs = append(errs, fmt.Errorf("racer %d: %w", i, err))
		}
	})
	require.Empty(t, errs)
	require.Len(t, winners, 1, "exactly one append wins")
	require.Equal(t, racers-1, conflicts)

	got := get(t, s, key, 100)
	require.EqualValues(t, 1, got.Version)
	require.EqualValues(t, 3, got.EventCount)
	requireSameEvents(t, stored(turn(winners[0], 3), 1), got.Events)
}

// testSequentialWriters: workers retry on ErrConflict (re-reading the version) until all
// their turns land. The history holds every turn once, each turn's events together and in
// order, and the version counts the turns.
func testSequentialWriters(t *testing.T, s session.Store) {
	ctx := context.Background()
	key := newKey(t)
	create(t, s, key, nil)
	const perTurn = 3
	var (
		mu   sync.Mutex
		errs []error
	)
	runRacers(racers, func(i int) {
		tr := turn(fmt.Sprintf("writer-%02d", i), perTurn)
		for range maxRetries {
			sess, err := s.Get(ctx, key, 0)
			if err == nil {
				_, err = s.Append(ctx, key, sess.Version, tr)
			}
			if errors.Is(err, session.ErrConflict) {
				continue
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("writer %d: %w", i, err))
				mu.Unlock()
			}
			return
		}
		mu.Lock()
		errs = append(errs, fmt.Errorf("writer %d: still conflicting after %d tries", i, maxRetries))
		mu.Unlock()
	})
	require.Empty(t, errs)

	got := get(t, s, key, racers*perTurn+10)
	require.EqualValues(t, racers, got.Version)
	require.EqualValues(t, racers*perTurn, got.EventCount)
	require.Len(t, got.Events, racers*perTurn)
	seen := map[string]bool{}
	for start := 0; start < len(got.Events); start += perTurn {
		req := got.Events[start].RequestID
		require.False(t, seen[req], "turn %s stored twice", req)
		seen[req] = true
		requireSameEvents(t, stored(turn(req, perTurn), int64(start+1)), got.Events[start:start+perTurn])
	}
	require.Len(t, seen, racers)
}
