package consumer

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/turnstile-go/turnstile/turn"
)

// serveBatch serves r and the records of its key taken with it (r.batch, in offset order) for
// a BatchHandler: the longest run of them from r that decode is handed over in one
// HandleBatch call and completed in offset order; whatever is left (a record that does not
// decode and those after it, or all of them when the call fails) is served one by one, the
// usual way. Once one record is left to the partition's next owner, so are the ones after it:
// a key's records are handed off in offset order or not at all.
func (p *partition) serveBatch(r *record) {
	recs := append([]*record{r}, r.batch...)
	r.batch = nil
	reqs := p.decodeBatch(recs)
	if len(reqs) >= 2 && p.handOffBatch(recs[:len(reqs)], reqs) {
		for i, x := range recs[:len(reqs)] {
			if !p.handoff(x, nil) {
				p.leaveRest(recs[i+1:])
				return
			}
		}
		recs = recs[len(reqs):]
	}
	for i, x := range recs {
		if !p.serveOne(x) {
			p.leaveRest(recs[i+1:])
			return
		}
	}
}

// leaveRest leaves the records of a batch after one that was left to the next owner to the
// next owner too.
func (p *partition) leaveRest(recs []*record) {
	for range recs {
		p.endAbandoned()
	}
}

// decodeBatch decodes the records of a batch up to the first that does not decode (which,
// with the rest, is served one by one and dead-lettered there). A panic in the decoder ends
// the run there too.
func (p *partition) decodeBatch(recs []*record) (reqs []turn.Request) {
	defer func() {
		if v := recover(); v != nil {
			p.log.Warn("decoder panicked in a batch; serving the rest one by one", "panic", fmt.Sprint(v))
		}
	}()
	for _, r := range recs {
		req, err := p.decodeGuarded(r.msg)
		if err != nil {
			return reqs
		}
		reqs = append(reqs, req)
	}
	return reqs
}

// batchSpansKey is the context key under which handOffBatch gives HandleBatch the process
// span of each of its requests, by index (see BatchRequestContext).
type batchSpansKey struct{}

// BatchRequestContext returns the context for what a BatchHandler does on behalf of reqs[i],
// the request at index i (from 0) of the HandleBatch call that got ctx: with telemetry on
// (Config.Telemetry), ctx with that request's own process span current, so that the spans and
// trace headers made for it (workflow.Bridge's) continue its record's trace, as under Handle;
// one ctx cannot carry the spans of several records. Otherwise (telemetry off, a ctx that is
// not a HandleBatch call's, i out of range) it returns ctx.
func BatchRequestContext(ctx context.Context, i int) context.Context {
	spans, _ := ctx.Value(batchSpansKey{}).([]trace.Span)
	if i < 0 || i >= len(spans) {
		return ctx
	}
	return trace.ContextWithSpan(ctx, spans[i])
}

// handOffBatch hands reqs (recs' requests) to the BatchHandler in one call, beside the other
// turns of the member (the solo gate, shared) and within Config.TurnTimeout, with a process
// span and the turn metrics of each record when telemetry is on. It reports whether the
// handler took them; a failure is logged and the records are then served one by one.
func (p *partition) handOffBatch(recs []*record, reqs []turn.Request) bool {
	ctx, t, m := p.c.turnContext(p.turns), p.c.tracing, p.c.meters
	var spans []trace.Span
	if t != nil {
		spans = make([]trace.Span, len(recs))
		for i, r := range recs {
			_, spans[i] = t.startProcess(ctx, r.msg)
			request(spans[i], &reqs[i])
		}
		ctx = context.WithValue(ctx, batchSpansKey{}, spans)
	}
	began := time.Now()
	err := p.callBatch(ctx, reqs)
	ok := err == nil
	for _, span := range spans {
		endProcess(span, nil, ok, 1)
	}
	if !ok {
		if p.turns.Err() == nil {
			p.log.Warn("batch hand-off failed; handing its records off one by one", "records", len(reqs),
				"offset", recs[0].msg.Offset, "kind", turn.Classify(err).String(), "err", err)
		}
		return false
	}
	p.c.stats.turns.Add(int64(len(reqs)))
	p.c.stats.batches.Add(1)
	p.c.stats.batched.Add(int64(len(reqs)))
	if m != nil {
		outcome := outcomeOf(nil, true)
		for range reqs {
			m.attempts.Add(ctx, 1, m.kind(turn.KindNone))
			m.turnDuration.Record(ctx, since(began), m.outcomeAttrs(outcome))
			m.turns.Add(ctx, 1, m.outcomeAttrs(outcome))
		}
	}
	return true
}

// callBatch calls HandleBatch with the optional TurnTimeout, holding the solo gate shared; a
// panic in it is an error.
func (p *partition) callBatch(ctx context.Context, reqs []turn.Request) (err error) {
	p.c.solo.enter()
	defer p.c.solo.leave()
	if d := p.c.cfg.TurnTimeout; d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, d, turn.ErrTurnTimeout)
		defer cancel()
	}
	defer func() {
		if v := recover(); v != nil {
			err = turn.Recovered("handler", v)
		}
	}()
	return p.c.batcher.HandleBatch(ctx, reqs)
}
