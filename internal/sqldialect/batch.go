package sqldialect

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Batching configures the batching of a store's writes across concurrent callers: the writes
// that callers make at about the same time go to the database together, in one statement or
// one transaction, and each caller returns once the batch holding its write committed (or
// failed). The stores' public packages alias it (sqlsession.Batching, sqlinbox.Batching),
// whose doc says which writes are batched.
//
// The zero value turns batching off: every write is a statement or transaction of its own,
// as it was before batching existed.
type Batching struct {
	// Size is the most writes one batch holds; at least 2 turns batching on, 0 leaves it off.
	// A good figure is half the turns in flight at once (the consumer's MaxInFlight / 2, at
	// most MaxBatchSize; with thousands in flight and a slow model, batches close on Wait
	// long before they fill: the scale benchmark meets its line at 256, not compared with
	// other sizes). A
	// batch that is full is sent at once, without waiting out Wait, and when turns come faster
	// than the store serves them (a fast model), they move through a turn's batched calls
	// (the inbox's Begin, the session's Get, the append) in groups of Size: two groups take
	// turns, one writing while the other reads. A Size that does not divide MaxInFlight leaves
	// a group short of it, which waits out Wait at every call; a Size of MaxInFlight makes one
	// group, whose batches never fill while some of its turns are still in an earlier call.
	// Measured in BENCHMARKS.md ("Batch size and wait", 64 turns in flight, an instant model,
	// PostgreSQL): Size 32 served more turns a second than 64 in each of four alternated pairs
	// (1% to 34% more), and more than 16, 21, 24, 40 or 48.
	Size int
	// Wait is how long a batch stays open for more writes after its first one, unless it is
	// full before: the longest a write waits for others before its batch is sent. A batch that
	// finds the store's batches already running stays open until one ends (up to Size
	// writes), so under load batches fill without waiting. Zero means DefaultBatchWait;
	// negative is refused.
	Wait time.Duration
}

// DefaultBatchWait is the Batching.Wait used when it is zero: 2 ms, about two commits of a
// local database, a small part of a turn that calls a model. With batches that fill (see
// Batching.Size) it is seldom waited out; when a group of turns is split, it keeps the part
// that was left behind open long enough for the next group to fill it, rather than sent
// short (BENCHMARKS.md, "Batch size and wait": at Size 32 on PostgreSQL, 2 ms served 14% to
// 16% more turns a second than 1 ms in three alternated rounds, 3 and 5 ms about as many as
// 2 ms, 500 µs fewer than 1 ms).
const DefaultBatchWait = 2 * time.Millisecond

// MaxBatchSize bounds Batching.Size: each write of a batch is a few host parameters of one
// statement, and the statements stay under SQLite's limit of 32,766 parameters.
const MaxBatchSize = 1000

// On reports whether b turns batching on.
func (b Batching) On() bool { return b.Size > 0 }

// Validate reports an error for a Size of 1, negative or above MaxBatchSize, or a negative Wait.
func (b Batching) Validate() error {
	switch {
	case b.Size < 0 || b.Size == 1 || b.Size > MaxBatchSize:
		return fmt.Errorf("Batching.Size: %d is not 0 (off) or 2 to %d", b.Size, MaxBatchSize)
	case b.Wait < 0:
		return fmt.Errorf("Batching.Wait: %v is negative", b.Wait)
	}
	return nil
}

// BatchesAtOnce is how many batches of one kind of write a store runs at once on this
// dialect: on PostgreSQL a few, each on a connection of its own, so that a batch fills while
// others run; on SQLite one, as a write holds the database's only write lock.
func (d *Dialect) BatchesAtOnce() int {
	if d.name == SQLite {
		return 1
	}
	return 4
}

// LiveCalls finishes the calls whose caller's context has ended with its error (a batch makes
// no write for them) and returns the others, in order.
func LiveCalls[Req, Res any](calls []*Call[Req, Res]) []*Call[Req, Res] {
	live := calls[:0:0]
	for _, c := range calls {
		if err := c.Ctx.Err(); err != nil {
			var zero Res
			c.Finish(zero, err)
			continue
		}
		live = append(live, c)
	}
	return live
}

