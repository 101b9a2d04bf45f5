package consumer

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/IBM/sarama"
	"github.com/cenkalti/backoff/v5"
	"go.opentelemetry.io/otel/trace"

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
	select {
	case o.producer.Input() <- ob.pm:
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

// replacement returns what to publish instead of a refused outbound, or nil when nothing can.
func (ob *outbound) replacement(err error) *outbound {
	p, r := ob.p, ob.r
	switch ob.kind {
	case outResult:
		size := ob.pm.Value.Length()
		return p.deadLetter(r, ob.req, fmt.Sprintf("the result (%d bytes) was refused by the results topic", size), err, ob.attempts, turn.KindPermanent)
	case outDeadLetter:
		p.log.Error("dead letter refused; publishing it without its value", "offset", r.msg.Offset, "err", err, "bytes", len(r.msg.Value))
		next := &outbound{p: p, r: r, kind: outBareDeadLetter, req: ob.req, reason: ob.reason,
			attempts: ob.attempts, partitions: ob.partitions}
		next.pm = &sarama.ProducerMessage{
			Topic: ob.pm.Topic, Key: ob.pm.Key, Metadata: next,
			Headers: append(ob.pm.Headers[:len(ob.pm.Headers):len(ob.pm.Headers)],
				header(HeaderValueDropped, fmt.Sprintf("%d bytes; refused: %s", len(r.msg.Value), clip(err.Error())))),
		}
		return next
	case outBareDeadLetter:
		// The key or the producer's headers are too large: keep only turnstile's headers.
		ours, n, size := splitOurs(ob.pm.Headers)
		p.log.Error("dead letter refused without its value; publishing it without the producer's headers",
			"offset", r.msg.Offset, "err", err, "headers", n, "header_bytes", size)
		return ob.stripped(outHeaderlessDeadLetter, ob.pm.Key,
			append(ours, header(HeaderHeadersDropped, fmt.Sprintf("%d headers, %d bytes", n, size))))
	case outHeaderlessDeadLetter:
		keyBytes := 0
		if ob.pm.Key != nil {
			keyBytes = ob.pm.Key.Length()
		}
		p.log.Error("dead letter refused without its value and headers; publishing it without its key",
			"offset", r.msg.Offset, "err", err, "key_bytes", keyBytes)
		return ob.stripped(outKeylessDeadLetter, nil,
			append(ob.pm.Headers[:len(ob.pm.Headers):len(ob.pm.Headers)], header(HeaderKeyDropped, fmt.Sprintf("%d bytes", keyBytes))))
	}
	return nil
}

// stripped returns a dead letter like ob with the given kind, key and headers and no value.
func (ob *outbound) stripped(kind outKind, key sarama.Encoder, headers []sarama.RecordHeader) *outbound {
	next := &outbound{p: ob.p, r: ob.r, kind: kind, req: ob.req, reason: ob.reason,
		attempts: ob.attempts, partitions: ob.partitions}
	next.pm = &sarama.ProducerMessage{Topic: ob.pm.Topic, Key: key, Headers: headers, Metadata: next}
	return next
}

// splitOurs returns the headers among hs that turnstile sets, in order, and the number and
// size (names and values, in bytes) of the others.
func splitOurs(hs []sarama.RecordHeader) (ours []sarama.RecordHeader, n, size int) {
	for _, h := range hs {
		if DeadLetterHeader(string(h.Key)) {
			ours = append(ours, h)
		} else {
			n, size = n+1, size+len(h.Key)+len(h.Value)
		}
	}
	return ours, n, size
}

// DeadLetterHeader reports a header name that turnstile sets on dead letters (the Header*
// constants but HeaderAttempt, which only results carry): the one list that the consumer
// (which never copies a producer's header of such a name onto a dead letter), the Temporal
// publisher and package deadletter (which parses them) share.
func DeadLetterHeader(name string) bool {
	switch name {
	case HeaderReason, HeaderError, HeaderAttempts, HeaderSourceTopic, HeaderSourcePartition, HeaderSourceOffset,
		HeaderRequestID, HeaderConversationID, HeaderValueDropped, HeaderHeadersDropped, HeaderKeyDropped, HeaderKind:
		return true
	}
	return false
}

// refused reports a publish error that retrying cannot fix: sarama's own check of
// Producer.MaxMessageBytes (a ConfigurationError), or the broker's MESSAGE_TOO_LARGE,
// RECORD_LIST_TOO_LARGE (ErrMessageSetSizeTooLarge) or INVALID_RECORD.
func refused(err error) bool {
	var cfgErr sarama.ConfigurationError
	return errors.As(err, &cfgErr) || errors.Is(err, sarama.ErrMessageSizeTooLarge) ||
		errors.Is(err, sarama.ErrMessageSetSizeTooLarge) || errors.Is(err, sarama.ErrInvalidRecord)
}

// reqAttrs is the request's ids for a log line, empty when the record did not decode.
func reqAttrs(req *turn.Request) slog.Attr {
	if req == nil {
		return slog.Attr{}
	}
	return slog.Group("", "request_id", req.ID, "conversation_id", req.ConversationID)
}
