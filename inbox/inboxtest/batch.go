package inboxtest

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/inbox"
)

// concurrentCallers is how many callers the batched subtests start at once: enough to fill
// batches of a few tens.
const concurrentCallers = 24

// Batched is an inbox whose writes are batched across concurrent callers, for RunBatched.
type Batched struct {
	// Inbox is the inbox under test, for this subtest alone.
	Inbox inbox.Inbox
	// Break makes every write of Inbox fail from now on, the way a database outage would (a
	// dropped connection, a missing table, ...), until the returned mend is called. It may
	// call t.Fatal.
	Break func(t *testing.T) (mend func())
}

// RunBatched checks an inbox whose writes are batched across concurrent callers (for
// inbox/sqlinbox, one with Options.Batch on), beyond what Run checks of every inbox: many
// Begins at once, each with its own outcome. Run it in addition to Run.
//
//   - OutcomesInOneBatch: Begins at once of new requests, of requests in progress, done and
//     dead: each caller gets its own entry (StatusNew with attempt 1, one more attempt, the
//     stored result, the reason).
//   - FailedBatch: while the inbox is broken, every Begin gets an error and no entry is made;
//     once mended, every Begin makes its entry.
//   - CancelOneCaller: one caller's context ends while others' Begins go on: that caller gets
//     an error and no entry is made for it, or gets its entry and it is stored; every other
//     caller gets its entry.
//
// newBatched is called once in each subtest, and subtests run in parallel.
func RunBatched(t *testing.T, newBatched func(t *testing.T) Batched) {
	t.Helper()
	for _, c := range []struct {
		name string
		run  func(t *testing.T, b Batched)
	}{
		{"OutcomesInOneBatch", testBatchOutcomes},
		{"FailedBatch", testBatchFails},
		{"CancelOneCaller", testBatchCancelOne},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, newBatched(t))
		})
	}
}

// beginAtOnce begins ds[i] with ctxs(i), all released at once, and returns the outcomes.
func beginAtOnce(b inbox.Inbox, ds []inbox.Delivery, ctxOf func(i int) context.Context) ([]inbox.Entry, []error) {
	entries, errs := make([]inbox.Entry, len(ds)), make([]error, len(ds))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, d := range ds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			entries[i], errs[i] = b.Begin(ctxOf(i), d)
		}()
	}
	close(start)
	wg.Wait()
	return entries, errs
}

func background(int) context.Context { return context.Background() }

// testBatchOutcomes: request i is new (i%4 == 0), in progress (1), done (2) or dead (3).
func testBatchOutcomes(t *testing.T, b Batched) {
	ctx := context.Background()
	ib := b.Inbox
	ds := make([]inbox.Delivery, concurrentCallers)
	for i := range ds {
		ds[i] = delivery(t, int64(i))
		switch i % 4 {
		case 1:
			begin(t, ib, ds[i])
		case 2:
			begin(t, ib, ds[i])
			require.NoError(t, ib.Complete(ctx, ds[i].Key, []byte("result of "+ds[i].Key)))
		case 3:
			begin(t, ib, ds[i])
			require.NoError(t, ib.MarkDead(ctx, ds[i].Key, "dead: "+ds[i].Key))
		}
		ds[i].Offset += 100
	}
	entries, errs := beginAtOnce(ib, ds, background)
	for i, e := range entries {
		require.NoError(t, errs[i], "caller %d", i)
		require.Equal(t, ds[i].Key, e.Key, "caller %d gets its own entry", i)
		switch i % 4 {
		case 0:
			require.Equal(t, inbox.StatusNew, e.Status, "caller %d", i)
			require.Equal(t, 1, e.Attempts)
			requireLocation(t, ds[i], e)
		case 1:
			require.Equal(t, inbox.StatusInProgress, e.Status, "caller %d", i)
			require.Equal(t, 2, e.Attempts)
			requireLocation(t, ds[i], e)
		case 2:
			require.Equal(t, inbox.StatusDone, e.Status, "caller %d", i)
			require.Equal(t, "result of "+ds[i].Key, string(e.Result))
			require.Equal(t, 1, e.Attempts)
		case 3:
			require.Equal(t, inbox.StatusDead, e.Status, "caller %d", i)
			require.Equal(t, "dead: "+ds[i].Key, e.Reason)
		}
		require.Equal(t, e.Attempts, getEntry(t, ib, ds[i].Key).Attempts, "caller %d's entry as stored", i)
	}
}

// testBatchFails: a broken inbox fails every Begin and makes no entry.
func testBatchFails(t *testing.T, b Batched) {
	ib := b.Inbox
	ds := make([]inbox.Delivery, concurrentCallers)
	for i := range ds {
		ds[i] = delivery(t, int64(i))
	}
	mend := b.Break(t)
	_, errs := beginAtOnce(ib, ds, background)
	mend()
	for i, err := range errs {
		require.Error(t, err, "caller %d of a failed batch", i)
		_, err := ib.Get(context.Background(), ds[i].Key)
		require.ErrorIs(t, err, inbox.ErrNotFound, "caller %d got an error, yet its entry is stored", i)
	}
	entries, errs := beginAtOnce(ib, ds, background)
	for i, err := range errs {
		require.NoError(t, err, "caller %d once mended", i)
		require.Equal(t, inbox.StatusNew, entries[i].Status)
	}
}

// testBatchCancelOne: the context of caller 0 ends soon after its Begin starts.
func testBatchCancelOne(t *testing.T, b Batched) {
	ib := b.Inbox
	for round := range 5 {
		ds := make([]inbox.Delivery, concurrentCallers)
		for i := range ds {
			ds[i] = delivery(t, int64(i))
		}
		ctx, cancel := context.WithCancel(context.Background())
		entries, errs := beginAtOnce(ib, ds, func(i int) context.Context {
			if i == 0 {
				go cancel()
				return ctx
			}
			return context.Background()
		})
		cancel()
		got, err := ib.Get(context.Background(), ds[0].Key)
		if errs[0] != nil {
			require.True(t, errors.Is(err, inbox.ErrNotFound), "round %d: the cancelled caller got %v, yet its entry is stored: %v", round, errs[0], err)
		} else {
			require.NoError(t, err, "round %d: the cancelled caller got its entry, yet it is not stored", round)
			require.Equal(t, inbox.StatusNew, entries[0].Status)
			require.Equal(t, 1, got.Attempts)
		}
		for i := 1; i < len(ds); i++ {
			require.NoError(t, errs[i], "round %d: caller %d", round, i)
			require.Equal(t, inbox.StatusNew, entries[i].Status)
		}
	}
}
