package inboxtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/internal/suite"
)

// RunRelay checks inbox.Relay on the outboxes newOutbox returns, one per subtest (run in
// parallel): it delivers each intent once, retries a failed delivery then succeeds, buries an
// intent after MaxAttempts or at once on a permanent error, waits out the delay a failed
// delivery's error asks for (RetryAfter() time.Duration) when it exceeds the backoff,
// delivers again after its lease an intent whose relay was shut down mid-delivery, and two relays on one outbox never deliver
// one intent twice within its lease. Every Run returns nil once its context ends.
func RunRelay(t *testing.T, newOutbox func(t *testing.T) inbox.Outbox) {
	t.Helper()
	runParallel(t, relayCases, newOutbox)
}

var relayCases = []suite.Case[inbox.Outbox]{
	{Name: "DeliversEachOnce", Run: testRelayOnce},
	{Name: "RetriesThenSucceeds", Run: testRelayRetries},
	{Name: "BuriesAfterMaxAttempts", Run: testRelayBuries},
	{Name: "PermanentBuriesAtOnce", Run: testRelayPermanent},
	{Name: "RetryAfterDelays", Run: testRelayRetryAfter},
	{Name: "ShutdownMidDelivery", Run: testRelayShutdown},
	{Name: "TwoRelays", Run: testTwoRelays},
}

// deliveries counts the deliveries of each intent.
type deliveries struct {
	mu    sync.Mutex
	calls map[string]int
}

func (d *deliveries) add(id string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.calls == nil {
		d.calls = map[string]int{}
	}
	d.calls[id]++
	return d.calls[id]
}

func (d *deliveries) of(id string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls[id]
}

