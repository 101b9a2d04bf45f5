package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/IBM/sarama"
	"github.com/cenkalti/backoff/v5"
	"go.opentelemetry.io/otel/trace"

	rec "github.com/turnstile-go/turnstile/internal/record"
	"github.com/turnstile-go/turnstile/turn"
)

// recordLog builds a record's logger on first use: most records log nothing, and a
// slog.Logger.With per record costs more than the rest of a fast turn's bookkeeping.
type recordLog struct {
	p   *partition
	msg *sarama.ConsumerMessage
	req *turn.Request
	l   *slog.Logger
}

func (rl *recordLog) get() *slog.Logger {
	if rl.l == nil {
		rl.l = rl.p.log.With("offset", rl.msg.Offset)
		if rl.req != nil {
			rl.l = rl.l.With("request_id", rl.req.ID, "conversation_id", rl.req.ConversationID)
		}
	}
	return rl.l
}

// process runs r's turn to an outcome: a result to publish (or nil, for a Handler that
// publishes nothing) or a dead letter. It returns false when the turn was abandoned (revoke,
// shutdown): nothing is handed off, and the record is left to the partition's next owner.
//
// A panic in code run on the turn's behalf (the decoder, TurnContextFunc, telemetry,
// turnstile's own bookkeeping; a Handler's panic is an attempt of its own, see call) fails
// the turn's attempt: the turn runs again after a backoff, and after Config.MaxAttempts
// panics the record is dead-lettered with the last panic, its value and trimmed stack, in the
// reason. The member and its other turns go on (DESIGN.md, "Features meet").
func (p *partition) process(r *record) (*outbound, bool) {
	c := p.c
	var bo *backoff.ExponentialBackOff
	for tries := 1; ; tries++ {
		var req *turn.Request
		ob, ok, pe := p.processGuarded(r, &req)
		if pe == nil {
			return ob, ok
		}
		rl := &recordLog{p: p, msg: r.msg, req: req}
		if p.turns.Err() != nil { // revoked or shut down meanwhile
			p.abandonTurn(rl)
			return nil, false
		}
		c.stats.retries.Add(1)
		if tries >= c.cfg.MaxAttempts {
			reason := fmt.Sprintf("%d attempts panicked in this member; last: %v", tries, pe)
			rl.get().Error("turn panicked; dead-lettered", "attempt", tries, "panic", pe.Error())
			return p.deadLetter(r, req, reason, pe, tries, turn.KindAttempt), true
		}
		if bo == nil {
			bo = newBackoff(c.cfg.RetryBackoff, c.cfg.MaxRetryBackoff)
		}
		d := bo.NextBackOff()
		rl.get().Error("turn panicked; retrying", "attempt", tries, "panic", pe.Error(), "retry_in", d.String())
		if !sleep(p.waits, d) {
			p.abandonTurn(rl)
			return nil, false
		}
	}
}

// processGuarded is one try of process, with a panic recovered into pe; *req is set to the
// decoded request, once there is one.
func (p *partition) processGuarded(r *record, req **turn.Request) (ob *outbound, ok bool, pe *turn.PanicError) {
	defer func() {
		if v := recover(); v != nil {
			if e, isPanic := v.(*turn.PanicError); isPanic { // re-raised by run with its origin named
				pe = e
			} else {
				pe = turn.Recovered("turnstile consumer", v)
			}
			ob, ok = nil, false
		}
	}()
	ob, ok = p.processOnce(r, req)
	return ob, ok, nil
}

