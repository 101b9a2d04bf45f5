package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/uuid"

	"github.com/turnstile-go/turnstile/consumer/internal/window"
)

// Defaults of Transactional.
const (
	DefaultTxnInterval   = 100 * time.Millisecond
	DefaultTxnMaxRecords = 5000
)

// ErrFenced is what Run returns (wrapped) when the member's transactional producer is fenced
// (PRODUCER_FENCED or INVALID_PRODUCER_EPOCH: another producer initialised the same
// transactional id, KIP-98) or fails for good (sarama's fatal error state, or a transaction
// that could be neither committed nor aborted). The member committed nothing of its open
// transaction, stopped its claims, closed its producer and left the group; the host restarts
// it (a new Consumer) if it should serve again.
var ErrFenced = errors.New("consumer: transactional producer fenced or failed")

// Transactional configures the transactional mode (Config.Transactional): a member's
// results, dead letters and the offsets of the records they answer commit in one Kafka
// transaction (KIP-98), so a reader with isolation.level=read_committed sees exactly one
// result per request through any crash, and a record's offset is committed only with its
// outcome.
//
// How it runs: one transactional producer per member, with the transactional id
// IDPrefix + "-" + InstanceID. A partition's outcomes are sent inside the open transaction in
// offset order, each once every lower record of the partition has its outcome (turns still
// run concurrently by key; see stage); every Interval, or once MaxRecords outcomes are in it,
// the member adds to the transaction the offset of
// each partition as if every record whose outcome is in it were done (the watermark: the
// lowest record neither done nor in the transaction), with the group's metadata (generation
// and member id: TxnOffsetCommit v3, KIP-447), and commits. Only then are those records done.
// Readers see results at commit: with read_committed, latency grows by about Interval.
//
// Why one id per member is safe (KIP-447): the broker fences a zombie by its group
// generation when it commits offsets through the transaction, so ids need not follow
// partitions (sarama's examples/exactly_once uses one producer per partition for brokers
// before 2.5). A member that dies with a transaction open leaves it to the transaction
// coordinator, which aborts it after Timeout; Timeout is below the group's session timeout,
// so that happens before the group hands the member's partitions on. A member restarted with
// the same InstanceID fences its previous incarnation at once (InitProducerId bumps the
// epoch and aborts the open transaction).
//
// An abortable error (a publish that failed, a commit of offsets the coordinator refused)
// aborts the transaction and sends its outcomes again in a new one: they are encoded already,
// and the turns' outcomes are in the inbox, so nothing calls the model again. A fenced or
// fatally failed producer is final: see ErrFenced.
//
// Outcomes of a partition whose claim was released (abandoned after the grace) or whose group
// session ended (the member was expelled) never commit: a transaction holding them is aborted
// and the others are sent again, since another member may own the partition by then. The
// group's client reads with isolation.level=read_committed, so that sarama fetches a new
// claim's offset with RequireStable (OffsetFetch v7): a new owner waits for a transaction
// still committing that offset rather than serving its records again.
//
// Transactional cannot be combined with Replay. It needs brokers of Kafka 2.5 or later.
type Transactional struct {
	// IDPrefix starts the transactional ids (Kafka's transactional.id) of the service's
	// members. Required.
	IDPrefix string
	// InstanceID ends this member's transactional id. Give each member a stable, unique
	// name (a pod name) so that a restarted member fences its previous incarnation at once;
	// two live members must never share one (the older is fenced: ErrFenced). Default: a
	// random UUID per Consumer, so a dead member's transaction ends by Timeout.
	InstanceID string
	// Interval is the longest a transaction with outcomes in it stays open. Default
	// DefaultTxnInterval.
	Interval time.Duration
	// MaxRecords commits a transaction once it holds this many outcomes; a partition whose
	// window fills (Config.MaxBuffered) also commits the transaction at once, since its records
	// are done only at commit. Default DefaultTxnMaxRecords.
	MaxRecords int
	// Timeout is the transaction timeout (Kafka's transaction.timeout.ms): the coordinator
	// aborts a transaction open longer and bumps the producer's epoch, which fences the member
	// (ErrFenced), so it must leave room for a commit on a slow broker. It must be below the group's session timeout
	// (Sarama.Consumer.Group.Session.Timeout) and above Interval. Default half the session
	// timeout.
	Timeout time.Duration
}