// startRelay runs r (with short polls and backoffs unless set) until the test ends, and
// returns a stop that cancels it and requires Run to return nil.
func startRelay(t *testing.T, r *inbox.Relay) (stop func()) {
	t.Helper()
	if r.Poll == 0 {
		r.Poll = 5 * time.Millisecond
	}
	if r.Backoff == (inbox.RelayBackoff{}) {
		r.Backoff = inbox.RelayBackoff{Initial: time.Millisecond, Max: 5 * time.Millisecond}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(wait):
				t.Fatal("Relay.Run did not return after its context ended")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// intentOf returns the intent id from the outbox's list.
func intentOf(t *testing.T, o inbox.Outbox, id string) inbox.Intent {
	t.Helper()
	its, err := o.Intents(context.Background(), inbox.IntentFilter{Limit: 1000})
	require.NoError(t, err)
	for _, it := range its {
		if it.ID == id {
			return it
		}
	}
	t.Fatalf("no intent %s", id)
	return inbox.Intent{}
}

func requireStatus(t *testing.T, o inbox.Outbox, id string, want inbox.IntentStatus) {
	t.Helper()
	require.Eventually(t, func() bool {
		its, err := o.Intents(context.Background(), inbox.IntentFilter{Status: want, Limit: 1000})
		if err != nil {
			return false
		}
		for _, it := range its {
			if it.ID == id {
				return true
			}
		}
		return false
	}, wait, 5*time.Millisecond, "intent %s never became %s", id, want)
}

func testRelayOnce(t *testing.T, o inbox.Outbox) {
	_, ids := promoted(t, o, 10)
	var got deliveries
	var settled sync.WaitGroup
	settled.Add(len(ids))
	stop := startRelay(t, &inbox.Relay{Outbox: o, Batch: 3, Concurrency: 4,
		Deliver:   func(_ context.Context, it inbox.Intent) error { got.add(it.ID); return nil },
		OnSettled: func(inbox.Intent, error) { settled.Done() }})
	settled.Wait()
	for _, id := range ids {
		requireStatus(t, o, id, inbox.IntentDelivered)
	}
	stop()
	for _, id := range ids {
		require.Equal(t, 1, got.of(id), id)
		require.Equal(t, 1, intentOf(t, o, id).Attempts)
	}
}

func testRelayRetries(t *testing.T, o inbox.Outbox) {
	_, ids := promoted(t, o, 1)
	var got deliveries
	startRelay(t, &inbox.Relay{Outbox: o, MaxAttempts: 5, Deliver: func(_ context.Context, it inbox.Intent) error {
		if n := got.add(it.ID); n < 3 {
			return fmt.Errorf("503 on try %d", n)
		}
		return nil
	}})
	requireStatus(t, o, ids[0], inbox.IntentDelivered)
	it := intentOf(t, o, ids[0])
	require.Equal(t, 3, it.Attempts)
	require.Equal(t, "503 on try 2", it.Reason, "the last failure's reason")
	require.Equal(t, 3, got.of(ids[0]))
}

func testRelayBuries(t *testing.T, o inbox.Outbox) {
	_, ids := promoted(t, o, 1)
	var got deliveries
	startRelay(t, &inbox.Relay{Outbox: o, MaxAttempts: 3, Deliver: func(_ context.Context, it inbox.Intent) error {
		return fmt.Errorf("refused, try %d", got.add(it.ID))
	}})
	requireStatus(t, o, ids[0], inbox.IntentDead)
	it := intentOf(t, o, ids[0])
	require.Equal(t, 3, it.Attempts)
	require.Equal(t, "refused, try 3", it.Reason)
	require.Equal(t, 3, got.of(ids[0]))
}

// retryAfterErr asks for its delay as turn.RetryAfter's errors do.
type retryAfterErr struct {
	error
	after time.Duration
}

func (e retryAfterErr) RetryAfter() time.Duration { return e.after }

// testRelayRetryAfter: a delivery that fails asking for an hour is due again an hour after it
// failed, not after the relay's backoff of a few milliseconds (nor its Max), and counts an
// attempt; one that asks for less than the backoff is due after the backoff.
func testRelayRetryAfter(t *testing.T, o inbox.Outbox) {
	_, ids := promoted(t, o, 2)
	long, short := ids[0], ids[1]
	var got deliveries
	before := time.Now()
	startRelay(t, &inbox.Relay{Outbox: o, Backoff: inbox.RelayBackoff{Initial: time.Minute, Max: time.Minute},
		Deliver: func(_ context.Context, it inbox.Intent) error {
			n := got.add(it.ID)
			if it.ID == long {
				return fmt.Errorf("wrapped: %w", retryAfterErr{fmt.Errorf("429 on try %d", n), time.Hour})
			}
			return retryAfterErr{fmt.Errorf("503 on try %d", n), time.Millisecond}
		}})
	for _, id := range ids {
		require.Eventually(t, func() bool { return intentOf(t, o, id).Reason != "" }, wait, 5*time.Millisecond, "intent %s never failed", id)
	}
	it := intentOf(t, o, long)
	require.Equal(t, inbox.IntentPending, it.Status)
	require.Equal(t, "wrapped: 429 on try 1", it.Reason)
	require.Equal(t, 1, it.Attempts)
	require.False(t, it.NextAt.Before(before.Add(time.Hour)), "due at %v, before the hour asked for from %v", it.NextAt, before)
	it = intentOf(t, o, short)
	require.Equal(t, inbox.IntentPending, it.Status)
	require.Equal(t, 1, it.Attempts)
	// The backoff of a minute, ±50%, not the millisecond asked for.
	require.False(t, it.NextAt.Before(before.Add(30*time.Second)), "due at %v, before the backoff from %v", it.NextAt, before)
	require.True(t, it.NextAt.Before(time.Now().Add(time.Hour)), "due at %v: the short delay took the long one's", it.NextAt)
	require.Equal(t, 1, got.of(long))
}

type permanentErr struct{ error }

func (permanentErr) Permanent() bool { return true }

func testRelayPermanent(t *testing.T, o inbox.Outbox) {
	_, ids := promoted(t, o, 1)
	var got deliveries
	startRelay(t, &inbox.Relay{Outbox: o, Deliver: func(_ context.Context, it inbox.Intent) error {
		got.add(it.ID)
		return fmt.Errorf("wrapped: %w", permanentErr{errors.New("400 bad account")})
	}})
	requireStatus(t, o, ids[0], inbox.IntentDead)
	require.Equal(t, 1, got.of(ids[0]))
	require.Equal(t, "wrapped: 400 bad account", intentOf(t, o, ids[0]).Reason)
}

// testRelayShutdown: a relay shut down during a delivery records nothing, and another relay
// delivers the intent once its lease ends.
func testRelayShutdown(t *testing.T, o inbox.Outbox) {
	_, ids := promoted(t, o, 1)
	started := make(chan struct{})
	stop := startRelay(t, &inbox.Relay{Outbox: o, Lease: 100 * time.Millisecond, Deliver: func(ctx context.Context, it inbox.Intent) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	}})
	<-started
	stop()
	it := intentOf(t, o, ids[0])
	require.Equal(t, inbox.IntentPending, it.Status, "the cut delivery is not settled")
	require.Equal(t, 1, it.Attempts)

	var got deliveries
	startRelay(t, &inbox.Relay{Outbox: o, Deliver: func(_ context.Context, it inbox.Intent) error { got.add(it.ID); return nil }})
	requireStatus(t, o, ids[0], inbox.IntentDelivered)
	require.Equal(t, 1, got.of(ids[0]))
	require.Equal(t, 2, intentOf(t, o, ids[0]).Attempts, "delivered again after the lease")
}

// testTwoRelays: two relays on one outbox deliver every intent, none twice.
func testTwoRelays(t *testing.T, o inbox.Outbox) {
	_, ids := promoted(t, o, 24)
	var got deliveries
	var settled sync.WaitGroup
	settled.Add(len(ids))
	for range 2 {
		startRelay(t, &inbox.Relay{Outbox: o, Batch: 2, Concurrency: 3,
			Deliver: func(_ context.Context, it inbox.Intent) error {
				got.add(it.ID)
				time.Sleep(time.Millisecond) // let the relays' claims overlap
				return nil
			},
			OnSettled: func(inbox.Intent, error) { settled.Done() }})
	}
	settled.Wait()
	for _, id := range ids {
		requireStatus(t, o, id, inbox.IntentDelivered)
		require.Equal(t, 1, got.of(id), "intent %s delivered twice within its lease", id)
	}
}