// processOnce wraps the turn in the record's process span and measures it, with telemetry on;
// off, it costs two nil checks.
func (p *partition) processOnce(r *record, req **turn.Request) (*outbound, bool) {
	ctx, t, m := p.c.turnContext(p.turns), p.c.tracing, p.c.meters
	if t == nil && m == nil {
		ob, ok, _ := p.run(ctx, r, nil, req)
		return ob, ok
	}
	var (
		span  trace.Span
		began time.Time
	)
	if t != nil {
		ctx, span = t.startProcess(ctx, r.msg)
	}
	if m != nil {
		began = time.Now()
	}
	ob, ok, calls := p.run(ctx, r, span, req)
	if span != nil {
		if ob != nil && ok {
			t.startPublish(ctx, ob)
		}
		endProcess(span, ob, ok, calls)
	}
	if m != nil {
		outcome := outcomeOf(ob, ok)
		m.turnDuration.Record(ctx, since(began), m.outcomeAttrs(outcome))
		if ob == nil { // abandoned, or a Handler's nil Result: no acknowledgement will count it
			m.turns.Add(ctx, 1, m.outcomeAttrs(outcome))
		}
	}
	return ob, ok
}

// run is process's loop: decode, then attempts until an outcome. It returns the number of
// Handler calls too; span, when not nil, is the record's process span.
//
// A panic in the decoder or TurnContextFunc is raised again as a *turn.PanicError naming it,
// for process to retry; got is set to the request once it is decoded.
//
// Each attempt is three steps: attempt runs and counts it, decide (retry.go, pure) says what
// follows, act does it: publish, dead-letter, abandon, or get the turn ready to run again.
func (p *partition) run(ctx context.Context, r *record, span trace.Span, got **turn.Request) (*outbound, bool, int) {
	// The request and the record's log outlive this call (the outbound and the panic path keep
	// them): one allocation for both rather than one each.
	st := &runState{rl: recordLog{p: p, msg: r.msg}}
	rl := &st.rl
	var dead *outbound
	if st.req, dead = p.decodeRecord(r, rl); dead != nil {
		return dead, true, 0
	}
	req := &st.req
	rl.req, *got = req, req
	if span != nil {
		request(span, req)
	}
	ctx, cancel := p.withTurnContext(ctx, *req)
	if cancel != nil {
		defer cancel()
	}
	lim := limits{maxAttempts: p.c.cfg.MaxAttempts, maxRateLimits: p.c.cfg.MaxRateLimits}
	var n counts
	defer n.endProbeOnPanic(p.c.throttle)
	for {
		o := p.attempt(ctx, r, *req, &n)
		d := decide(o, n, lim)
		if ob, ok, done := p.carryOut(ctx, r, req, rl, &n, o, d); done {
			return ob, ok, n.calls
		}
	}
}

// runState is what run keeps of a record's turn on the heap.
type runState struct {
	req turn.Request
	rl  recordLog
}

// decodeRecord decodes r's request, or returns r's dead letter when it does not decode or its
// key is not its conversation id (G7).
func (p *partition) decodeRecord(r *record, rl *recordLog) (turn.Request, *outbound) {
	msg := r.msg
	req, err := p.decodeGuarded(msg)
	if err == nil {
		return req, nil
	}
	var mismatch *keyMismatchError
	if errors.As(err, &mismatch) {
		rl.get().Warn("record key differs from the request's conversation_id; dead-lettered (G7)",
			"key", clipID(string(msg.Key)), "conversation_id", clipID(mismatch.conversation))
	} else {
		rl.get().Warn("undecodable record dead-lettered", "err", err)
	}
	return turn.Request{}, p.deadLetter(r, nil, err.Error(), err, 0, turn.KindPermanent)
}

// withTurnContext returns the turn's context: ctx, or Config.TurnContextFunc's context for req
// when there is one, with its cancel (nil when there is none to call).
func (p *partition) withTurnContext(ctx context.Context, req turn.Request) (context.Context, context.CancelFunc) {
	f := p.c.cfg.TurnContextFunc
	if f == nil {
		return ctx, nil
	}
	hctx, cancel := guardTurnContext(f, ctx, req)
	if hctx != nil {
		ctx = hctx
	}
	return ctx, cancel
}

