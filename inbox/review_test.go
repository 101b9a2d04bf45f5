package inbox

// The TestReview tests are regression tests of the bugs a review of the step journal, the
// outbox and the agent loop found on 2026-12-02: each comment describes a bug as it was found;
// the test asserts the behaviour of its fix.

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// reviewClock is a settable clock for a MemoryInbox.
type reviewClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *reviewClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *reviewClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// reviewOutbox returns a MemoryInbox on clock c holding one pending intent, and its id.
func reviewOutbox(t *testing.T, c *reviewClock) (*MemoryInbox, string) {
	t.Helper()
	ctx := context.Background()
	b := NewMemoryInbox()
	if c != nil {
		b.now = c.now
	}
	const key = "req-1/scope"
	_, err := b.Begin(ctx, Delivery{Key: key, Conversation: "c-1", Topic: "requests"})
	require.NoError(t, err)
	_, err = b.RecordStep(ctx, key, Step{Ordinal: 1, Name: "tool:email", Output: []byte(`{"tool":"email","args":{},"key":"k"}`), Deferred: true})
	require.NoError(t, err)
	n, err := b.Promote(ctx, key, 0)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	return b, IntentID(key, 1)
}

// Outbox.Claim promises that an intent is not handed to two claimers within its lease. But
// Retry (and Delivered, Bury) take no claim token: a relay whose lease ran out while it was
// still delivering (a slow webhook) records its failure with a short backoff over the lease of
// the relay that claimed the intent after it, and a third claimer then gets the intent while
// the second one's lease still holds: two deliveries of one intent at once.
func TestReviewStaleRetryBreaksAnotherClaimersLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := &reviewClock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	b, id := reviewOutbox(t, clock)

	a, err := b.Claim(ctx, 1, time.Minute) // relay A
	require.NoError(t, err)
	require.Len(t, a, 1)
	clock.add(2 * time.Minute) // A's lease is over; A is still in its delivery
	second, err := b.Claim(ctx, 1, time.Hour)
	require.NoError(t, err)
	require.Len(t, second, 1, "relay B claims the intent for an hour")

	// A's delivery fails now; the relay records it with its backoff (a second).
	require.ErrorIs(t, b.Retry(ctx, id, a[0].Attempts, "503 from the webhook", clock.now().Add(time.Second)), ErrLeaseLost)
	clock.add(2 * time.Second) // well inside B's hour
	third, err := b.Claim(ctx, 1, time.Hour)
	require.NoError(t, err)
	require.Empty(t, third, "relay B's lease holds for an hour: nobody else may claim %s within it", id)
}

// A stale relay's Bury lands on an intent that another relay is delivering successfully: its
// Delivered is then ignored (only a pending intent changes), so an intent that was delivered
// shows as dead, and an operator's re-drive delivers it once more.
func TestReviewStaleBuryWinsOverTheLiveClaimersDelivery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := &reviewClock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	b, id := reviewOutbox(t, clock)
	a, err := b.Claim(ctx, 1, time.Minute) // relay A
	require.NoError(t, err)
	clock.add(2 * time.Minute)
	bb, err := b.Claim(ctx, 1, time.Hour) // relay B
	require.NoError(t, err)
	require.ErrorIs(t, b.Bury(ctx, id, a[0].Attempts, "A: permanent 400"), ErrLeaseLost) // A's stale outcome
	require.NoError(t, b.Delivered(ctx, id, bb[0].Attempts))                             // B delivered it
	its, err := b.Intents(ctx, IntentFilter{})
	require.NoError(t, err)
	require.Equal(t, IntentDelivered, its[0].Status, "the intent was delivered by the relay that held its lease")
}

// Relay.MaxAttempts counts claims, "a crashed one included", and after the last one the intent
// should be buried. But the relay checks the count only after Deliver failed: an intent whose
// deliveries crashed their process (kill -9, OOM, a panic: see the next test) MaxAttempts
// times is delivered again on every later claim, for ever.
func TestReviewRelayDeliversPastMaxAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := &reviewClock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	b, id := reviewOutbox(t, clock)
	const maxAttempts = 3
	for range maxAttempts { // three relays that claimed the intent and died delivering it
		its, err := b.Claim(ctx, 1, time.Minute)
		require.NoError(t, err)
		require.Len(t, its, 1)
		clock.add(2 * time.Minute)
	}
	var calls atomic.Int32
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	relay := &Relay{Outbox: b, MaxAttempts: maxAttempts, Poll: time.Millisecond,
		Deliver: func(context.Context, Intent) error {
			calls.Add(1)
			return errors.New("webhook down")
		},
		OnSettled: func(Intent, error) { cancel() }}
	go func() {
		// Stop the relay once the intent has left pending, whatever the relay did with it.
		for rctx.Err() == nil {
			its, _ := b.Intents(ctx, IntentFilter{Status: IntentPending})
			if len(its) == 0 {
				cancel()
			}
			time.Sleep(time.Millisecond)
		}
	}()
	require.NoError(t, relay.Run(rctx))
	its, err := b.Intents(ctx, IntentFilter{})
	require.NoError(t, err)
	require.Len(t, its, 1)
	require.Equal(t, id, its[0].ID)
	require.Zero(t, calls.Load(), "the intent's %d attempts were spent; a 4th claim must bury it, not deliver it", maxAttempts)
	require.Equal(t, IntentDead, its[0].Status)
}

// A Deliver that panics takes the whole process down: Relay.deliver runs it on a goroutine of
// its own with no recover. The README runs the relay "in the member", so one bad intent kills
// the consumer member; with the previous test, it does so again on every restart, for ever.
// The test runs the relay in a child process, which must survive.
func TestReviewRelayDeliverPanicKillsTheProcess(t *testing.T) {
	if os.Getenv("TURNSTILE_REVIEW_CHILD") == "1" {
		b, _ := reviewOutbox(t, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		relay := &Relay{Outbox: b, Poll: time.Millisecond,
			Deliver:   func(context.Context, Intent) error { panic("nil map in the webhook client") },
			OnSettled: func(Intent, error) { cancel() }}
		_ = relay.Run(ctx)
		return
	}
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^TestReviewRelayDeliverPanicKillsTheProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "TURNSTILE_REVIEW_CHILD=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "a panicking Deliver must fail one delivery, not the process:\n%s", out)
}
