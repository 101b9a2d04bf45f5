// Package window is the state of one claimed partition between fetch and commit: its records
// by offset, their per-key queues, the state of each record, and the watermark, the offset
// the partition may commit. It knows nothing of Kafka: the consumer feeds it offsets and keys
// and acts on the events it returns (wake the dispatcher, pause or resume the partition, mark
// the watermark).
//
// A Window is not safe for concurrent use: its owner (the consumer's partition) holds one
// mutex around every call, which keeps each transition atomic with the owner's own flags.
//
// A record moves only forward, and each move is one method:
//
//	Queued --Start--> Running --BeginSend--> Sending --Acked--> Done
//	                  Running --Complete-----------------------> Done (nothing to publish)
//
// and three moves give work back without finishing it: Abandoned (a turn that returned with
// no outcome: the record stays Running and holds the watermark for the partition's next
// owner), Unsent (a handed-off outcome that will never be acknowledged: the record stays
// Sending) and SendFailed (the handoff itself failed: back to Running). A key's next record
// may start once the one before it has been handed off (Sent) or completed, so a key's
// outcomes reach the producer in offset order. TakeQueued adds a key's queued records to the
// turn Start began, for a handler that takes several records of one key in one call.
package window

import "fmt"

// State is where a record is on its way to a committable offset.
type State uint8

// The states of a record, in the only order a record goes through them.
const (
	// Queued: waiting for its key's earlier records to be handed off.
	Queued State = iota
	// Running: its turn runs (attempts, backoffs, rate-limit waits), or was given up and
	// waits for the partition's next owner.
	Running
	// Sending: its outcome is with the producer (or staged in a transaction), not yet
	// acknowledged.
	Sending
	// Done: its outcome is durable; committable once every lower record is done.
	Done
	numStates
)

var stateNames = [numStates]string{"queued", "running", "sending", "done"}