// attempt runs one attempt of the turn: it waits for the throttle (n.probe says whether the
// attempt probes), calls the Handler (alone when n.alone), classifies its error, counts the
// attempt in the attempts metric and in n: a call, a failure (with stats.retries), a rate limit
// (with stats.rateLimited; it says whether the request was refused alone). An attempt cut short
// by the partition's end counts no failure nor rate limit.
func (p *partition) attempt(ctx context.Context, r *record, req turn.Request, n *counts) outcome {
	c := p.c
	var err error
	if n.probe, err = c.throttle.wait(p.waits, r); err != nil {
		return outcome{stopped: true}
	}
	o := outcome{at: c.throttle.clock()}
	o.res, o.encoded, o.err = p.handle(ctx, req, n.alone)
	n.calls++
	if errors.Is(o.err, errAloneWaitEnded) {
		return outcome{stopped: true} // revoked or shut down while it waited to run alone
	}
	o.kind = turn.Classify(o.err)
	o.aborted = o.err != nil && p.turns.Err() != nil // revoked or shut down mid-turn
	if o.kind == turn.KindAbandoned && !o.aborted {
		o.kind = turn.KindAttempt // the turn's own context ended (TurnContextFunc's deadline)
	}
	if m := c.meters; m != nil {
		m.attempts.Add(ctx, 1, m.kind(o.kind))
	}
	switch {
	case o.aborted:
	case o.kind == turn.KindAttempt, o.kind == turn.KindAbandoned:
		n.failures++
		c.stats.retries.Add(1)
	case o.kind == turn.KindRateLimited:
		c.stats.rateLimited.Add(1)
		o.own = n.rate.limited(c.throttle)
	}
	return o
}

// act does what decide said of attempt o: it ends the turn (done) with its outcome, a result
// or dead letter to hand off (ok) or nothing (abandoned), or gets it ready to run again.
func (p *partition) carryOut(ctx context.Context, r *record, req *turn.Request, rl *recordLog, n *counts, o outcome,
	d decision) (ob *outbound, ok, done bool) {
	c := p.c
	if d.endProbe {
		c.throttle.endProbe(n.probe)
		n.probe = false // ended: a later panic must not end another turn's probe (endProbeOnPanic)
	}
	switch d.act {
	case actResult:
		c.throttle.succeeded(o.at)
		c.stats.turns.Add(1)
		return p.result(r, req, o.res, o.encoded, rl), true, true
	case actDeadLetter:
		return p.deadLetter(r, req, d.reason, o.err, d.attempts, d.kind), true, true
	case actAbandon:
		p.abandonTurn(rl)
		return nil, false, true
	}
	if !p.retry(ctx, r, rl, n, o, d) { // a backoff cut short: revoked or shut down
		p.abandonTurn(rl)
		return nil, false, true
	}
	return nil, false, false
}

// retry gets the turn ready to run again as d says: a pause of every partition, a backoff, or
// running alone. It returns false when a backoff was cut short by the partition's end.
func (p *partition) retry(ctx context.Context, r *record, rl *recordLog, n *counts, o outcome, d decision) bool {
	c := p.c
	switch d.act {
	case actPause:
		if c.throttle.pause(d.delay, n.probe, r, n.rate.mark) {
			c.stats.pauses.Add(1)
			if m := c.meters; m != nil {
				m.pauses.Add(ctx, 1, m.base)
			}
		}
	case actBackOffAlone:
		wait := n.rate.backoff(c.cfg.RetryBackoff, c.cfg.MaxPause, d.delay)
		rl.get().Warn("request rate limited while others pass; it alone waits", "times", n.rate.counted,
			"retry_in", wait.String(), "err", o.err)
		return sleep(p.waits, wait)
	case actRetryUnavailable:
		c.health.sawUnavailable(o.err)
		wait := n.retryIn(&c.cfg)
		rl.get().Warn("turn hit an unavailable dependency; retrying, no attempt spent", "err", o.err,
			"retry_in", wait.String())
		return sleep(p.waits, wait)
	case actRetryFailed:
		wait := n.retryIn(&c.cfg)
		rl.get().Warn("turn attempt failed; retrying", "attempt", d.attempts, "err", o.err, "retry_in", wait.String())
		return sleep(p.waits, wait)
	case actRunAlone:
		n.alone = true
		c.stats.alone.Add(1)
		rl.get().Warn("request's last attempt ended with its member; running it alone", "err", o.err)
	}
	return true
}

