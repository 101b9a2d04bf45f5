package consumer

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/turnstile-go/turnstile/consumer/internal/window"
	"github.com/turnstile-go/turnstile/turn"
)

// record is one request record in a partition's window; its window.Record (slot) holds its
// state and its key's queue, allocated with it.
type record struct {
	slot window.Record[*record]
	p    *partition
	msg  *sarama.ConsumerMessage

	// staged is the transactional mode's outcome waiting for every lower record's (txn.go).
	staged *outbound
	// batch holds the records of the key taken with this one for a BatchHandler (batch.go).
	batch []*record
}

// partition is one claimed partition: its window (records, key queues, watermark; package
// window owns those and their transitions), the goroutines that start and end its turns, and
// the flags of its claim's end. Every call on the window is made under mu.
//
// The sink (sink.go) decides what a handed-off outcome becomes and how its offset commits;
// the partition never asks which commit mode runs.
type partition struct {
	c   *Consumer
	t   tp
	log *slog.Logger

	sess sarama.ConsumerGroupSession

	// turns is the parent of every turn's context: it outlives the claim by the grace and is
	// cancelled after it. waits ends when the claim closes, so that backoff sleeps and
	// rate-limit waits end at once while a running handler keeps its grace.
	turns       context.Context
	cancelTurns context.CancelFunc
	waits       context.Context
	cancelWaits context.CancelFunc

	// out is held (read) while an outcome is handed to the sink and (write) by abandon, so
	// that once abandon returns nothing of this partition reaches the producer again.
	out sync.RWMutex
	// stage is held while staged outcomes are collected and sent in offset order (txn.go).
	stage sync.Mutex

	mu        sync.Mutex
	w         *window.Window[*record]
	idle      bool          // the dispatcher has returned
	abandoned bool          // nothing is handed off or marked any more
	wakeStart chan struct{} // to the dispatcher: a key became ready, or room opened
	wakeDrain chan struct{} // to the draining claim: running or sending went down
}

func newPartition(c *Consumer, sess sarama.ConsumerGroupSession, t tp) *partition {
	p := &partition{
		c: c, t: t, sess: sess, log: c.log.With("topic", t.topic, "partition", t.partition),
		w:         window.New[*record](window.Limits{MaxBuffered: c.cfg.MaxBuffered, MaxInFlight: c.cfg.MaxInFlightPerPartition}),
		wakeStart: make(chan struct{}, 1), wakeDrain: make(chan struct{}, 1),
	}
	// Turns outlive the session's context by the grace, so they do not derive from it; they
	// keep the values of Run's context (tracing, tenant), and tell the Runner that a request
	// can run alone (turn.WithCrashIsolation; serve.go's handle runs it so).
	p.turns, p.cancelTurns = context.WithCancel(turn.WithCrashIsolation(context.WithoutCancel(c.runCtx), false))
	p.waits, p.cancelWaits = context.WithCancel(p.turns)
	return p
}

func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// keyOf is the ordering key of a record: its record key by key, one key (nil) by partition.
func (p *partition) keyOf(msg *sarama.ConsumerMessage) []byte {
	if p.c.cfg.Ordering == OrderByPartition {
		return nil
	}
	return msg.Key
}

// push adds a record to the window (queued). A full window pauses the partition; records that
// still arrive from fetches already made are held, never run early out of order. push never
// blocks, so the feeder sees a revoke at once.
func (p *partition) push(msg *sarama.ConsumerMessage) {
	r := &record{p: p, msg: msg}
	r.slot.Offset, r.slot.Value = msg.Offset, r
	p.mu.Lock()
	ev, ok := p.w.Push(&r.slot, p.keyOf(msg))
	n := p.w.Len()
	p.act(ev)
	p.mu.Unlock()
	if ok {
		p.c.stats.peak(int64(n))
	}
}

// act carries out what a window transition asks for. Called with mu held, so that the
// window's full flag and sarama's pause state cannot disagree (pauses.mu is a leaf lock, and
// Pause and Resume only flip sarama's in-memory flags); MarkOffset only records the offset in
// memory.
func (p *partition) act(ev window.Event) {
	if ev == 0 {
		return
	}
	if ev.Has(window.Filled) {
		p.c.pauses.setFull(p.t, true)
		p.c.sink.filled()
	}
	if ev.Has(window.Freed) {
		p.c.pauses.setFull(p.t, false)
	}
	if ev.Has(window.Advanced) && !p.abandoned {
		p.c.sink.advanced(p)
	}
	if ev.Has(window.Ready) {
		wake(p.wakeStart)
	}
}

