package consumer

import (
	"context"

	"github.com/cenkalti/backoff/v5"

	"github.com/turnstile-go/turnstile/turn"
)

// DeadLetterNotifier is an optional interface of a Handler: one that keeps state of its own
// per request (the Temporal bridge, whose conversation workflow waits for every Sequence) is
// told of each request the consumer dead-letters itself, so that it can go on past it.
//
// DeadLettered is called once the consumer has decided to dead-letter a decoded request (its
// Handler failed Config.MaxAttempts times or panicked as often, returned a turn.KindPermanent
// error, was rate limited Config.MaxRateLimits times, TurnContextFunc panicked, its Result does
// not encode), with the dead letter's reason, before the dead letter is handed to the producer
// and so before the record's offset can commit (G2). It is not called for a record that did not
// decode to a request (no key, an invalid envelope, a key that differs from the request's
// conversation id: acting on the named conversation could reach another one, G7), nor for a
// result the results topic later refuses, nor when a replay publishes no dead letters.
//
// An error (or a panic) is retried after a backoff, as an unavailable store is, until
// DeadLettered returns nil or the partition is revoked or the member shuts down: the turn is
// then abandoned and the partition's next owner redoes the record, and calls DeadLettered again
// if it dead-letters it again, so DeadLettered must be idempotent. The dead letter is
// published once the call succeeded, once per outcome (a crash in between republishes it
// with the record, as any outcome). An error of turn.KindPermanent is not retried: it is logged
// and the dead letter goes on without the notice. ctx is the partition's: it ends on revoke
// and shutdown.
//
// A Handler that wraps another (a decorator) hides this interface unless it implements it too.
type DeadLetterNotifier interface {
	DeadLettered(ctx context.Context, req turn.Request, reason string) error
}

// notified tells the Handler, when it is a DeadLetterNotifier, of ob when ob is a dead letter
// of a decoded request. It returns false when the partition closed before a call succeeded:
// the turn is abandoned.
func (p *partition) notified(ob *outbound) bool {
	if ob == nil || ob.kind == outResult || ob.kind == outNothing || ob.req == nil {
		return true
	}
	n, ok := p.c.h.(DeadLetterNotifier)
	if !ok {
		return true
	}
	rl := &recordLog{p: p, msg: ob.r.msg, req: ob.req}
	var bo *backoff.ExponentialBackOff
	for {
		err := p.notifyGuarded(n, *ob.req, ob.reason)
		if err == nil {
			return true
		}
		if p.turns.Err() != nil {
			p.abandonTurn(rl)
			return false
		}
		if turn.Classify(err) == turn.KindPermanent {
			rl.get().Error("dead-letter notice refused for good; dead letter published without it", "err", err)
			return true
		}
		if bo == nil {
			bo = newBackoff(p.c.cfg.RetryBackoff, p.c.cfg.MaxRetryBackoff)
		}
		d := bo.NextBackOff()
		rl.get().Warn("dead-letter notice failed; retrying before the dead letter is published", "err", err, "retry_in", d.String())
		if !sleep(p.waits, d) {
			p.abandonTurn(rl)
			return false
		}
	}
}

// notifyGuarded calls n.DeadLettered with a panic recovered into an error.
func (p *partition) notifyGuarded(n DeadLetterNotifier, req turn.Request, reason string) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = turn.Recovered("DeadLetterNotifier", v)
		}
	}()
	return n.DeadLettered(p.turns, req, reason)
}
