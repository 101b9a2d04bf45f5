package inbox

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRelayRefusesABadConfig(t *testing.T) {
	t.Parallel()
	ob := NewMemoryInbox()
	deliver := func(context.Context, Intent) error { return nil }
	for _, c := range []struct {
		r    Relay
		want string
	}{
		{Relay{Deliver: deliver}, "Outbox is nil"},
		{Relay{Outbox: ob}, "Deliver is nil"},
		{Relay{Outbox: ob, Deliver: deliver, MaxAttempts: -1}, "MaxAttempts"},
		{Relay{Outbox: ob, Deliver: deliver, Lease: -time.Second}, "Lease"},
		{Relay{Outbox: ob, Deliver: deliver, Batch: -1}, "Batch"},
		{Relay{Outbox: ob, Deliver: deliver, Poll: -1}, "Poll"},
		{Relay{Outbox: ob, Deliver: deliver, Concurrency: -1}, "Concurrency"},
		{Relay{Outbox: ob, Deliver: deliver, Backoff: RelayBackoff{Initial: -1}}, "negative"},
		{Relay{Outbox: ob, Deliver: deliver, Backoff: RelayBackoff{Initial: time.Minute, Max: time.Second}}, "below Initial"},
	} {
		require.ErrorContains(t, c.r.Run(context.Background()), c.want)
	}
}

// The backoff grows with the attempts, within ±50% of its doubling, and never above Max.
func TestRelayBackoff(t *testing.T) {
	t.Parallel()
	b := RelayBackoff{Initial: time.Second, Max: time.Minute}
	for attempt := 1; attempt <= 12; attempt++ {
		base := min(time.Second<<(attempt-1), time.Minute)
		for range 20 {
			d := b.delay(attempt)
			require.LessOrEqual(t, d, b.Max, "attempt %d", attempt)
			require.GreaterOrEqual(t, d, base/2, "attempt %d", attempt)
			require.LessOrEqual(t, d, base*3/2, "attempt %d", attempt)
		}
	}
	r, err := Relay{Outbox: NewMemoryInbox(), Deliver: func(context.Context, Intent) error { return nil }}.withDefaults()
	require.NoError(t, err)
	require.Equal(t, DefaultRelayMaxAttempts, r.MaxAttempts)
	require.Equal(t, DefaultRelayLease, r.Lease)
	require.Equal(t, DefaultRelayBackoffMax, r.Backoff.Max)
}

// A panicking Deliver is a failed attempt: with one attempt, the intent is buried with the
// panic value and the panicking frame in its reason. Deliver's ctx ends at the lease.
func TestRelayRecoversDeliverPanic(t *testing.T) {
	t.Parallel()
	b, id := reviewOutbox(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got error
	relay := &Relay{Outbox: b, MaxAttempts: 1, Lease: time.Hour, Poll: time.Millisecond,
		Deliver: func(dctx context.Context, _ Intent) error {
			deadline, ok := dctx.Deadline()
			if !ok || time.Until(deadline) > time.Hour {
				return errors.New("Deliver's ctx does not end at the lease")
			}
			panic("nil map in the webhook client")
		},
		OnSettled: func(_ Intent, err error) { got = err; cancel() }}
	require.NoError(t, relay.Run(ctx))
	var pe *DeliverPanicError
	require.ErrorAs(t, got, &pe)
	require.Equal(t, "nil map in the webhook client", pe.Value)
	require.Contains(t, pe.Stack, "TestRelayRecoversDeliverPanic")
	require.NotContains(t, pe.Stack, "runtime/debug.Stack")
	its, err := b.Intents(context.Background(), IntentFilter{})
	require.NoError(t, err)
	require.Equal(t, id, its[0].ID)
	require.Equal(t, IntentDead, its[0].Status)
	require.Contains(t, its[0].Reason, "Deliver panicked: nil map in the webhook client")
}
