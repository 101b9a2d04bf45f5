package consumer

import (
	"time"

	"github.com/IBM/sarama"
)

// groupHandler is the sarama.ConsumerGroupHandler of a Consumer.
type groupHandler struct{ c *Consumer }

func (g groupHandler) Setup(sess sarama.ConsumerGroupSession) error {
	if err := g.c.refreshPartitions(); err != nil {
		g.c.log.Warn("refresh partition count", "err", err)
	}
	cm := &committer{stop: make(chan struct{}), done: make(chan struct{})}
	g.c.committer.Store(cm)
	go func() {
		defer close(cm.done)
		tick := time.NewTicker(g.c.cfg.CommitInterval)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				g.c.commitMarks(sess) // a commit that hangs is retried at the next tick
				g.c.checkProgress()
			case <-cm.stop:
				return
			case <-sess.Context().Done():
				return
			}
		}
	}()
	g.c.assigned(sess)
	return nil
}

func (g groupHandler) Cleanup(sess sarama.ConsumerGroupSession) error {
	if cm := g.c.committer.Swap(nil); cm != nil {
		close(cm.stop)
		<-cm.done
	}
	g.c.commit(sess, g.c.log)
	g.c.revoked(sess)
	return nil
}

func (g groupHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	return g.c.consumeClaim(sess, claim)
}

// consumeClaim feeds one partition's window until the claim is revoked or the session ends,
// then stops the partition (see the package doc, "Rebalances") and commits.
func (c *Consumer) consumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	p := newPartition(c, sess, tp{claim.Topic(), claim.Partition()})
	defer p.cancelTurns()
	c.stats.claims.Add(1) // before own makes Health ready: a reader of both sees the claim
	defer c.own(p, claim)()
	p.log.Debug("partition claimed", "offset", claim.InitialOffset())
	if err := c.refreshPartitions(); err != nil { // the topic may have grown: result placement
		p.log.Warn("refresh partition count", "err", err)
	}
	c.pauses.claimed(p.t)
	dispatched := make(chan struct{})
	go func() {
		defer close(dispatched)
		p.dispatch()
	}()

	reason := "revoked"
feed:
	for {
		select {
		case msg, ok := <-claim.Messages():
			if !ok {
				break feed
			}
			p.push(msg)
		case <-sess.Context().Done():
			reason = "session ended"
			break feed
		}
	}

	p.close()
	grace := c.cfg.RevokeGrace
	if c.runCtx.Err() != nil {
		reason, grace = "shutdown", c.cfg.ShutdownTimeout
	}
	window, running, sending := p.buffered()
	p.log.Info("partition closing; draining its turns", "reason", reason, "grace", grace.String(),
		"running", running, "publishing", sending, "window", window)
	timer := time.NewTimer(grace)
	defer timer.Stop()
	if !p.drain(timer.C) {
		p.log.Warn("turns in flight outlived the grace; cancelling them", "reason", reason, "grace", grace.String())
		p.stop()
		p.cancelTurns()
		if !p.drain(time.After(abandonWait)) {
			p.log.Warn("handler ignores cancellation or publishing is stuck; late outcomes will be dropped")
		}
	}
	p.stop()
	<-dispatched
	p.abandon()
	c.commit(sess, p.log)
	c.stats.released.Add(1)
	p.log.Info("partition released", "reason", reason)
	return nil
}
