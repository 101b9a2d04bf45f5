package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/cenkalti/backoff/v5"

	"github.com/turnstile-go/turnstile/turn"
)

// lane runs the records of one claimed partition one at a time, in offset order.
type lane struct {
	c         *Consumer
	sess      sarama.ConsumerGroupSession
	topic     string
	partition int32

	mu     sync.Mutex
	queue  []*sarama.ConsumerMessage
	closed bool
	paused bool // paused by this lane for backpressure
	notify chan struct{}

	// out guards publishing and marking against abandon: once abandoned, a lane publishes
	// and marks nothing, so a late turn on a revoked partition has no visible effect.
	out       sync.Mutex
	abandoned bool

	lastErr error // the refusal of the last sendRefused; used by the lane's goroutine only

	// waits ends when the lane closes: backoff sleeps and rate-limit waits end at once on a
	// revoke or shutdown, while a turn in flight keeps its grace.
	waits       context.Context
	cancelWaits context.CancelFunc
}

func newLane(c *Consumer, sess sarama.ConsumerGroupSession, topic string, partition int32, turnCtx context.Context) *lane {
	l := &lane{c: c, sess: sess, topic: topic, partition: partition, notify: make(chan struct{}, 1)}
	l.waits, l.cancelWaits = context.WithCancel(turnCtx)
	return l
}

func (l *lane) tp() map[string][]int32 { return map[string][]int32{l.topic: {l.partition}} }

func (l *lane) signal() {
	select {
	case l.notify <- struct{}{}:
	default:
	}
}

// push queues a record; beyond MaxBuffered it pauses the partition. The feeder never blocks,
// so it sees a revoke (Messages closing) at once even while a turn runs.
func (l *lane) push(msg *sarama.ConsumerMessage) {
	l.mu.Lock()
	l.queue = append(l.queue, msg)
	l.c.stats.peak(int64(len(l.queue)))
	full := len(l.queue) >= l.c.cfg.MaxBuffered
	if full {
		l.paused = true
	}
	l.mu.Unlock()
	l.signal()
	if full { // again on every record past the mark: a ResumeAll may have undone it
		l.c.group.Pause(l.tp())
	}
}

// pop returns the next record, waiting for one; false once the lane is closed or ctx ends.
func (l *lane) pop(ctx context.Context) (*sarama.ConsumerMessage, bool) {
	for {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return nil, false
		}
		if len(l.queue) > 0 {
			msg := l.queue[0]
			l.queue[0] = nil
			l.queue = l.queue[1:]
			resume := l.paused && len(l.queue) <= l.c.cfg.MaxBuffered/2 && !l.c.throttle.active()
			if resume {
				l.paused = false
			}
			l.mu.Unlock()
			if resume {
				l.c.group.Resume(l.tp())
			}
			return msg, true
		}
		l.mu.Unlock()
		select {
		case <-l.notify:
		case <-ctx.Done():
			return nil, false
		}
	}
}

// close stops the lane from taking more records; queued ones are left to the next owner.
// A backpressure pause is lifted: sarama keeps a partition's pause across a revoke and applies
// it to the partition's next claim (consumer.go, addChild), which would stall it for good.
func (l *lane) close() {
	l.mu.Lock()
	l.closed = true
	l.queue = nil
	paused := l.paused
	l.paused = false
	l.mu.Unlock()
	l.cancelWaits()
	l.signal()
	if paused {
		l.c.group.Resume(l.tp())
	}
}

// abandon makes the lane publish and mark nothing from now on.
func (l *lane) abandon() {
	l.out.Lock()
	l.abandoned = true
	l.out.Unlock()
}

func (l *lane) run(ctx context.Context) {
	for {
		msg, ok := l.pop(ctx)
		if !ok || !l.process(ctx, msg) {
			return
		}
	}
}