func (t *Transactional) setDefaults() {
	if t.InstanceID == "" {
		t.InstanceID = uuid.NewString()
	}
	if t.Interval == 0 {
		t.Interval = DefaultTxnInterval
	}
	if t.MaxRecords == 0 {
		t.MaxRecords = DefaultTxnMaxRecords
	}
}

// timeout is Timeout or its default.
func (t *Transactional) timeout(c *Config) time.Duration {
	if t.Timeout != 0 {
		return t.Timeout
	}
	return c.base().Consumer.Group.Session.Timeout / 2
}

func (t *Transactional) validate(c *Config) []error {
	var errs []error
	if t.IDPrefix == "" {
		errs = append(errs, errors.New("Transactional.IDPrefix: empty"))
	}
	if c.Replay != nil {
		errs = append(errs, errors.New("Transactional: cannot be combined with Replay"))
	}
	if t.Interval < 0 || t.MaxRecords < 0 || t.Timeout < 0 {
		errs = append(errs, errors.New("Transactional: Interval, MaxRecords and Timeout must not be negative"))
	}
	session, timeout := c.base().Consumer.Group.Session.Timeout, t.timeout(c)
	if timeout >= session {
		errs = append(errs, fmt.Errorf("Transactional.Timeout: %s is not below the group's session timeout (%s)", timeout, session))
	}
	if timeout <= t.Interval {
		errs = append(errs, fmt.Errorf("Transactional.Timeout: %s is not above Interval (%s)", timeout, t.Interval))
	}
	return errs
}

// transactionalID is the member's transactional id.
func (t *Transactional) transactionalID() string { return t.IDPrefix + "-" + t.InstanceID }

// txnRetryBackoff is the transactional producer's retry backoff when the user left sarama's.
const txnRetryBackoff = 10 * time.Millisecond

// txnProducerConfig returns the producer config of the transactional mode.
func (c *Config) txnProducerConfig() *sarama.Config {
	sc := c.producerConfig(newPartitioner)
	sc.Producer.Transaction.ID = c.Transactional.transactionalID()
	sc.Producer.Transaction.Timeout = c.Transactional.timeout(c)
	if sc.Producer.Transaction.Retry.Backoff == sarama.NewConfig().Producer.Transaction.Retry.Backoff {
		// Right after a commit the coordinator answers CONCURRENT_TRANSACTIONS until its markers
		// are written; sarama's 100 ms backoff would idle every transaction that long (the Java
		// client retries that case after 20 ms).
		sc.Producer.Transaction.Retry.Backoff = txnRetryBackoff
	}
	return sc
}

// txn owns the transactional producer: outcomes are sent into the open transaction (send,
// under mu's read lock) and the loop commits it (under mu's write lock, so nothing is sent
// while a transaction ends). Lock order: a partition's out lock, then mu, then bmu or a
// partition's mutex.
type txn struct {
	c        *Consumer
	producer sarama.AsyncProducer
	ctx      context.Context         // Run's
	cancel   context.CancelCauseFunc // ends Run when the producer is fenced

	mu      sync.RWMutex
	dead    bool  // fenced, failed or closed: nothing is sent or committed any more
	failure error // why, when fenced or failed

	bmu     sync.Mutex
	open    bool                // BeginTxn was called and the transaction not yet ended
	batch   []*outbound         // outcomes in the open transaction, in send order
	pending int                 // messages sent and not yet acknowledged
	errs    map[*outbound]error // publish errors in the open transaction
	ackCh   chan struct{}       // pending went down

	full chan struct{} // the batch reached MaxRecords
	stop chan struct{}
	done chan struct{}

	beforeCommit func() // tests: runs before CommitTxn
}

func newTxn(ctx context.Context, c *Consumer, producer sarama.AsyncProducer, cancel context.CancelCauseFunc) *txn {
	t := &txn{c: c, producer: producer, ctx: ctx, cancel: cancel, errs: map[*outbound]error{},
		ackCh: make(chan struct{}, 1), full: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{}), beforeCommit: c.txnHook}
	go t.loop()
	return t
}