// errAloneWaitEnded is handle's error when the partition closed while the turn waited to run
// alone: the turn is abandoned, as one cancelled by the revoke.
var errAloneWaitEnded = errors.New("consumer: stopped waiting to run alone")

func (p *partition) abandonTurn(rl *recordLog) {
	p.c.stats.abandoned.Add(1)
	rl.get().Info("turn abandoned; the partition's next owner redoes it")
}

// handle calls the Handler with the optional TurnTimeout, beside other turns or, when alone,
// with no other turn of the member in a Handler call (soloGate). It returns the Result's
// encoding too when the Handler has it (the Runner's), else nil.
func (p *partition) handle(ctx context.Context, req turn.Request, alone bool) (*turn.Result, []byte, error) {
	if alone {
		leave, err := p.c.solo.alone(p.waits)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %w", errAloneWaitEnded, err)
		}
		defer leave()
		ctx = turn.WithCrashIsolation(ctx, true)
	} else {
		p.c.solo.enter()
		defer p.c.solo.leave()
	}
	if d := p.c.cfg.TurnTimeout; d > 0 {
		hctx, cancel := context.WithTimeoutCause(ctx, d, turn.ErrTurnTimeout)
		defer cancel()
		res, encoded, err := p.call(hctx, req)
		if err != nil && ctx.Err() == nil && errors.Is(context.Cause(hctx), turn.ErrTurnTimeout) {
			err = fmt.Errorf("%w (%s): %w", turn.ErrTurnTimeout, d, err)
		}
		return res, encoded, err
	}
	return p.call(ctx, req)
}

// call calls the Handler. A panic in it fails the attempt with a *turn.PanicError (value and
// trimmed stack), as a returned error would: the turn is retried and dead-lettered after
// Config.MaxAttempts with the panic in its reason.
func (p *partition) call(ctx context.Context, req turn.Request) (res *turn.Result, encoded []byte, err error) {
	defer func() {
		if v := recover(); v != nil {
			res, encoded, err = nil, nil, turn.Recovered("handler", v)
			p.log.Error("handler panicked", "request_id", req.ID, "conversation_id", req.ConversationID,
				"offset", req.Source.Offset, "panic", err.Error())
		}
	}()
	ctx = turn.WithResultLimit(ctx, p.c.resultLimit(&req))
	if eh, ok := p.c.h.(encodingHandler); ok {
		return eh.handleEncoded(ctx, req)
	}
	res, err = p.c.h.Handle(ctx, req)
	return res, nil, err
}

// decodeGuarded is decode with a panic raised again as a *turn.PanicError naming the
// decoder, for process to retry and, after Config.MaxAttempts, dead-letter.
func (p *partition) decodeGuarded(msg *sarama.ConsumerMessage) (turn.Request, error) {
	defer func() {
		if v := recover(); v != nil {
			panic(turn.Recovered("decoder", v))
		}
	}()
	if h := p.c.decodeHook; h != nil {
		h(msg)
	}
	return p.decode(msg)
}

// guardTurnContext calls a TurnContextFunc, with a panic raised again as a *turn.PanicError
// naming it.
func guardTurnContext(f func(context.Context, turn.Request) (context.Context, context.CancelFunc), ctx context.Context,
	req turn.Request) (context.Context, context.CancelFunc) {
	defer func() {
		if v := recover(); v != nil {
			panic(turn.Recovered("TurnContextFunc", v))
		}
	}()
	return f(ctx, req)
}