// process serves one record to a durable outcome (result or dead letter) and marks its
// offset. It returns false when the turn was abandoned: nothing was marked.
func (l *lane) process(ctx context.Context, msg *sarama.ConsumerMessage) bool {
	c := l.c
	log := c.log.With("topic", msg.Topic, "partition", msg.Partition, "offset", msg.Offset)
	req, err := l.decode(msg)
	if err != nil {
		log.Warn("undecodable record dead-lettered", "err", err)
		return l.deadLetter(ctx, msg, nil, err.Error(), err, 0, log)
	}
	log = log.With("request_id", req.ID, "conversation_id", req.ConversationID)
	bo := newBackoff(c.cfg.RetryBackoff, c.cfg.MaxRetryBackoff)
	failures := 0
	for {
		if c.throttle.wait(l.waits) != nil {
			return l.giveUp(log)
		}
		res, err := l.handle(ctx, req)
		if err != nil && ctx.Err() != nil {
			return l.giveUp(log) // revoked or shut down mid-turn, whatever the handler made of it
		}
		switch kind := turn.Classify(err); kind {
		case turn.KindNone:
			c.throttle.succeeded()
			c.stats.turns.Add(1)
			return l.publishResult(ctx, msg, req, res, log)
		case turn.KindPermanent:
			reason, attempts := err.Error(), failures+1
			var dle *turn.DeadLetterError
			if errors.As(err, &dle) {
				reason, attempts = dle.Reason, dle.Attempts
			}
			return l.deadLetter(ctx, msg, &req, reason, err, attempts, log)
		case turn.KindRateLimited:
			c.stats.rateLimited.Add(1)
			d, _ := turn.RetryDelay(err)
			if c.throttle.pause(d) {
				c.stats.pauses.Add(1)
			}
		case turn.KindUnavailable:
			log.Warn("turn hit an unavailable dependency; retrying, no attempt spent", "err", err)
			if !sleep(l.waits, bo.NextBackOff()) {
				return l.giveUp(log)
			}
		case turn.KindAttempt:
			failures++
			c.stats.retries.Add(1)
			if failures >= c.cfg.MaxAttempts {
				reason := fmt.Sprintf("%d attempts failed in this member; last error: %v", failures, err)
				return l.deadLetter(ctx, msg, &req, reason, err, failures, log)
			}
			log.Warn("turn attempt failed; retrying", "err", err, "failures", failures)
			if !sleep(l.waits, bo.NextBackOff()) {
				return l.giveUp(log)
			}
		case turn.KindCanceled:
			return l.giveUp(log)
		}
	}
}

func (l *lane) giveUp(log *slog.Logger) bool {
	l.c.stats.abandoned.Add(1)
	log.Info("turn abandoned; the partition's next owner redoes it")
	return false
}

// handle calls the Handler within the in-flight bound and the optional TurnTimeout.
func (l *lane) handle(ctx context.Context, req turn.Request) (*turn.Result, error) {
	select {
	case l.c.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-l.c.sem }()
	if d := l.c.cfg.TurnTimeout; d > 0 {
		hctx, cancel := context.WithTimeoutCause(ctx, d, turn.ErrTurnTimeout)
		defer cancel()
		res, err := l.c.h.Handle(hctx, req)
		if err != nil && ctx.Err() == nil && errors.Is(context.Cause(hctx), turn.ErrTurnTimeout) {
			err = fmt.Errorf("%w (%s): %w", turn.ErrTurnTimeout, d, err)
		}
		return res, err
	}
	return l.c.h.Handle(ctx, req)
}

// decode turns a record into a request: a valid envelope whose conversation id is the key.
func (l *lane) decode(msg *sarama.ConsumerMessage) (turn.Request, error) {
	if len(msg.Key) == 0 {
		return turn.Request{}, errors.New("record has no key; the key must be the conversation id")
	}
	req, err := l.c.cfg.Decoder.Decode(msg.Value)
	if err != nil {
		return turn.Request{}, err
	}
	if req.ConversationID != string(msg.Key) {
		return turn.Request{}, fmt.Errorf("record key %.80q differs from conversation_id %.80q", msg.Key, req.ConversationID)
	}
	req.Source = turn.Source{Topic: msg.Topic, Partition: msg.Partition, Offset: msg.Offset}
	return req, nil
}

func (l *lane) publishResult(ctx context.Context, msg *sarama.ConsumerMessage, req turn.Request, res *turn.Result, log *slog.Logger) bool {
	if res == nil {
		return l.send(msg, nil, log) == sendOK
	}
	value, err := json.Marshal(res)
	if err != nil { // a Result is plain data; this is a bug, not a record's fault
		return l.deadLetter(ctx, msg, &req, "result does not encode", err, res.Attempt, log)
	}
	if res.Replayed {
		l.c.stats.replayed.Add(1)
	}
	pm := &sarama.ProducerMessage{
		Topic: l.c.cfg.ResultsTopic, Key: sarama.ByteEncoder(msg.Key), Value: sarama.ByteEncoder(value),
		Headers: []sarama.RecordHeader{
			header(HeaderRequestID, req.ID), header(HeaderConversationID, req.ConversationID),
			header(HeaderAttempt, itoa(res.Attempt)),
		},
		Metadata: placement{partition: msg.Partition, partitions: l.c.partitions.Load()},
	}
	switch l.send(msg, pm, log) {
	case sendAbandoned:
		return false
	case sendRefused:
		return l.deadLetter(ctx, msg, &req, fmt.Sprintf("the result (%d bytes) was refused by the results topic", len(value)), l.lastErr, res.Attempt, log)
	}
	l.c.stats.results.Add(1)
	return true
}

