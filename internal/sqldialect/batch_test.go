package sqldialect

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// recorder is a run function that records the batches it gets and answers each call with
// its request doubled, after release is closed (nil: at once).
type recorder struct {
	mu      sync.Mutex
	batches [][]int
	release chan struct{}
}

func (r *recorder) run(_ context.Context, calls []*Call[int, int]) {
	if r.release != nil {
		<-r.release
	}
	var b []int
	for _, c := range calls {
		b = append(b, c.Req)
	}
	r.mu.Lock()
	r.batches = append(r.batches, b)
	r.mu.Unlock()
	for _, c := range calls {
		c.Finish(2*c.Req, nil)
	}
}

// doAll calls Do for each request at once, with key keyOf(req), and returns the results.
func doAll(b *Batcher[int, int], reqs []int, keyOf func(int) string) ([]int, []error) {
	res, errs := make([]int, len(reqs)), make([]error, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i], errs[i] = b.Do(context.Background(), keyOf(r), r)
		}()
	}
	wg.Wait()
	return res, errs
}

func TestBatcherGathersAndMapsBack(t *testing.T) {
	t.Parallel()
	r := &recorder{}
	b := newBatcher(Batching{Size: 8, Wait: time.Hour}, 1, nil, r.run)
	reqs := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
	res, errs := doAll(b, reqs, func(i int) string { return fmt.Sprint(i) })
	for i := range reqs {
		require.NoError(t, errs[i])
		require.Equal(t, 2*reqs[i], res[i], "call %d gets its own outcome", i)
	}
	require.Len(t, r.batches, 2, "a batch is sent once full, not after an hour's wait")
	for _, batch := range r.batches {
		require.Len(t, batch, 8)
	}
}

func TestBatcherKeepsAKeyOutOfABatchTwice(t *testing.T) {
	t.Parallel()
	r := &recorder{}
	b := newBatcher(Batching{Size: 100, Wait: 5 * time.Millisecond}, 1, nil, r.run)
	_, errs := doAll(b, []int{1, 2, 3, 4, 5, 6}, func(int) string { return "one row" })
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, r.batches, 6, "calls with one key go one batch each")
}

func TestBatcherWithdrawsACancelledCall(t *testing.T) {
	t.Parallel()
	r := &recorder{release: make(chan struct{})}
	b := newBatcher(Batching{Size: 2, Wait: time.Millisecond}, 1, nil, r.run)
	first := make(chan error, 1)
	go func() {
		_, err := b.Do(context.Background(), "a", 1) // its batch runs, and waits for release
		first <- err
	}()
	require.Eventually(t, func() bool {
		return len(b.slots) == 1 // sent: the next call opens a batch that waits for the slot
	}, 10*time.Second, time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	second := make(chan error, 1)
	go func() {
		_, err := b.Do(ctx, "b", 2)
		second <- err
	}()
	require.Eventually(t, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.open != nil && len(b.open.calls) == 1
	}, 10*time.Second, time.Millisecond)
	cancel()
	require.ErrorIs(t, <-second, context.Canceled, "withdrawn while its batch waited")
	close(r.release)
	require.NoError(t, <-first)
	require.Eventually(t, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.batches) == 1
	}, 10*time.Second, time.Millisecond)
	require.Equal(t, [][]int{{1}}, r.batches, "the withdrawn call never reached a batch")
}

func TestBatcherFailsTheCallsARunLeavesWhenItPanics(t *testing.T) {
	t.Parallel()
	b := newBatcher(Batching{Size: 2, Wait: time.Hour}, 1, nil, func(_ context.Context, calls []*Call[int, int]) {
		calls[0].Finish(1, nil)
		panic("boom")
	})
	res, errs := doAll(b, []int{1, 2}, func(i int) string { return fmt.Sprint(i) })
	var ok, failed int
	for i, err := range errs {
		if err == nil {
			ok++
			require.Equal(t, 1, res[i], "the call finished before the panic keeps its outcome")
		} else {
			failed++
			require.ErrorContains(t, err, "panicked: boom")
		}
	}
	require.Equal(t, [2]int{1, 1}, [2]int{ok, failed})
}

func TestBatchingValidate(t *testing.T) {
	t.Parallel()
	require.NoError(t, Batching{}.Validate())
	require.NoError(t, Batching{Size: 2}.Validate())
	require.False(t, Batching{}.On())
	for _, b := range []Batching{{Size: 1}, {Size: -1}, {Size: MaxBatchSize + 1}, {Size: 4, Wait: -time.Millisecond}} {
		require.Error(t, b.Validate(), "%+v", b)
	}
}