// RetryAlone reports whether a batch of n calls that failed with err, under the batch's ctx,
// should be tried again one call at a time: it held several calls, its callers have not all
// given up, and err is not an infrastructure failure (IsTransient), so that it may be one
// call's bad input, which should fail that call alone.
func RetryAlone(ctx context.Context, n int, err error) bool {
	return err != nil && n > 1 && ctx.Err() == nil && !IsTransient(err)
}

// RetryEachAlone finishes each call with one's outcome for it, made one call at a time under
// the call's CallContext, and reports true, when RetryAlone says a batch that failed with err
// should be; otherwise it does nothing and reports false.
func RetryEachAlone[Req, Res any](ctx context.Context, calls []*Call[Req, Res], err error, one func(ctx context.Context, c *Call[Req, Res]) (Res, error)) bool {
	if !RetryAlone(ctx, len(calls), err) {
		return false
	}
	for _, c := range calls {
		c.Finish(one(CallContext(ctx, c.Ctx), c))
	}
	return true
}

// Call is one caller's write in a Batcher: its request, and the outcome the batch gives it
// with Finish.
type Call[Req, Res any] struct {
	// Req is the caller's request, as given to Do.
	Req Req
	// Ctx is the caller's context: a batch may leave out a call whose context ended, finishing
	// it with the context's error, as long as it wrote nothing for it.
	Ctx context.Context

	key       string
	done      chan struct{}
	res       Res
	err       error
	claimed   bool // taken into a running batch (under the Batcher's lock)
	withdrawn bool // its caller gave up before it was claimed (under the Batcher's lock)
	finished  atomic.Bool
}

// Finish gives the call its outcome and wakes its caller; only the first Finish counts.
func (c *Call[Req, Res]) Finish(res Res, err error) {
	if c.finished.Swap(true) {
		return
	}
	c.res, c.err = res, err
	close(c.done)
}

// Finished reports whether Finish was called.
func (c *Call[Req, Res]) Finished() bool { return c.finished.Load() }

// Batcher gathers the writes of concurrent callers into batches and hands each batch to a run
// function, which makes the writes and finishes every call. A batch is sent when it holds Size
// calls, or Wait after its first call, once fewer than the Batcher's limit of batches run; two
// calls with the same key are never in one batch (the later waits for a later batch), so that
// a statement never writes one row twice. No goroutine outlives the batches in flight.
type Batcher[Req, Res any] struct {
	size  int
	wait  time.Duration
	slots chan struct{}
	hold  func() (context.Context, func())
	run   func(ctx context.Context, calls []*Call[Req, Res])

	mu    sync.Mutex
	open  *pendingBatch[Req, Res]
	later []*Call[Req, Res] // calls whose key the open batch holds already
}

type pendingBatch[Req, Res any] struct {
	calls []*Call[Req, Res]
	keys  map[string]bool
	full  chan struct{}
}

// NewBatcher returns a Batcher of batches of at most b.Size calls for a store of dialect d on
// db, each handed to run. Batches of one Batcher run at most d.BatchesAtOnce() at once; on
// SQLite a batch is also held open while another write on db holds its writer slot (see
// lockWrites), whichever store's it is, so that it fills while the database is busy. run is
// given a context that ends when the contexts of all the batch's callers have ended, and must
// Finish every call it is given (a call it leaves unfinished gets an error); a panic in run
// fails the calls it did not finish.
func NewBatcher[Req, Res any](b Batching, d *Dialect, db *sql.DB, run func(ctx context.Context, calls []*Call[Req, Res])) *Batcher[Req, Res] {
	var hold func() (context.Context, func())
	if d.name == SQLite {
		hold = func() (context.Context, func()) {
			slot := writerSlot(db)
			slot <- struct{}{}
			return context.WithValue(context.Background(), heldKey{}, db), func() { <-slot }
		}
	}
	return newBatcher(b, d.BatchesAtOnce(), hold, run)
}