// String returns the state's name in lower case ("queued", "running", "sending", "done").
func (s State) String() string {
	if s < numStates {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// States returns every State in order, for tests that walk them.
func States() []State { return []State{Queued, Running, Sending, Done} }

// Record is one record in a window. The owner sets Offset and Value before Push (so that it
// can allocate a Record inside its own record) and reads them; the rest is the window's.
type Record[T any] struct {
	// Offset is the record's offset in its partition (Kafka's offsets only grow).
	Offset int64
	// Value is the owner's data for the record.
	Value T

	key    *queue[T]
	state  State
	staged bool // Stage: its outcome waits until every lower record's is staged too
	sent   bool // Stage: its staged outcome was released, in offset order
}

// State returns the record's state.
func (r *Record[T]) State() State { return r.state }

// Key returns the ordering key the record was pushed with.
func (r *Record[T]) Key() string { return r.key.name }

// queue holds the records of one key that have not been handed off, in offset order. Its
// first inTurn records are running (one, or a batch taken by TakeQueued); the key's next record
// may start once none is.
type queue[T any] struct {
	name    string
	pending []*Record[T]
	inTurn  int  // pending[:inTurn] are running
	ready   bool // in the window's ready list
}

// Event tells the owner what a transition changed that it must act on. Several may be set.
type Event uint8

const (
	// Ready: a key's next record may start; wake the dispatcher.
	Ready Event = 1 << iota
	// Filled: the window reached Limits.MaxBuffered records; pause fetching.
	Filled
	// Freed: a filled window fell to half of Limits.MaxBuffered, or was closed; resume.
	Freed
	// Advanced: records left the head of the window, so the watermark moved; mark it.
	Advanced
)

// Has reports whether every event of f is in e.
func (e Event) Has(f Event) bool { return e&f == f }

// Limits bound a window.
type Limits struct {
	// MaxBuffered is the number of records at which the window reports Filled; at or below
	// half of it, a filled window reports Freed. Push never refuses a record: records that
	// arrive from fetches already made are held.
	MaxBuffered int
	// MaxInFlight is the most records Running at once (turns whose goroutine has not
	// returned).
	MaxInFlight int
}

// Window is one partition's records between fetch and commit. The zero value is not usable:
// call New.
type Window[T any] struct {
	limits   Limits
	records  []*Record[T]         // pushed and not yet below the watermark, by offset
	keys     map[string]*queue[T] // keys with records not yet handed off
	ready    []*queue[T]          // keys whose next record may start, first come first served
	running  int                  // records whose turn has not returned
	sending  int                  // records Sending whose acknowledgement may still come
	closed   bool                 // revoked: nothing is pushed, only gap records start
	limit    int64                // once closed: records below it may still start
	stopped  bool                 // nothing starts any more
	full     bool                 // Filled reported, Freed not yet
	lastDone int64                // offset of the last record that left the head, -1 before
}

// New returns an empty window.
func New[T any](limits Limits) *Window[T] {
	return &Window[T]{limits: limits, keys: make(map[string]*queue[T]), lastDone: -1}
}

// Push adds r (its Offset above every record pushed before, its Value set) to the end of the
// window and to key's queue, as Queued; key is read, not kept (a lookup by bytes makes no
// string, so only a key's first record costs one). It returns Ready when r may start at once and Filled
// when the window just reached MaxBuffered. After Close it adds nothing and returns false.
func (w *Window[T]) Push(r *Record[T], key []byte) (Event, bool) {
	if w.closed {
		return 0, false
	}
	q := w.keys[string(key)]
	if q == nil {
		q = &queue[T]{name: string(key)}
		w.keys[q.name] = q
	}
	r.key, r.state = q, Queued
	w.records = append(w.records, r)
	q.pending = append(q.pending, r)
	var ev Event
	if w.makeReady(q) {
		ev |= Ready
	}
	if len(w.records) >= w.limits.MaxBuffered && !w.full {
		w.full = true
		ev |= Filled
	}
	return ev, true
}

// makeReady puts q on the ready list if its next record may start.
func (w *Window[T]) makeReady(q *queue[T]) bool {
	if q.inTurn > 0 || q.ready || len(q.pending) == 0 || (w.closed && q.pending[0].Offset >= w.limit) {
		return false
	}
	q.ready = true
	w.ready = append(w.ready, q)
	return true
}

// CanStart reports whether Start would return a record now: not stopped, a key ready, and
// fewer than MaxInFlight records running.
func (w *Window[T]) CanStart() bool {
	return !w.stopped && len(w.ready) > 0 && w.running < w.limits.MaxInFlight
}

// Exhausted reports whether no record will ever start again: the window stopped, or it is
// closed with no turn running (whose handoff could make a gap record ready) and none ready.
func (w *Window[T]) Exhausted() bool {
	return w.stopped || (w.closed && w.running == 0 && len(w.ready) == 0)
}

// Start takes the first ready key's next record, Queued -> Running, or returns nil when
// CanStart is false.
func (w *Window[T]) Start() *Record[T] {
	if !w.CanStart() {
		return nil
	}
	q := w.ready[0]
	w.ready[0] = nil
	w.ready = w.ready[1:]
	q.ready, q.inTurn = false, 1
	r := q.pending[0]
	r.state = Running
	w.running++
	return r
}

// TakeQueued takes up to n more records of the key of r, which Start just returned, for the
// same turn (a batch handed over in one call): the key's queued records that follow r, in
// offset order, up to the first that may not start (after Close, one above the gap records'
// limit). They become Running and count as running; each then ends as a record of its own
// (Sent, Complete, SendFailed, Abandoned), in offset order, and the key's next record may
// start once all of them have been handed off.
func (w *Window[T]) TakeQueued(r *Record[T], n int) []*Record[T] {
	q := r.key
	var out []*Record[T]
	for len(out) < n && q.inTurn < len(q.pending) {
		x := q.pending[q.inTurn]
		if x.state != Queued || (w.closed && x.Offset >= w.limit) {
			break
		}
		x.state = Running
		q.inTurn++
		w.running++
		out = append(out, x)
	}
	return out
}

// Abandoned ends a Running record's turn without an outcome (revoke, shutdown, a late turn): the record stays
// Running, below the watermark, and its key stays in its turn, so the partition's next owner reads
// it and its key's later records again.
func (w *Window[T]) Abandoned() { w.running-- }

// BeginSend moves r, Running, to Sending before its outcome goes to the producer (or is
// staged), so that an acknowledgement arriving before Sent finds it Sending. Its turn counts
// as running until Sent or SendFailed.
func (w *Window[T]) BeginSend(r *Record[T]) {
	r.state = Sending
	w.sending++
}

// Sent ends the turn of r, whose outcome the producer took: its key's next record may start
// (Ready).
func (w *Window[T]) Sent(r *Record[T]) Event {
	w.running--
	return w.finishKey(r)
}

// SendFailed undoes BeginSend when the producer would not take the outcome (it is closing):
// r is Running again, left with its key to the partition's next owner.
func (w *Window[T]) SendFailed(r *Record[T]) {
	w.running--
	r.state = Running
	w.sending--
}

// Complete moves r, Running with nothing to publish, to Done: its turn ends, its key's next
// record may start, and the watermark may advance.
func (w *Window[T]) Complete(r *Record[T]) Event {
	w.running--
	return w.finishKey(r) | w.done(r)
}

// Acked moves r, Sending, to Done: its outcome is durable.
func (w *Window[T]) Acked(r *Record[T]) Event {
	w.sending--
	return w.done(r)
}

// Unsent gives up on the acknowledgement of a Sending record (its partition closed, or the
// publish was abandoned): it stays Sending, below the watermark, for the next owner.
func (w *Window[T]) Unsent() { w.sending-- }

// finishKey takes r, the first of its key's running records, off its key's queue and, once
// none of the key's records runs, makes the key's next record ready.
func (w *Window[T]) finishKey(r *Record[T]) Event {
	q := r.key
	q.pending[0] = nil
	q.pending = q.pending[1:]
	q.inTurn--
	if q.inTurn > 0 {
		return 0
	}
	if len(q.pending) == 0 {
		delete(w.keys, q.name)
		return 0
	}
	if w.makeReady(q) {
		return Ready
	}
	return 0
}

// done marks r Done and drops the Done records at the head of the window: Advanced when any
// left, Freed when a filled window fell to half of MaxBuffered.
func (w *Window[T]) done(r *Record[T]) Event {
	r.state = Done
	n := 0
	for n < len(w.records) && w.records[n].state == Done {
		w.lastDone = w.records[n].Offset
		w.records[n] = nil
		n++
	}
	if n == 0 {
		return 0
	}
	w.records = w.records[n:]
	ev := Advanced
	if w.full && len(w.records) <= w.limits.MaxBuffered/2 && !w.closed {
		w.full = false
		ev |= Freed
	}
	return ev
}

// Watermark returns the offset the partition may commit (Kafka's committed offset is the next
// offset to read): one past the last record of the unbroken run, from the head, of records
// that are Done or for which in returns true (a transaction's staged outcomes, which commit
// with their offsets; nil counts only Done records). A head that is neither keeps the offset
// where it is: one past the last record that left the window, or, before any did, the head's
// own offset. ok is false when the window has never held a record: there is nothing to commit,
// and offset 0 would rewind the group.
func (w *Window[T]) Watermark(in func(*Record[T]) bool) (offset int64, ok bool) {
	switch {
	case w.lastDone >= 0:
		offset = w.lastDone + 1
	case len(w.records) > 0:
		offset = w.records[0].Offset
	default:
		return 0, false
	}
	for _, r := range w.records {
		if r.state != Done && (in == nil || !in(r)) {
			break
		}
		offset = r.Offset + 1
	}
	return offset, true
}

// Stage is the transactional mode's order: r (Sending) has its outcome ready, and the outcomes
// to send now are those of the records from the head of the window up to the first one without
// a staged outcome, skipping Done ones and ones already released. Stage marks them released
// and returns them in offset order, so that a transaction never holds an outcome above an
// offset it cannot commit.
func (w *Window[T]) Stage(r *Record[T]) []*Record[T] {
	r.staged = true
	var out []*Record[T]
	for _, x := range w.records {
		if x.state == Done || x.sent {
			continue
		}
		if !x.staged {
			break
		}
		x.staged, x.sent = false, true
		out = append(out, x)
	}
	return out
}

// Close is the revoke: nothing is pushed any more, and of the queued records only the gap
// records may start, those below the highest record already started, so that a commit can
// cover the work done above them instead of leaving it to be redone by the next owner. Keys
// whose next record is above every started one leave the ready list. A filled window
// reports Freed (a pause must not outlive the claim).
func (w *Window[T]) Close() Event {
	w.closed = true
	w.limit = -1
	for _, r := range w.records {
		if r.state != Queued {
			w.limit = max(w.limit, r.Offset)
		}
	}
	ready := w.ready[:0]
	for _, q := range w.ready {
		if q.pending[0].Offset < w.limit {
			ready = append(ready, q)
		} else {
			q.ready = false
		}
	}
	clear(w.ready[len(ready):])
	w.ready = ready
	if w.full {
		w.full = false
		return Freed
	}
	return 0
}

// Closed reports whether Close was called.
func (w *Window[T]) Closed() bool { return w.closed }

// Stop ends the starting of records, gap records included.
func (w *Window[T]) Stop() { w.stopped = true }

// Len returns the number of records in the window (not yet below the watermark).
func (w *Window[T]) Len() int { return len(w.records) }

// Running returns the number of records whose turn has not returned.
func (w *Window[T]) Running() int { return w.running }

// Sending returns the number of Sending records whose acknowledgement may still come.
func (w *Window[T]) Sending() int { return w.sending }

// Idle reports whether no turn runs and no acknowledgement is awaited.
func (w *Window[T]) Idle() bool { return w.running == 0 && w.sending == 0 }

// LastDone returns the offset of the last record that left the head of the window Done, -1
// before any.
func (w *Window[T]) LastDone() int64 { return w.lastDone }
