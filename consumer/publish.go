package consumer

import (
	"fmt"
	"log/slog"
	"sync"

	"github.com/IBM/sarama"
	"github.com/cenkalti/backoff/v5"
	"go.opentelemetry.io/otel/trace"

	rec "github.com/turnstile-go/turnstile/internal/record"
	"github.com/turnstile-go/turnstile/turn"
)

// outKind is what an outbound record is.
type outKind uint8

const (
	outResult               outKind = iota // a result on Config.ResultsTopic
	outDeadLetter                          // a dead letter carrying the request record as it came
	outBareDeadLetter                      // a dead letter without the record's value (it was refused)
	outHeaderlessDeadLetter                // nor the producer's headers (refused too)
	outKeylessDeadLetter                   // nor the record's key: turnstile's headers only
	outNothing                             // transactional mode: no record, the offset only (txn.go)
)

// outbound is a result or dead letter on its way to the broker. It rides in
// ProducerMessage.Metadata, so the acknowledgement finds its record, and the partitioner
// finds the request's placement.
type outbound struct {
	p    *partition
	r    *record
	pm   *sarama.ProducerMessage
	kind outKind

	// msg, key and value hold the first send's record (pm points to msg, whose Key and Value
	// point to key and value), so that an outcome takes one allocation, not four.
	msg        sarama.ProducerMessage
	key, value sarama.ByteEncoder

	req        *turn.Request // nil when the record did not decode
	reason     string        // dead letters
	attempts   int
	replayed   bool  // a result answered from the inbox
	partitions int32 // the requests topic's partition count when the outcome was built

	bo *backoff.ExponentialBackOff // failed publishes, made on the first failure

	span trace.Span // the send span when tracing is on (telemetry.go)
}

// output is the member's async idempotent producer (results and dead letters) and the loop
// that reads its acknowledgements. The producer keeps the order of records sent to one
// partition (Idempotent, Net.MaxOpenRequests=1), so a key's results land in turn order.
type output struct {
	producer sarama.AsyncProducer
	log      *slog.Logger

	closing chan struct{} // closed first, so a send blocked on a full input gives up
	mu      sync.RWMutex  // send (read) against close (write): Input is closed by AsyncClose
	closed  bool
	done    chan struct{} // the ack loop ended
}

func newOutput(producer sarama.AsyncProducer, log *slog.Logger) *output {
	return &output{producer: producer, log: log, closing: make(chan struct{}), done: make(chan struct{})}
}

// send hands ob to the producer; false when the producer is closing.
func (o *output) send(ob *outbound) bool {
	o.mu.RLock()
	defer o.mu.RUnlock()
	if o.closed {
		return false
	}
	in := o.producer.Input()
	select { // the common case, the producer waiting for input: one channel, no select to park in
	case in <- ob.pm:
		return true
	default:
	}
	select {
	case in <- ob.pm:
		return true
	case <-o.closing:
		return false
	}
}

// close stops the producer after what it holds is sent or failed, and waits for the ack loop.
// Called by Run once every claim has returned.
func (o *output) close() {
	close(o.closing)
	o.mu.Lock()
	o.closed = true
	o.mu.Unlock()
	o.producer.AsyncClose()
	<-o.done
}

// acks routes each acknowledgement or failure to the sink until the producer's channels
// close.
func (o *output) acks(s sink) {
	defer close(o.done)
	succ, errs := o.producer.Successes(), o.producer.Errors()
	for succ != nil || errs != nil {
		select {
		case m, ok := <-succ:
			if !ok {
				succ = nil
				continue
			}
			if ob, ok := m.Metadata.(*outbound); ok {
				s.acked(ob, nil)
			}
		case e, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			if ob, ok := e.Msg.Metadata.(*outbound); ok {
				s.acked(ob, e.Err)
			}
		}
	}
}