// stage takes r's outcome (r is sending, as in the default mode, but done only when its
// transaction commits) and sends, in offset order, the staged outcomes of the partition's
// window from its head up to the first record without one. A transaction then holds only
// outcomes below the offset it commits: a result committed above the watermark would be
// served, and its result committed, again by the partition's next owner. The cost is that a
// slow record holds back the publishing (not the turns) of the records above it in its
// partition. An outbound of kind outNothing (a turn that publishes nothing) joins the
// transaction for its offset only.
func (t *txn) stage(r *record, ob *outbound) {
	p := r.p
	p.stage.Lock()
	defer p.stage.Unlock()
	p.mu.Lock()
	r.staged = ob
	released := p.w.Stage(&r.slot)
	ready := make([]*outbound, len(released))
	for i, slot := range released {
		ready[i], slot.Value.staged = slot.Value.staged, nil
	}
	p.mu.Unlock()
	for _, ob := range ready {
		if !t.send(ob) { // fenced or closing: the record is left to the next owner
			ob.p.unsent()
		}
	}
}

// deliver stages r's outcome (sink): it joins the transaction in offset order, and r stays
// sending until the transaction commits. A turn that publishes nothing joins it too, with an
// outbound of kind outNothing, for its offset only.
func (t *txn) deliver(r *record, ob *outbound) bool {
	if ob == nil {
		ob = &outbound{p: r.p, r: r, kind: outNothing}
	}
	return r.p.send(r, ob, func(ob *outbound) bool {
		t.stage(r, ob)
		return true // staged: the transaction sends it, or leaves it to the next owner
	})
}

// acked takes the producer's acknowledgement for the open transaction (sink; ack).
func (t *txn) acked(ob *outbound, err error) { t.ack(ob, err) }

// advanced does nothing (sink): a record's offset commits with its transaction.
func (*txn) advanced(*partition) {}

// filled commits the transaction at once (sink): a full window's records are done only at
// commit.
func (t *txn) filled() { wake(t.full) }

// exclusive runs f between commits (sink).
func (t *txn) exclusive(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f()
}

// send puts an outcome in the open transaction; false when the member is fenced or closing.
// A transaction that cannot begin fails the producer for good (fail), as every other producer
// error does: the outcome is left to the next owner, and no later record of its partition may
// be sent or committed past it.
func (t *txn) send(ob *outbound) bool {
	ok, beginErr := t.sendShared(ob)
	if beginErr != nil {
		t.mu.Lock()
		if !t.dead {
			t.fail(fmt.Errorf("begin transaction: %w", beginErr))
		}
		t.mu.Unlock()
	}
	return ok
}

// sendShared is send under the read lock of mu; it returns BeginTxn's error, for send to fail
// the producer under the write lock.
func (t *txn) sendShared(ob *outbound) (bool, error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.dead {
		return false, nil
	}
	t.bmu.Lock()
	if !t.open {
		if err := t.producer.BeginTxn(); err != nil {
			t.bmu.Unlock()
			return false, err
		}
		t.open = true
	}
	if ob.kind != outNothing {
		t.pending++
	}
	t.bmu.Unlock()
	if ob.kind != outNothing {
		select {
		case t.producer.Input() <- ob.pm:
		case <-t.stop:
			t.bmu.Lock()
			t.pending--
			t.bmu.Unlock()
			return false, nil
		}
	}
	t.bmu.Lock()
	t.batch = append(t.batch, ob)
	n := len(t.batch)
	t.bmu.Unlock()
	if n >= t.c.cfg.Transactional.MaxRecords {
		wake(t.full)
	}
	return true, nil
}

// ack records the producer's acknowledgement (err nil) or failure of an outcome in the open
// transaction. Called by the output's ack loop.
func (t *txn) ack(ob *outbound, err error) {
	t.bmu.Lock()
	t.pending--
	if err != nil {
		t.errs[ob] = err
	}
	t.bmu.Unlock()
	wake(t.ackCh)
}

