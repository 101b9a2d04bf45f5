package consumer

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/turnstile-go/turnstile/turn"
)

// recState is where a record is on its way to a committable offset. A record only moves
// forward: queued -> running -> sending -> done, or queued -> running -> done when there is
// nothing to publish. A record whose turn was given up (revoke, shutdown) stays running: it
// holds the watermark, and the partition's next owner reads it again.
type recState uint8

const (
	recQueued  recState = iota // waiting for its key's earlier records
	recRunning                 // its turn runs (attempts, backoffs, rate-limit waits)
	recSending                 // its outcome is with the producer, not yet acknowledged
	recDone                    // its outcome is durable: committable once all lower ones are
)

// record is one request record in a partition's window.
type record struct {
	p     *partition
	msg   *sarama.ConsumerMessage
	key   *keyQueue
	state recState

	// Transactional mode (txn.go): an outcome waits here until every lower record's outcome
	// is staged too, and is then sent (sent), so that a transaction never holds a result
	// whose offset it does not commit.
	staged *outbound
	sent   bool
}

// keyQueue holds the records of one key (in by-key ordering, a conversation; in by-partition
// ordering, the whole partition) that have not finished their turn, in offset order. While
// busy, pending[0] is running; the key's next record starts only after that one's outcome is
// handed to the producer, which keeps the key's results in order on the results topic.
type keyQueue struct {
	name    string
	pending []*record
	busy    bool // pending[0] is running
	ready   bool // in the partition's ready list
}

// partition is the state of one claimed partition: its window of records, the per-key queues
// and the watermark. It is the only place where a record changes state; every change happens
// under mu and is described on the method that makes it.
//
// Goroutines: the claim's feeder calls push; one dispatcher (dispatch) starts turns; each
// turn runs in its own goroutine (serve) and hands its outcome off; the output's ack loop
// calls acked. Lock order: out before mu. No lock is held across a network call: Input() of
// the async producer is a channel send, and MarkOffset only records the offset in memory.
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

	// out is held (read) while an outcome is handed to the producer and (write) by abandon,
	// so that once abandon returns nothing of this partition reaches the producer again.
	out sync.RWMutex
	// stage is held while staged outcomes are collected and sent in offset order (txn.go).
	stage sync.Mutex

	mu        sync.Mutex
	window    []*record            // records received and not yet below the watermark, by offset
	keys      map[string]*keyQueue // keys with records in the window that have not finished
	ready     []*keyQueue          // keys whose next record may start, first come first served
	running   int                  // records in recRunning whose turn has not returned
	sending   int                  // records in recSending
	closed    bool                 // revoked: no record is added, and only gap records start
	limit     int64                // once closed: records below it may still start (see close)
	stopped   bool                 // no record starts any more
	idle      bool                 // the dispatcher has returned
	abandoned bool                 // nothing is handed off or marked any more
	full      bool                 // paused for backpressure
	lastDone  int64                // offset of the last record popped off the window, -1 before
	wakeStart chan struct{}        // to the dispatcher: a key became ready, or room opened
	wakeDrain chan struct{}        // to the draining claim: running or sending went down
}