// deadLetter publishes the record as it came, with the reason in headers, to the
// dead-letter topic, then marks it.
func (l *lane) deadLetter(ctx context.Context, msg *sarama.ConsumerMessage, req *turn.Request, reason string, cause error, attempts int, log *slog.Logger) bool {
	ours := []sarama.RecordHeader{
		header(HeaderReason, clip(reason)), header(HeaderAttempts, itoa(attempts)),
		header(HeaderSourceTopic, msg.Topic), header(HeaderSourcePartition, itoa(msg.Partition)),
		header(HeaderSourceOffset, itoa(msg.Offset)),
	}
	if cause != nil {
		ours = append(ours, header(HeaderError, clip(cause.Error())))
	}
	if req != nil {
		ours = append(ours, header(HeaderRequestID, req.ID), header(HeaderConversationID, req.ConversationID))
	}
	headers := make([]sarama.RecordHeader, 0, len(msg.Headers)+len(ours))
	for _, h := range msg.Headers { // keep the producer's headers, except those ours replace
		if h != nil && !hasHeader(ours, string(h.Key)) {
			headers = append(headers, *h)
		}
	}
	pm := &sarama.ProducerMessage{
		Topic: l.c.cfg.DeadLetterTopic, Key: sarama.ByteEncoder(msg.Key), Value: sarama.ByteEncoder(msg.Value),
		Headers: append(headers, ours...), Metadata: placement{partition: msg.Partition, partitions: l.c.partitions.Load()},
	}
	outcome := l.send(msg, pm, log)
	if outcome == sendRefused {
		// Too large (or otherwise refused) as it came: dead-letter it without its value, so
		// that the partition moves on and the headers still say where the record is.
		log.Error("dead letter refused; publishing it without its value", "err", l.lastErr, "bytes", len(msg.Value))
		pm.Value = nil
		pm.Headers = append(pm.Headers, header(HeaderValueDropped, fmt.Sprintf("%d bytes; refused: %s", len(msg.Value), clip(l.lastErr.Error()))))
		outcome = l.send(msg, pm, log)
	}
	switch outcome {
	case sendAbandoned:
		return false
	case sendRefused: // even without its value: say so as loudly as we can, and move on
		log.Error("dead letter refused even without its value; record skipped", "err", l.lastErr)
		l.c.stats.skipped.Add(1)
		return l.send(msg, nil, log) == sendOK // mark it, unless the lane was abandoned
	}
	l.c.stats.deadLetters.Add(1)
	log.Error("record dead-lettered", "reason", reason, "attempts", attempts)
	return true
}

// clip bounds a header value, so that a long error text cannot make a dead letter too large.
func clip(s string) string {
	const maxHeader = 4 << 10
	if len(s) <= maxHeader {
		return s
	}
	return strings.ToValidUTF8(s[:maxHeader], "") + "…"
}

func hasHeader(hs []sarama.RecordHeader, key string) bool {
	for _, h := range hs {
		if string(h.Key) == key {
			return true
		}
	}
	return false
}

type sendOutcome int

const (
	sendOK        sendOutcome = iota // published (if there was anything) and marked
	sendAbandoned                    // the lane was abandoned: nothing published or marked
	sendRefused                      // the record can never be published as it is (l.lastErr)
)

// send publishes pm (if any) and marks msg done, retrying a failed publish with backoff until
// it succeeds, the lane is abandoned, or the producer refuses the record for good (too large).
// A publish that is acknowledged is durable (acks=all), so the mark after it keeps G2.
func (l *lane) send(msg *sarama.ConsumerMessage, pm *sarama.ProducerMessage, log *slog.Logger) sendOutcome {
	bo := newBackoff(l.c.cfg.RetryBackoff, l.c.cfg.MaxRetryBackoff)
	for {
		l.out.Lock()
		if l.abandoned {
			l.out.Unlock()
			l.c.stats.lateDropped.Add(1)
			log.Warn("turn finished after its partition was released; not published, not committed")
			return sendAbandoned
		}
		var err error
		if pm != nil {
			_, _, err = l.c.producer.SendMessage(pm)
		}
		if err == nil {
			l.sess.MarkOffset(msg.Topic, msg.Partition, msg.Offset+1, "")
			l.c.stats.records.Add(1)
		}
		l.out.Unlock()
		switch {
		case err == nil:
			return sendOK
		case refused(err):
			l.lastErr = err
			return sendRefused
		}
		log.Warn("publish failed; retrying", "to", pm.Topic, "err", err)
		if !sleep(l.waits, bo.NextBackOff()) {
			return sendAbandoned
		}
	}
}