// delivered counts an acknowledged outcome (acks=all: durable) and completes its record.
func (p *partition) delivered(ob *outbound) {
	ob.endPublish(nil)
	if m := p.c.meters; m != nil {
		m.outcome(ob)
	}
	switch ob.kind {
	case outResult:
		p.c.stats.results.Add(1)
		if ob.replayed {
			p.c.stats.replayed.Add(1)
		}
	default:
		p.c.stats.deadLetters.Add(1)
		p.log.Error("record dead-lettered", "offset", ob.r.msg.Offset, "reason", ob.reason,
			"attempts", ob.attempts, reqAttrs(ob.req))
	}
	p.acked(ob.r)
}

// failed handles a publish that sarama gave up on after its own retries. A record the topic
// refuses for good (too large) is replaced: a result by a dead letter saying so, a dead letter
// by one without the record's value, then without the producer's headers, then without the
// key, whichever part is too large (G2: every refused record still gets a dead letter, which
// locates the original by its source headers). Anything else is sent again after a backoff, until the
// partition closes (the next owner then redoes the record). It runs on the ack loop, so what
// can block (a send, a sleep) runs in a goroutine of its own.
func (p *partition) failed(ob *outbound, err error) {
	if refused(err) {
		ob.endPublish(err)
		next := ob.replacement(err)
		if next == nil {
			// Not even turnstile's own headers fit (a dead-letter topic whose limit is a few
			// KiB): say so as loudly as we can, and move on.
			p.c.stats.skipped.Add(1)
			p.log.Error("dead letter refused even without the record's value, headers and key; record skipped",
				"offset", ob.r.msg.Offset, "err", err, reqAttrs(ob.req))
			p.acked(ob.r)
			return
		}
		go p.resend(next)
		return
	}
	if ob.bo == nil {
		ob.bo = newBackoff(p.c.cfg.RetryBackoff, p.c.cfg.MaxRetryBackoff)
	}
	d := ob.bo.NextBackOff()
	p.log.Warn("publish failed; retrying", "offset", ob.r.msg.Offset, "to", ob.pm.Topic, "err", err, "in", d.String())
	go func() {
		if !sleep(p.waits, d) {
			p.unsent()
			return
		}
		p.resend(ob)
	}()
}

// replacement returns what to publish instead of a refused outbound, or nil when nothing can:
// a result is replaced by a dead letter saying so, a dead letter by a smaller one
// (record.Shrink: without its value, then the producer's headers, then its key).
func (ob *outbound) replacement(err error) *outbound {
	p, r := ob.p, ob.r
	switch ob.kind {
	case outResult:
		size := ob.pm.Value.Length()
		return p.deadLetter(r, ob.req, fmt.Sprintf("the result (%d bytes) was refused by the results topic", size), err, ob.attempts, turn.KindPermanent)
	case outDeadLetter, outBareDeadLetter, outHeaderlessDeadLetter:
		pm, part := rec.Shrink(ob.pm, err)
		if pm == nil {
			return nil
		}
		note := pm.Headers[len(pm.Headers)-1]
		p.log.Error("dead letter refused; publishing it without its "+part.String(), "offset", r.msg.Offset, "err", err,
			string(note.Key), string(note.Value))
		next := &outbound{p: p, r: r, kind: shrunk[part], pm: pm, req: ob.req, reason: ob.reason,
			attempts: ob.attempts, partitions: ob.partitions}
		pm.Metadata = next
		return next
	}
	return nil
}

// shrunk is the kind of a dead letter that record.Shrink dropped a part of.
var shrunk = [...]outKind{rec.PartValue: outBareDeadLetter, rec.PartHeaders: outHeaderlessDeadLetter, rec.PartKey: outKeylessDeadLetter}

// DeadLetterHeader reports a header name that turnstile sets on dead letters (the Header*
// constants but HeaderAttempt, which only results carry; record.IsDeadLetterHeader): the
// consumer never copies a producer's header of such a name onto a dead letter, and package
// deadletter parses them.
func DeadLetterHeader(name string) bool { return rec.IsDeadLetterHeader(name) }

// refused reports a publish error that retrying cannot fix (record.Refused: too large).
var refused = rec.Refused

// reqAttrs is the request's ids for a log line, empty when the record did not decode.
func reqAttrs(req *turn.Request) slog.Attr {
	if req == nil {
		return slog.Attr{}
	}
	return slog.Group("", "request_id", req.ID, "conversation_id", req.ConversationID)
}