// NewReadBatcher returns a Batcher of reads: as NewBatcher, but its batches never take a
// SQLite writer slot (WAL readers do not wait for the writer), and up to 4 run at once on
// either dialect.
func NewReadBatcher[Req, Res any](b Batching, run func(ctx context.Context, calls []*Call[Req, Res])) *Batcher[Req, Res] {
	return newBatcher(b, 4, nil, run)
}

// newBatcher is NewBatcher with at most running batches at once. hold, when not nil, is called
// before a batch is sent and returns the context the batch runs under (its values, not its
// end) and what to call once it ran.
func newBatcher[Req, Res any](b Batching, running int, hold func() (context.Context, func()), run func(ctx context.Context, calls []*Call[Req, Res])) *Batcher[Req, Res] {
	return &Batcher[Req, Res]{
		size:  b.Size,
		wait:  cmpOr(b.Wait, DefaultBatchWait),
		slots: make(chan struct{}, max(running, 1)),
		hold:  hold,
		run:   run,
	}
}

// heldKey is the context key under which a batch's context says that it holds a SQLite
// *sql.DB's writer slot: the writes it makes through BeginWrite and Write on that db, with
// that context or one made by CallContext, do not take the slot again.
type heldKey struct{}

// CallContext returns c's context for a write that a batch running under batchCtx makes for c
// alone (retrying a failed batch one call at a time): c's, which ends when c's caller gives
// up, with the writer slot the batch holds.
func CallContext(batchCtx, callCtx context.Context) context.Context {
	if db := batchCtx.Value(heldKey{}); db != nil {
		return context.WithValue(callCtx, heldKey{}, db)
	}
	return callCtx
}