// refused reports a publish error that retrying cannot fix: sarama's own check of
// Producer.MaxMessageBytes (a ConfigurationError), or the broker's MESSAGE_TOO_LARGE,
// RECORD_LIST_TOO_LARGE (ErrMessageSetSizeTooLarge) or INVALID_RECORD.
func refused(err error) bool {
	var cfgErr sarama.ConfigurationError
	return errors.As(err, &cfgErr) || errors.Is(err, sarama.ErrMessageSizeTooLarge) ||
		errors.Is(err, sarama.ErrMessageSetSizeTooLarge) || errors.Is(err, sarama.ErrInvalidRecord)
}

func newBackoff(initial, maxInterval time.Duration) *backoff.ExponentialBackOff {
	bo := &backoff.ExponentialBackOff{InitialInterval: initial, RandomizationFactor: 0.5, Multiplier: 2, MaxInterval: maxInterval}
	bo.Reset()
	return bo
}

// Stats counts what a Consumer did since it started. Read it with Consumer.Stats.
type Stats struct {
	// Records is the number of records brought to a durable outcome and marked for commit.
	Records int64
	// Turns is the number of Handler calls that succeeded, replays from the inbox included.
	Turns int64
	// Results is the number of result records published; Replayed of them came from the inbox.
	Results, Replayed int64
	// DeadLetters is the number of records published to the dead-letter topic.
	DeadLetters int64
	// Retries counts failed attempts that were retried; RateLimited counts RetryAfter answers.
	Retries, RateLimited int64
	// Abandoned counts turns cancelled by a revoke or shutdown; LateDropped counts outcomes
	// that arrived after their partition was released and were neither published nor committed.
	Abandoned, LateDropped int64
	// Pauses counts the rate-limit pauses of all partitions (PauseAll); Claims counts the
	// partitions this member was assigned, over all rebalances.
	Pauses, Claims int64
	// Skipped counts records that could be neither served nor dead-lettered, even without
	// their value; each was logged at error level with its location. It should stay 0.
	Skipped int64
	// PeakBuffered is the most records one partition's lane has held waiting (G6): at most
	// Config.MaxBuffered plus what one fetch in flight brings (Consumer.Fetch.Default bytes).
	PeakBuffered int64
}

// Add returns the sum of s and o, field by field (PeakBuffered: the larger), for a process
// that runs several Consumers and reports them as one.
func (s Stats) Add(o Stats) Stats {
	return Stats{
		Records: s.Records + o.Records, Turns: s.Turns + o.Turns, Results: s.Results + o.Results,
		Replayed: s.Replayed + o.Replayed, DeadLetters: s.DeadLetters + o.DeadLetters,
		Retries: s.Retries + o.Retries, RateLimited: s.RateLimited + o.RateLimited,
		Abandoned: s.Abandoned + o.Abandoned, LateDropped: s.LateDropped + o.LateDropped,
		Pauses: s.Pauses + o.Pauses, Claims: s.Claims + o.Claims, Skipped: s.Skipped + o.Skipped,
		PeakBuffered: max(s.PeakBuffered, o.PeakBuffered),
	}
}

type counters struct {
	records, turns, results, replayed, deadLetters, retries, rateLimited, abandoned, lateDropped,
	pauses, claims, skipped, peakBuffered atomic.Int64
}

// peak raises peakBuffered to n if n is higher.
func (s *counters) peak(n int64) {
	for {
		old := s.peakBuffered.Load()
		if n <= old || s.peakBuffered.CompareAndSwap(old, n) {
			return
		}
	}
}

// Stats returns the consumer's counters; safe to call at any time, from any goroutine.
func (c *Consumer) Stats() Stats {
	s := &c.stats
	return Stats{
		Records: s.records.Load(), Turns: s.turns.Load(), Results: s.results.Load(), Replayed: s.replayed.Load(),
		DeadLetters: s.deadLetters.Load(), Retries: s.retries.Load(), RateLimited: s.rateLimited.Load(),
		Abandoned: s.abandoned.Load(), LateDropped: s.lateDropped.Load(),
		Pauses: s.pauses.Load(), Claims: s.claims.Load(), Skipped: s.skipped.Load(),
		PeakBuffered: s.peakBuffered.Load(),
	}
}
