package consumer

import (
	"context"
	"slices"
	"time"

	"github.com/IBM/sarama"
)

// Log lines of the member's life, each logged once, by the layer that owns the event: the
// assignment and revocation of partitions at each rebalance, and the drain at shutdown.

// assigned notes a new group session (a rebalance) and logs its partitions.
func (c *Consumer) assigned(sess sarama.ConsumerGroupSession) {
	c.health.generation.Store(sess.GenerationID())
	c.health.inGroup.Store(true)
	c.health.moved()
	if m := c.meters; m != nil {
		m.rebalances.Add(c.runCtx, 1, m.base)
	}
	parts := slices.Clone(sess.Claims()[c.cfg.RequestsTopic])
	slices.Sort(parts)
	c.log.Info("partitions assigned", "group", c.cfg.GroupID, "member", sess.MemberID(),
		"generation", sess.GenerationID(), "topic", c.cfg.RequestsTopic, "partitions", parts)
}

// revoked notes the end of a group session, once its partitions are released and committed.
func (c *Consumer) revoked(sess sarama.ConsumerGroupSession) {
	c.health.inGroup.Store(false)
	parts := slices.Clone(sess.Claims()[c.cfg.RequestsTopic])
	slices.Sort(parts)
	c.log.Info("partitions revoked", "group", c.cfg.GroupID, "member", sess.MemberID(),
		"generation", sess.GenerationID(), "topic", c.cfg.RequestsTopic, "partitions", parts)
}

// logDrain logs when Run's context ends that the drain starts, and, through the func it
// returns (deferred by Run), that it ended.
func (c *Consumer) logDrain(ctx context.Context) func() {
	began := make(chan time.Time, 1)
	stop := context.AfterFunc(ctx, func() {
		began <- time.Now()
		c.log.Info("shutdown: draining turns in flight", "group", c.cfg.GroupID,
			"turns_in_flight", len(c.sem), "timeout", c.cfg.ShutdownTimeout.String())
	})
	return func() {
		if stop() { // Run ended without its context ending: no drain
			return
		}
		t := <-began
		st := c.Stats()
		c.log.Info("shutdown: drained; left the group", "group", c.cfg.GroupID, "took", time.Since(t).String(),
			"records", st.Records, "abandoned", st.Abandoned)
	}
}