// waitAcks waits until every message sent in the open transaction is acknowledged or failed;
// sarama's CommitTxn and AbortTxn flush them, so after either this returns at once.
func (t *txn) waitAcks() bool {
	for {
		t.bmu.Lock()
		n := t.pending
		t.bmu.Unlock()
		if n <= 0 {
			return true
		}
		select {
		case <-t.ackCh:
		case <-t.stop:
			return false
		}
	}
}

func (t *txn) loop() {
	defer close(t.done)
	tick := time.NewTicker(t.c.cfg.Transactional.Interval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-t.full:
		case <-t.stop:
			return
		}
		if !t.commit() {
			return
		}
	}
}

// errPublish aborts a transaction in which a publish failed.
var errPublish = errors.New("a publish of the transaction failed")

// errAbandoned aborts a transaction that holds outcomes of a partition the member released.
var errAbandoned = errors.New("a partition of the transaction was released")

// commit ends the open transaction: it commits its outcomes with their offsets, or aborts it
// and sends them again in a new one until a commit succeeds. False when the producer is
// fenced or failed for good.
func (t *txn) commit() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.dead {
		return false
	}
	for attempt := 0; ; attempt++ {
		t.bmu.Lock()
		empty := len(t.batch) == 0 && t.pending == 0
		t.bmu.Unlock()
		if !t.open || empty {
			if t.open { // begun by a send that then gave up
				if err := t.producer.AbortTxn(); err != nil {
					return t.fail(err)
				}
				t.open = false
			}
			return true
		}
		// Every outcome acknowledged first: a publish that failed is known before anything
		// commits (sarama would fail the commit for it anyway).
		if !t.waitAcks() {
			return false
		}
		offsets, meta, err := t.offsets()
		t.bmu.Lock()
		failed := len(t.errs) > 0
		t.bmu.Unlock()
		if err == nil && failed {
			err = errPublish
		}
		if err == nil {
			err = t.producer.AddOffsetsToTxnWithGroupMetadata(offsets, meta)
		}
		if err == nil {
			if t.beforeCommit != nil {
				t.beforeCommit()
			}
			err = t.producer.CommitTxn()
		}
		if err == nil {
			t.committed()
			return true
		}
		if !t.abortAndResend(err, attempt) {
			return false
		}
	}
}

// abortAndResend aborts the open transaction after err and sends its outcomes again in a new
// one, after a backoff from the second attempt on. False when the producer failed for good (a
// fatal err, an abort that failed, a shutdown during the backoff) or is closing. Called with
// mu held.
func (t *txn) abortAndResend(err error, attempt int) bool {
	if fatal(err, t.producer) {
		return t.fail(err)
	}
	t.c.log.Warn("transaction aborted; sending its outcomes again", "err", err, "outcomes", len(t.batch), "attempt", attempt+1)
	if aerr := t.producer.AbortTxn(); aerr != nil {
		return t.fail(fmt.Errorf("abort after %w: %w", err, aerr))
	}
	if !t.waitAcks() {
		return false
	}
	t.open = false
	if attempt > 0 && !sleep(t.ctx, min(t.c.cfg.RetryBackoff<<min(attempt, 6), t.c.cfg.MaxRetryBackoff)) {
		return t.fail(errors.New("shutdown while retrying a transaction"))
	}
	return t.resend()
}

// fatal reports an error after which the producer must not be used: fenced by a newer
// producer of its transactional id, or in sarama's fatal error state.
func fatal(err error, p sarama.AsyncProducer) bool {
	return errors.Is(err, sarama.ErrProducerFenced) || errors.Is(err, sarama.ErrInvalidProducerEpoch) ||
		p.TxnStatus()&sarama.ProducerTxnFlagFatalError != 0
}

