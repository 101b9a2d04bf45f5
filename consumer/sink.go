package consumer

import (
	"context"
	"fmt"

	"github.com/IBM/sarama"
)

// sink is a commit mode: what becomes of a turn's outcome once the turn hands it off, and how
// the offsets of finished records commit. The engine (partition, output, Run) calls a sink and
// never asks which mode runs. Two ship: marks (the default: the async idempotent producer,
// offsets marked on acknowledgement and committed every Config.CommitInterval) and txn (the
// transactional mode, txn.go: outcomes and offsets in one Kafka transaction).
type sink interface {
	// deliver takes r's outcome once its turn ended: ob is the result or dead letter to
	// publish, or nil when the turn publishes nothing. It moves r on through the partition
	// (completeNow or send) and returns once the key's next record may start: true, or false
	// when r was left to the partition's next owner (the producer is closing). Called under
	// r.p.out's read lock, never after the partition was abandoned.
	deliver(r *record, ob *outbound) bool
	// acked takes the producer's acknowledgement of ob (err nil) or its failure after sarama's
	// own retries. Called by the output's ack loop, one at a time.
	acked(ob *outbound, err error)
	// advanced says that p's watermark moved (records left the head of its window). Called
	// with p.mu held, not after p was abandoned.
	advanced(p *partition)
	// filled says that a partition's window reached Config.MaxBuffered. Called with that
	// partition's mu held.
	filled()
	// exclusive runs f while no commit of the sink is in progress (abandon: once f has run,
	// nothing of the partition commits).
	exclusive(f func())
	// close ends the sink once every claim has returned, before the producer closes.
	close()
	// err is why the sink failed for good (ErrFenced), nil otherwise; Run returns it.
	err() error
}

// marks is the default commit mode: an outcome goes to the async idempotent producer; on its
// acknowledgement (acks=all: durable) the record is done, and the partition's watermark is
// marked on the group session, which sarama commits every Config.CommitInterval and on
// revoke. A publish that fails is retried or, when the topic refuses it for good, replaced
// (publish.go: failed).
type marks struct{ out *output }

func (m marks) deliver(r *record, ob *outbound) bool {
	if ob == nil {
		return r.p.completeNow(r)
	}
	return r.p.send(r, ob, m.out.send)
}

func (marks) acked(ob *outbound, err error) {
	if err != nil {
		ob.p.failed(ob, err)
		return
	}
	ob.p.delivered(ob)
}

// advanced marks the watermark; MarkOffset only records it in the session's memory.
func (marks) advanced(p *partition) {
	if offset, ok := p.watermark(nil); ok {
		p.sess.MarkOffset(p.t.topic, p.t.partition, offset, "")
	}
}

func (marks) filled()            {}
func (marks) exclusive(f func()) { f() }
func (marks) close()             {}
func (marks) err() error         { return nil }

// startSink starts the producer and the commit mode's sink: marks by default, txn with
// Config.Transactional, whose failure ends the returned context. The output's ack loop routes
// to the sink. closeSink ends the sink, then closes the producer after what it holds is sent
// or failed.
func (c *Consumer) startSink(ctx context.Context) (_ context.Context, closeSink func(), _ error) {
	pc := c.cfg.producerConfig(newPartitioner)
	if c.cfg.Transactional != nil {
		pc = c.cfg.txnProducerConfig()
	}
	producer, err := connect(ctx, func() (sarama.AsyncProducer, error) {
		return sarama.NewAsyncProducer(c.cfg.Brokers, pc)
	})
	if err != nil {
		return ctx, nil, fmt.Errorf("consumer: start producer: %w", err)
	}
	c.out = newOutput(producer, c.log)
	cancel := context.CancelCauseFunc(func(error) {})
	if c.cfg.Transactional != nil {
		ctx, cancel = context.WithCancelCause(ctx)
		c.sink = newTxn(ctx, c, producer, cancel)
	} else {
		c.sink = marks{out: c.out}
	}
	go c.out.acks(c.sink)
	return ctx, func() {
		c.sink.close()
		cancel(nil)
		c.out.close()
	}, nil
}