// dispatch starts turns until the partition stops: for each, it waits for a ready key and
// room under the partition's bound, for the end of a rate-limit pause, and for a slot under
// the member's bound (Config.MaxInFlight, a FIFO channel, so partitions take turns), then
// hands the key's next record to the member's workers (Consumer.work). After a revoke it
// goes on with the gap records (see close) until none is left or the grace ends.
func (p *partition) dispatch() {
	defer func() {
		p.mu.Lock()
		p.idle = true
		p.mu.Unlock()
		wake(p.wakeDrain)
	}()
	for {
		if !p.waitStartable() || p.c.throttle.gate(p.turns) != nil {
			return
		}
		if !p.acquire() {
			return
		}
		p.mu.Lock()
		slot := p.w.Start()
		if slot != nil && p.c.batcher != nil {
			slot.Value.batch = slot.Value.batch[:0]
			for _, more := range p.w.TakeQueued(slot, p.c.cfg.MaxBatch-1) {
				slot.Value.batch = append(slot.Value.batch, more.Value)
			}
		}
		p.mu.Unlock()
		if slot == nil { // stopped meanwhile
			<-p.c.sem
			return
		}
		p.c.work <- slot.Value // never blocks: a slot is held for it, and there are as many workers
	}
}

// acquire takes a slot under the member's bound (Consumer.sem), waiting for one; false when the
// partition stopped first, with no slot held.
func (p *partition) acquire() bool {
	select { // the common case, a slot free: one channel, no select to park in
	case p.c.sem <- struct{}{}:
		if p.turns.Err() != nil { // stopped meanwhile: as the waiting select below would see
			<-p.c.sem
			return false
		}
		return true
	default:
	}
	select {
	case p.c.sem <- struct{}{}:
		return true
	case <-p.turns.Done():
		return false
	}
}

// waitStartable waits until a record may start; false when none ever will
// (window.Window.Exhausted).
func (p *partition) waitStartable() bool {
	for {
		p.mu.Lock()
		ok, done := p.w.CanStart(), p.w.Exhausted()
		p.mu.Unlock()
		if ok {
			return true
		}
		if done {
			return false
		}
		select {
		case <-p.wakeStart:
		case <-p.turns.Done():
			return false
		}
	}
}

// serve runs r's turn (with the records of its batch, if any) and hands off its outcome, then
// frees the member's slot.
func (p *partition) serve(r *record) {
	defer func() { <-p.c.sem }()
	if len(r.batch) > 0 {
		p.serveBatch(r)
		return
	}
	p.serveOne(r)
}

// serveOne runs r's turn and hands off its outcome; false when the record was left to the
// partition's next owner (abandoned, or the producer is closing).
func (p *partition) serveOne(r *record) bool {
	ob, ok := p.process(r)
	ob = p.unpublished(ob) // a replay's empty topics
	if ok && !p.notified(ob) {
		ok = false // the partition closed before the Handler took the dead-letter notice
	}
	if !ok {
		p.endAbandoned()
		return false
	}
	return p.handoff(r, ob)
}

// endAbandoned ends a turn that was abandoned (revoke, shutdown): its record stays running, so
// the watermark stays below it and the next owner reads it again.
func (p *partition) endAbandoned() {
	p.mu.Lock()
	p.w.Abandoned()
	p.mu.Unlock()
	p.turnEnded()
}

// turnEnded wakes the dispatcher, which may wait for room under MaxInFlightPerPartition, and
// the draining claim.
func (p *partition) turnEnded() {
	wake(p.wakeStart)
	wake(p.wakeDrain)
}