func newPartition(c *Consumer, sess sarama.ConsumerGroupSession, t tp) *partition {
	p := &partition{
		c: c, t: t, sess: sess, log: c.log.With("topic", t.topic, "partition", t.partition),
		keys: make(map[string]*keyQueue), lastDone: -1,
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

// push adds a record to the window and its key's queue (queued). A full window pauses the
// partition; records that still arrive from fetches already made are held, never run early
// out of order. push never blocks, so the feeder sees a revoke at once.
func (p *partition) push(msg *sarama.ConsumerMessage) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	k := p.keys[string(p.keyOf(msg))] // a lookup by bytes makes no string
	if k == nil {
		k = &keyQueue{name: string(p.keyOf(msg))}
		p.keys[k.name] = k
	}
	r := &record{p: p, msg: msg, key: k}
	p.window = append(p.window, r)
	k.pending = append(k.pending, r)
	started := p.makeReady(k)
	n := len(p.window)
	if n >= p.c.cfg.MaxBuffered && !p.full {
		p.setFull(true)
	}
	p.mu.Unlock()
	p.c.stats.peak(int64(n))
	if started {
		wake(p.wakeStart)
	}
}

// setFull records and applies a backpressure pause or its end. Called with mu held, so that
// the flag and sarama's pause state cannot disagree (pauses.mu is a leaf lock, and Pause and
// Resume only flip sarama's in-memory flags).
func (p *partition) setFull(on bool) {
	p.full = on
	p.c.pauses.setFull(p.t, on)
	if on && p.c.txn != nil { // its records are done only at commit: commit now (txn.go)
		wake(p.c.txn.full)
	}
}

// makeReady puts k on the ready list if its next record may start. Called with mu held.
func (p *partition) makeReady(k *keyQueue) bool {
	if k.busy || k.ready || len(k.pending) == 0 || (p.closed && k.pending[0].msg.Offset >= p.limit) {
		return false
	}
	k.ready = true
	p.ready = append(p.ready, k)
	return true
}

// canStart reports whether a record may start now. Called with mu held.
func (p *partition) canStart() bool {
	return !p.stopped && len(p.ready) > 0 && p.running < p.c.cfg.MaxInFlightPerPartition
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
		select {
		case p.c.sem <- struct{}{}:
		case <-p.turns.Done():
			return
		}
		r := p.start()
		if r == nil { // stopped meanwhile
			<-p.c.sem
			return
		}
		p.c.work <- r // never blocks: a slot is held for it, and there are as many workers
	}
}