func cmpOr(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// Do adds the caller's write to a batch and returns its outcome once the batch ended.
//
// Cancellation: a caller whose ctx ends while its call waits for a batch to be sent gets
// ctx.Err() and its write is not made (the call is withdrawn). Once the batch holding the call
// is sent, the caller waits for its end and gets the outcome the run function gives it (a
// run function may still leave out a call whose context ended, see Call.Ctx): the batch goes
// on while the context of any of its callers has not ended, and its context ends when all
// have. A ctx that has ended before Do gets ctx.Err() at once.
func (b *Batcher[Req, Res]) Do(ctx context.Context, key string, req Req) (Res, error) {
	var zero Res
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	c := &Call[Req, Res]{Req: req, Ctx: ctx, key: key, done: make(chan struct{})}
	b.mu.Lock()
	b.enqueue(c)
	b.mu.Unlock()
	select {
	case <-c.done:
		return c.res, c.err
	case <-ctx.Done():
	}
	b.mu.Lock()
	if !c.claimed {
		c.withdrawn = true
		b.mu.Unlock()
		return zero, ctx.Err()
	}
	b.mu.Unlock()
	<-c.done
	return c.res, c.err
}

// enqueue adds c to the open batch, opening one when there is none; b.mu is held.
func (b *Batcher[Req, Res]) enqueue(c *Call[Req, Res]) {
	p := b.open
	if p == nil {
		p = &pendingBatch[Req, Res]{keys: map[string]bool{}, full: make(chan struct{})}
		b.open = p
		go b.send(p)
	}
	if p.keys[c.key] {
		b.later = append(b.later, c)
		return
	}
	p.keys[c.key] = true
	p.calls = append(p.calls, c)
	if len(p.calls) >= b.size {
		close(p.full)
		b.closeOpen()
	}
}

// closeOpen closes the open batch to new calls and moves the calls held back for it into a
// new one; b.mu is held.
func (b *Batcher[Req, Res]) closeOpen() {
	b.open = nil
	later := b.later
	b.later = nil
	for _, c := range later {
		if !c.withdrawn {
			b.enqueue(c)
		}
	}
}

// send waits for p to fill or for Wait, then for a free slot, and runs it.
func (b *Batcher[Req, Res]) send(p *pendingBatch[Req, Res]) {
	timer := time.NewTimer(b.wait)
	select {
	case <-timer.C:
	case <-p.full:
	}
	timer.Stop()
	b.slots <- struct{}{}
	defer func() { <-b.slots }()
	base, release := context.Background(), func() {}
	if b.hold != nil {
		base, release = b.hold()
	}
	defer release()
	b.mu.Lock()
	if b.open == p {
		b.closeOpen()
	}
	calls := make([]*Call[Req, Res], 0, len(p.calls))
	for _, c := range p.calls {
		if !c.withdrawn {
			c.claimed = true
			calls = append(calls, c)
		}
	}
	b.mu.Unlock()
	if len(calls) > 0 {
		b.runBatch(base, calls)
	}
}

// errUnfinished is what a call gets when the batch's run function returned without finishing it.
var errUnfinished = errors.New("sqldialect: batch ended without an outcome for this write")

// runBatch runs calls under a context that ends when all their callers' contexts have ended.
func (b *Batcher[Req, Res]) runBatch(base context.Context, calls []*Call[Req, Res]) {
	ctx, cancel := context.WithCancel(base)
	defer cancel()
	left := atomic.Int64{}
	left.Store(int64(len(calls)))
	for _, c := range calls {
		stop := context.AfterFunc(c.Ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
		defer stop()
	}
	defer func() {
		err := errUnfinished
		if v := recover(); v != nil {
			err = fmt.Errorf("sqldialect: batch panicked: %v", v)
		}
		var zero Res
		for _, c := range calls {
			c.Finish(zero, err)
		}
	}()
	b.run(ctx, calls)
}

// Deferred is a write a store defers to the end of a BatchTx (see BatchTx.Deferred): writes
// of several items gathered into one statement, made by Flush before the commit.
type Deferred interface {
	// Flush makes the deferred writes on q, the batch's transaction. It returns the error of
	// each item whose write failed (by item index), for the batch to leave that item out, or an
	// error that fails the whole batch. A batch that gets items' errors must roll its
	// transaction back and run again without those items, never commit it: a Flush may have
	// written for an item it reports failed.
	Flush(ctx context.Context, q Querier) (map[int]error, error)
}

// BatchTx is the transaction of a batch of several callers' writes (items), as a store hands
// it to the writes of other stores that join it (session.JoinFunc): a Querier, which also lets
// those stores defer their writes to the end of the batch and make them in one statement for
// all items (inbox/sqlinbox's CompleteTx does).
type BatchTx struct {
	Querier
	item     int
	deferred map[any]Deferred
	order    []any
}

// NewBatchTx wraps q, a batch's transaction.
func NewBatchTx(q Querier) *BatchTx { return &BatchTx{Querier: q, deferred: map[any]Deferred{}} }

// SetItem says which item's writes come next: what Deferred writes added from now on belong to.
func (t *BatchTx) SetItem(i int) { t.item = i }

// Item returns the index of the item whose writes run now (see SetItem).
func (t *BatchTx) Item() int { return t.item }

// Deferred returns owner's deferred writes in t, made by mk on owner's first call.
func (t *BatchTx) Deferred(owner any, mk func() Deferred) Deferred {
	d, ok := t.deferred[owner]
	if !ok {
		d = mk()
		t.deferred[owner] = d
		t.order = append(t.order, owner)
	}
	return d
}

// Flush makes every deferred write, in the order their owners first deferred one, and
// returns the errors of the items that failed, or the first error that fails the batch.
func (t *BatchTx) Flush(ctx context.Context) (map[int]error, error) {
	failed := map[int]error{}
	for _, owner := range t.order {
		f, err := t.deferred[owner].Flush(ctx, t.Querier)
		if err != nil {
			return nil, err
		}
		for i, err := range f {
			if _, ok := failed[i]; !ok {
				failed[i] = err
			}
		}
	}
	return failed, nil
}
