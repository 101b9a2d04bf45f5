package inbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/inbox"
)

// RunPurge purges, on every run, the done and dead entries older than the horizon, and keeps
// the younger ones and those in progress.
func TestRunPurgeKeepsWhatIsYoungerThanTheHorizon(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ib := inbox.NewMemoryInbox()
	finish := func(id string, dead bool) {
		_, err := ib.Begin(ctx, inbox.Delivery{Key: id, Conversation: "c"})
		require.NoError(t, err)
		if dead {
			require.NoError(t, ib.MarkDead(ctx, id, "x"))
		} else {
			require.NoError(t, ib.Complete(ctx, id, []byte("r")))
		}
	}
	finish("old-done", false)
	finish("old-dead", true)
	_, err := ib.Begin(ctx, inbox.Delivery{Key: "old-running", Conversation: "c"})
	require.NoError(t, err)
	old, _ := ib.Get(ctx, "old-dead")
	boundary := time.Now()
	for !boundary.After(old.UpdatedAt) {
		boundary = time.Now()
	}
	for !time.Now().After(boundary) { // the young entries are updated after the boundary
	}
	finish("young-done", false)
	finish("young-dead", true)

	const horizon = 24 * time.Hour
	type run struct {
		n   int64
		err error
	}
	runs := make(chan run, 100)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- inbox.RunPurge(rctx, ib, inbox.PurgeSchedule{
			Horizon: horizon, Every: time.Millisecond,
			NowFunc:    func() time.Time { return boundary.Add(horizon) },
			PurgedFunc: func(n int64, err error) { runs <- run{n, err} }, // not require: another goroutine
		})
	}()
	first := <-runs
	require.NoError(t, first.err)
	require.EqualValues(t, 2, first.n, "the first run purges the two old finished entries")
	next := <-runs
	require.NoError(t, next.err)
	require.EqualValues(t, 0, next.n, "the next run finds nothing more")
	cancel()
	require.NoError(t, <-done)

	for _, id := range []string{"old-done", "old-dead"} {
		_, err := ib.Get(ctx, id)
		require.ErrorIs(t, err, inbox.ErrNotFound, id)
	}
	for _, id := range []string{"old-running", "young-done", "young-dead"} {
		_, err := ib.Get(ctx, id)
		require.NoError(t, err, id)
	}
}

func TestRunPurgeRefusesABadSchedule(t *testing.T) {
	t.Parallel()
	ib := inbox.NewMemoryInbox()
	require.ErrorContains(t, inbox.RunPurge(context.Background(), ib, inbox.PurgeSchedule{}), "Horizon")
	require.ErrorContains(t, inbox.RunPurge(context.Background(), ib, inbox.PurgeSchedule{Horizon: time.Hour, Every: -1}), "Every")
	require.ErrorContains(t, inbox.RunPurge(context.Background(), nil, inbox.PurgeSchedule{Horizon: time.Hour}), "nil Inbox")
}