// offsets returns, for each partition with outcomes in the transaction, the offset to commit
// as if every record whose outcome is in it were done, and the group metadata of the
// partitions' session. Called with mu held.
func (t *txn) offsets() (map[string][]*sarama.PartitionOffsetMetadata, *sarama.ConsumerGroupMetadata, error) {
	in := map[*partition]map[*record]bool{}
	for _, ob := range t.batch {
		if in[ob.p] == nil {
			in[ob.p] = map[*record]bool{}
		}
		in[ob.p][ob.r] = true
	}
	offsets := map[string][]*sarama.PartitionOffsetMetadata{}
	var sess sarama.ConsumerGroupSession
	for p, recs := range in {
		if p.released() {
			return nil, nil, errAbandoned
		}
		p.mu.Lock()
		// The watermark as if the transaction's records were done (window.Window.Watermark).
		next, _ := p.watermark(func(slot *window.Record[*record]) bool { return recs[slot.Value] })
		p.mu.Unlock()
		offsets[p.t.topic] = append(offsets[p.t.topic], &sarama.PartitionOffsetMetadata{Partition: p.t.partition, Offset: next})
		sess = p.sess // one session: those of ended sessions were released above
	}
	return offsets, sarama.NewConsumerGroupMetadataFromSession(sess, t.c.cfg.GroupID, nil), nil
}

// released reports whether the partition's outcomes may no longer commit: it was abandoned, or
// its session ended (the member left or was expelled from the group, so its generation is gone
// and another member may own the partition; sessions do not overlap, so every partition whose
// session is live shares one generation). With a cooperative strategy the session, and its
// generation (GenerationID), lives across rebalances.
func (p *partition) released() bool {
	p.mu.Lock()
	abandoned := p.abandoned
	p.mu.Unlock()
	return abandoned || p.sess.Context().Err() != nil
}

// committed completes the transaction's records: sending -> done. Called with mu held.
func (t *txn) committed() {
	for _, ob := range t.batch {
		if ob.kind == outNothing {
			ob.p.acked(ob.r)
		} else {
			ob.p.delivered(ob)
		}
	}
	t.batch, t.open = nil, false
	t.bmu.Lock()
	clear(t.errs)
	t.bmu.Unlock()
}

// resend begins a new transaction with the aborted one's outcomes: those of released
// partitions (released) are dropped, left below the watermark for the next owner, a refused one is replaced as in the
// default mode (a result by a dead letter, a dead letter by one without the value). Called
// with mu held.
func (t *txn) resend() bool {
	old := t.batch
	t.batch = nil
	if err := t.producer.BeginTxn(); err != nil {
		return t.fail(err)
	}
	t.open = true
	for _, ob := range old {
		if ob.p.released() {
			ob.p.unsent()
			continue
		}
		t.bmu.Lock()
		err := t.errs[ob]
		t.bmu.Unlock()
		if err != nil && refused(err) {
			ob.endPublish(err)
			if next := ob.replacement(err); next != nil {
				ob = next
			} else {
				ob.p.c.stats.skipped.Add(1)
				ob.p.log.Error("dead letter refused even without its value; record skipped",
					"offset", ob.r.msg.Offset, "err", err, reqAttrs(ob.req))
				ob = &outbound{p: ob.p, r: ob.r, kind: outNothing}
			}
		}
		if ob.kind != outNothing {
			t.bmu.Lock()
			t.pending++
			t.bmu.Unlock()
			select {
			case t.producer.Input() <- ob.pm:
			case <-t.stop:
				return false
			}
		}
		t.batch = append(t.batch, ob)
	}
	t.bmu.Lock()
	clear(t.errs)
	t.bmu.Unlock()
	return true
}

// fail makes the producer final: nothing more is sent or committed, the records of the open
// transaction are left to the partitions' next owners, and Run ends with ErrFenced. Called
// with mu held.
func (t *txn) fail(err error) bool {
	t.dead = true
	t.failure = fmt.Errorf("%w: %w", ErrFenced, err)
	t.c.log.Error("transactional producer fenced or failed; the member stops and commits nothing more", "err", err)
	for _, ob := range t.batch {
		ob.p.unsent()
	}
	t.batch = nil
	t.cancel(t.failure)
	return false
}

// close stops the loop and aborts a transaction left open (its outcomes belong to released
// partitions). Called by Run once every claim has returned, before the producer closes (sink).
func (t *txn) close() {
	close(t.stop)
	<-t.done
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.dead && t.open {
		if !within(commitTimeout, func() { _ = t.producer.AbortTxn() }) {
			t.c.log.Warn("aborting the last transaction did not finish in time; the coordinator aborts it after the transaction timeout")
		}
	}
	t.dead = true
}

// err returns why the producer was fenced or failed, nil otherwise (sink).
func (t *txn) err() error {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.failure
}