// decode turns a record into a request: a valid envelope whose conversation id is the key.
func (p *partition) decode(msg *sarama.ConsumerMessage) (turn.Request, error) {
	req, err := DecodeRecord(p.c.cfg.Decoder, msg.Key, msg.Value)
	if err != nil {
		return turn.Request{}, err
	}
	req.Source = turn.Source{Topic: msg.Topic, Partition: msg.Partition, Offset: msg.Offset}
	req.Headers = recordHeaders(msg)
	return req, nil
}

// keyMismatchError is a record whose key is not its request's conversation id: served, it
// could reach another conversation's session (G7), so it is dead-lettered.
type keyMismatchError struct{ key, conversation string }

func (e *keyMismatchError) Error() string {
	return fmt.Sprintf("record key %.80q differs from conversation_id %.80q", e.key, e.conversation)
}

// clipID bounds an id from a record for a log line.
func clipID(s string) string {
	if len(s) <= 80 {
		return s
	}
	return strings.ToValidUTF8(s[:80], "") + "…"
}

// result builds the result record of a turn, or returns nil when the Handler publishes
// nothing; encoded, when not nil, is res encoded by the Handler. A Result that does not encode
// (a bug, not the record's fault) is dead-lettered.
func (p *partition) result(r *record, req *turn.Request, res *turn.Result, encoded []byte, rl *recordLog) *outbound {
	if res == nil {
		return nil
	}
	value, err := encoded, error(nil)
	if value == nil {
		value, err = res.Encode()
	}
	if err != nil {
		rl.get().Error("result does not encode", "err", err)
		return p.deadLetter(r, req, "result does not encode", err, res.Attempt, turn.KindPermanent)
	}
	ob := &outbound{p: p, r: r, kind: outResult, req: req, attempts: res.Attempt, replayed: res.Replayed,
		partitions: p.c.partitions.Load(), key: r.msg.Key, value: value}
	ob.msg = sarama.ProducerMessage{
		Topic: p.c.cfg.ResultsTopic, Key: &ob.key, Value: &ob.value,
		Headers: p.c.forward(rec.ResultHeaders(req, res.Attempt, len(p.c.cfg.ForwardHeaders)), req), Metadata: ob,
	}
	ob.pm = &ob.msg
	return ob
}

// deadLetter builds the dead letter of r: the record as it came, with the reason and kind (the
// turn.Kind that dead-lettered it, HeaderKind) in headers (record.DeadLetter.Headers).
func (p *partition) deadLetter(r *record, req *turn.Request, reason string, cause error, attempts int, kind turn.Kind) *outbound {
	msg := r.msg
	dl := rec.DeadLetter{Reason: reason, Error: rec.ErrorText(cause), Attempts: attempts, Kind: kind,
		Source: turn.Source{Topic: msg.Topic, Partition: msg.Partition, Offset: msg.Offset}}
	if req != nil {
		dl.RequestID, dl.ConversationID = req.ID, req.ConversationID
	}
	ob := &outbound{p: p, r: r, kind: outDeadLetter, req: req, reason: reason, attempts: attempts,
		partitions: p.c.partitions.Load(), key: msg.Key, value: msg.Value}
	ob.msg = sarama.ProducerMessage{
		Topic: p.c.cfg.DeadLetterTopic, Key: &ob.key, Value: &ob.value,
		Headers: dl.Headers(msg.Headers), Metadata: ob,
	}
	ob.pm = &ob.msg
	return ob
}

func newBackoff(initial, maxInterval time.Duration) *backoff.ExponentialBackOff {
	bo := &backoff.ExponentialBackOff{InitialInterval: initial, RandomizationFactor: 0.5, Multiplier: 2, MaxInterval: maxInterval}
	bo.Reset()
	return bo
}

// turnContext marks the context of a replay's turns (turn.WithReplay).
func (c *Consumer) turnContext(ctx context.Context) context.Context {
	if c.cfg.Replay == nil {
		return ctx
	}
	return turn.WithReplay(ctx)
}
