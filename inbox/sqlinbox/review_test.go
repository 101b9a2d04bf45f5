package sqlinbox_test

// The TestReview tests are regression tests of the bugs a review of the step journal, the
// outbox and the agent loop found on 2026-12-02: each comment describes a bug as it was found;
// the test asserts the behaviour of its fix.

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
	"github.com/turnstile-go/turnstile/internal/sqltest"
)

// The SQL outboxes share the memory one's missing claim token (see inbox's
// TestReviewStaleRetryBreaksAnotherClaimersLease): a stale relay's Retry, whose lease ran out,
// moves next_at back inside the lease of the relay that claimed the intent after it, and a
// third claim gets the intent within that lease.
func TestReviewStaleRetryBreaksAnotherClaimersLease(t *testing.T) {
	t.Parallel()
	for _, db := range sqltest.DBs {
		t.Run(db.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b, _ := newInbox(t, db, sqlinbox.Options{})
			const key = "req-1/scope"
			_, err := b.Begin(ctx, inbox.Delivery{Key: key, Conversation: "c-1", Topic: "requests"})
			require.NoError(t, err)
			_, err = b.RecordStep(ctx, key, inbox.Step{Ordinal: 1, Name: "tool:email", Output: []byte(`{"tool":"email","args":{},"key":"k"}`), Deferred: true})
			require.NoError(t, err)
			_, err = b.Promote(ctx, key, 0)
			require.NoError(t, err)
			id := inbox.IntentID(key, 1)

			a, err := b.Claim(ctx, 1, time.Millisecond) // relay A, a short lease
			require.NoError(t, err)
			require.Len(t, a, 1)
			time.Sleep(20 * time.Millisecond) // A's lease is over; A is still delivering
			second, err := b.Claim(ctx, 1, time.Hour)
			require.NoError(t, err)
			require.Len(t, second, 1, "relay B claims the intent for an hour")
			require.ErrorIs(t, b.Retry(ctx, id, a[0].Attempts, "A: 503", time.Now()), inbox.ErrLeaseLost) // A's stale outcome, due now
			third, err := b.Claim(ctx, 1, time.Hour)
			require.NoError(t, err)
			require.Empty(t, third, "relay B's lease holds for an hour: nobody else may claim %s within it", id)
		})
	}
}