// handoff gives r's outcome (nil: nothing to publish) to the sink; only then may the key's
// next record start. After abandon it does nothing: a late turn on a released partition is
// neither published nor committed. It returns false when r was left to the next owner.
func (p *partition) handoff(r *record, ob *outbound) bool {
	p.out.RLock()
	defer p.out.RUnlock()
	if p.abandoned { // written under out's write lock, which the read lock excludes
		p.c.stats.lateDropped.Add(1)
		p.log.Warn("turn finished after its partition was released; not published, not committed",
			"offset", r.msg.Offset)
		p.endAbandoned()
		return false
	}
	return p.c.sink.deliver(r, ob)
}

// completeNow completes r, whose turn publishes nothing: running -> done.
func (p *partition) completeNow(r *record) bool {
	p.mu.Lock()
	p.c.stats.records.Add(1)
	p.act(p.w.Complete(&r.slot))
	p.mu.Unlock()
	p.turnEnded()
	return true
}

// send hands r's outcome ob to the producer through put (running -> sending); false from put
// (the producer is closing) leaves the record running, to the next owner, and is returned.
func (p *partition) send(r *record, ob *outbound, put func(*outbound) bool) bool {
	p.mu.Lock()
	p.w.BeginSend(&r.slot)
	p.mu.Unlock()
	sent := put(ob)
	p.mu.Lock()
	if sent {
		p.act(p.w.Sent(&r.slot))
	} else {
		p.w.SendFailed(&r.slot)
	}
	p.mu.Unlock()
	p.turnEnded()
	return sent
}

// resend hands a retried or replacement outcome to the producer; the record stays sending.
// After abandon the record is left sending: the next owner redoes it.
func (p *partition) resend(ob *outbound) {
	p.out.RLock()
	defer p.out.RUnlock()
	if p.abandoned || !p.c.out.send(ob) {
		p.unsent()
	}
}

// acked records the acknowledgement of r's outcome: sending -> done, and the watermark may
// advance. A window that drops to half of MaxBuffered ends a backpressure pause.
func (p *partition) acked(r *record) {
	p.mu.Lock()
	p.c.stats.records.Add(1)
	p.act(p.w.Acked(&r.slot))
	p.mu.Unlock()
	wake(p.wakeDrain)
}

// unsent gives up on publishing a sending record (the partition closed): it stays below the
// watermark for the next owner.
func (p *partition) unsent() {
	p.mu.Lock()
	p.w.Unsent()
	p.mu.Unlock()
	wake(p.wakeDrain)
}

// watermark returns the offset to commit, as if the records for which in is true were done
// (nil: done ones only); ok false when the window never held a record. Called with mu held.
func (p *partition) watermark(in func(*window.Record[*record]) bool) (int64, bool) {
	return p.w.Watermark(in)
}

// close is the revoke (window.Window.Close): no record is added any more, and of the queued
// ones only the gap records start. Backoff sleeps and rate-limit waits of running turns end
// at once (they are abandoned); running handlers keep their grace. sarama keeps a pause
// across a revoke and would apply it to the partition's next claim, so a full window's pause
// ends here.
func (p *partition) close() {
	p.mu.Lock()
	p.act(p.w.Close())
	p.mu.Unlock()
	p.cancelWaits()
	wake(p.wakeStart)
}

// stop ends the starting of records, gap records included: the grace is over.
func (p *partition) stop() {
	p.mu.Lock()
	p.w.Stop()
	p.mu.Unlock()
	wake(p.wakeStart)
}

// drain waits until the dispatcher has returned, no turn runs and every handed-off outcome is
// acknowledged, or until done ends; it reports whether the partition drained.
func (p *partition) drain(done <-chan time.Time) bool {
	for {
		p.mu.Lock()
		idle := p.idle && p.w.Idle()
		p.mu.Unlock()
		if idle {
			return true
		}
		select {
		case <-p.wakeDrain:
		case <-done:
			return false
		}
	}
}

// abandon makes the partition hand off and mark nothing from now on. It waits for a handoff
// in progress (a channel send to the producer) and for a commit in progress (sink.exclusive)
// to finish.
func (p *partition) abandon() {
	p.out.Lock()
	p.c.sink.exclusive(func() {
		p.mu.Lock()
		p.abandoned = true
		p.mu.Unlock()
	})
	p.out.Unlock()
	p.cancelTurns()
}

// buffered returns the records in the window and the turns running and sending.
func (p *partition) buffered() (window, running, sending int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.w.Len(), p.w.Running(), p.w.Sending()
}