// waitStartable waits until a record may start; false when none ever will: the partition
// stopped, or it is closed with no turn running (which could make a gap record ready) and
// no gap record ready.
func (p *partition) waitStartable() bool {
	for {
		p.mu.Lock()
		ok := p.canStart()
		done := p.stopped || (p.closed && p.running == 0 && len(p.ready) == 0)
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

// start takes the first ready key's next record: queued -> running. It returns nil when the
// partition closed.
func (p *partition) start() *record {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.canStart() {
		return nil
	}
	k := p.ready[0]
	p.ready[0] = nil
	p.ready = p.ready[1:]
	k.ready, k.busy = false, true
	r := k.pending[0]
	r.state = recRunning
	p.running++
	return r
}

// serve runs r's turn and hands off its outcome, then frees the member's slot.
func (p *partition) serve(r *record) {
	defer func() { <-p.c.sem }()
	ob, ok := p.process(r)
	ob = p.unpublished(ob) // a replay's empty topics
	if ok && !p.notified(ob) {
		ok = false // the partition closed before the Handler took the dead-letter notice
	}
	if !ok {
		p.endAbandoned()
		return
	}
	p.handoff(r, ob)
}

// endAbandoned ends a turn that was abandoned (revoke, shutdown): its record stays running, so the
// watermark stays below it and the next owner reads it again.
func (p *partition) endAbandoned() {
	p.mu.Lock()
	p.turnEnded()
	p.mu.Unlock()
	wake(p.wakeDrain)
}

// handoff hands r's outcome to the producer (running -> sending), or, with nothing to
// publish, completes it (running -> done). Only then may the key's next record start. After
// abandon it does nothing: a late turn on a released partition is neither published nor
// committed.
func (p *partition) handoff(r *record, ob *outbound) {
	p.out.RLock()
	defer p.out.RUnlock()
	if p.abandoned { // written under out's write lock, which the read lock excludes
		p.c.stats.lateDropped.Add(1)
		p.log.Warn("turn finished after its partition was released; not published, not committed",
			"offset", r.msg.Offset)
		p.endAbandoned()
		return
	}
	if ob == nil && p.c.txn != nil { // its offset commits with a transaction
		ob = &outbound{p: p, r: r, kind: outNothing}
	}
	if ob == nil {
		p.mu.Lock()
		p.turnEnded()
		p.finishKey(r)
		p.complete(r)
		p.mu.Unlock()
		wake(p.wakeDrain)
		return
	}
	p.mu.Lock()
	r.state = recSending
	p.sending++
	p.mu.Unlock()
	sent := true
	if p.c.txn != nil {
		p.c.txn.stage(r, ob) // the record stays sending until its transaction commits
	} else {
		sent = p.c.out.send(ob)
	}
	p.mu.Lock()
	p.turnEnded()
	if sent {
		p.finishKey(r)
	} else { // the producer is closing: leave the record to the next owner
		r.state = recRunning
		p.sending--
	}
	p.mu.Unlock()
	wake(p.wakeDrain)
}

// resend hands a retried or replacement outcome to the producer; the record stays sending.
// After abandon the record is left sending: the next owner redoes it.
func (p *partition) resend(ob *outbound) {
	p.out.RLock()
	defer p.out.RUnlock()
	if p.abandoned || !p.c.out.send(ob) {
		p.mu.Lock()
		p.sending--
		p.mu.Unlock()
		wake(p.wakeDrain)
	}
}

// turnEnded counts a turn out of running and wakes the dispatcher, which may be waiting for
// room under MaxInFlightPerPartition. Called with mu held.
func (p *partition) turnEnded() {
	p.running--
	wake(p.wakeStart)
}

// finishKey ends r's turn for its key and lets the key's next record start. Called with mu held.
func (p *partition) finishKey(r *record) {
	k := r.key
	k.pending[0] = nil
	k.pending = k.pending[1:]
	k.busy = false
	if len(k.pending) == 0 {
		delete(p.keys, k.name)
		return
	}
	if p.makeReady(k) {
		wake(p.wakeStart)
	}
}

// acked records the acknowledgement of r's outcome: sending -> done.
func (p *partition) acked(r *record) {
	p.mu.Lock()
	p.sending--
	p.complete(r)
	p.mu.Unlock()
	wake(p.wakeDrain)
}

// complete marks r done and advances the watermark over the done records at the head of the
// window, marking the new watermark for commit (the offset of the lowest record not done, or
// the last done one plus one: Kafka's committed offset is the next to read). A window that
// drops to half of MaxBuffered ends a backpressure pause. Called with mu held.
func (p *partition) complete(r *record) {
	r.state = recDone
	p.c.stats.records.Add(1)
	n := 0
	for n < len(p.window) && p.window[n].state == recDone {
		p.lastDone = p.window[n].msg.Offset
		p.window[n] = nil
		n++
	}
	if n == 0 {
		return
	}
	p.window = p.window[n:]
	if !p.abandoned && p.c.txn == nil { // transactional: the offset was committed with the outcome
		p.sess.MarkOffset(p.t.topic, p.t.partition, p.lastDone+1, "")
	}
	if p.full && len(p.window) <= p.c.cfg.MaxBuffered/2 && !p.closed {
		p.setFull(false)
	}
}

// close is the revoke: no record is added any more, and of the queued ones only the gap
// records start: those below the highest record already started. A record above the
// watermark that is done is committed only once every record below it is, so running the
// gaps (within the grace) lets the commit cover the work already done instead of leaving it
// to be redone, and its result republished, by the next owner. Queued records above every
// started one are left to the next owner. Backoff sleeps and rate-limit waits of running
// turns end at once (they are abandoned); running handlers keep their grace.
func (p *partition) close() {
	p.mu.Lock()
	p.closed = true
	p.limit = -1
	for _, r := range p.window {
		if r.state != recQueued {
			p.limit = max(p.limit, r.msg.Offset)
		}
	}
	ready := p.ready[:0]
	for _, k := range p.ready {
		if k.pending[0].msg.Offset < p.limit {
			ready = append(ready, k)
		} else {
			k.ready = false
		}
	}
	clear(p.ready[len(ready):])
	p.ready = ready
	if p.full {
		// sarama keeps a pause across a revoke and would apply it to the partition's next claim.
		p.setFull(false)
	}
	p.mu.Unlock()
	p.cancelWaits()
	wake(p.wakeStart)
}

// stop ends the starting of records, gap records included: the grace is over.
func (p *partition) stop() {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	wake(p.wakeStart)
}

// drain waits until the dispatcher has returned, no turn runs and every handed-off outcome is
// acknowledged, or until done ends; it reports whether the partition drained.
func (p *partition) drain(done <-chan time.Time) bool {
	for {
		p.mu.Lock()
		idle := p.idle && p.running == 0 && p.sending == 0
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
// in progress (a channel send to the producer) to finish.
func (p *partition) abandon() {
	p.out.Lock()
	if t := p.c.txn; t != nil { // a commit in progress ends first (txn.go)
		t.mu.Lock()
		defer t.mu.Unlock()
	}
	p.mu.Lock()
	p.abandoned = true
	p.mu.Unlock()
	p.out.Unlock()
	p.cancelTurns()
}

// buffered returns the records in the window and the turns running and sending.
func (p *partition) buffered() (window, running, sending int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.window), p.running, p.sending
}
