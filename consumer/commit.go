package consumer

import (
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
)

// ownedPartition is a claimed partition as the health report and the lag gauge see it.
type ownedPartition struct {
	p     *partition
	claim sarama.ConsumerGroupClaim
	// committed is the offset this member last committed for the partition (the next to
	// read), or its claim's initial offset; -1 while unknown.
	committed atomic.Int64
}

// lag returns the partition's high-water mark (from the last fetch) minus its committed
// offset; false while either is unknown.
func (op *ownedPartition) lag() (int64, bool) {
	hw, committed := op.claim.HighWaterMarkOffset(), op.committed.Load()
	if committed < 0 {
		return 0, false
	}
	return max(0, hw-committed), true
}

// own registers a claimed partition; the returned func unregisters it.
func (c *Consumer) own(p *partition, claim sarama.ConsumerGroupClaim) func() {
	op := &ownedPartition{p: p, claim: claim}
	op.committed.Store(max(-1, claim.InitialOffset()))
	c.health.partsMu.Lock()
	if c.health.parts == nil {
		c.health.parts = map[tp]*ownedPartition{}
	}
	c.health.parts[p.t] = op
	c.health.partsMu.Unlock()
	return func() {
		c.health.partsMu.Lock()
		if c.health.parts[p.t] == op {
			delete(c.health.parts, p.t)
		}
		c.health.partsMu.Unlock()
	}
}

// owned returns the claimed partitions.
func (c *Consumer) owned() []*ownedPartition {
	c.health.partsMu.Lock()
	defer c.health.partsMu.Unlock()
	out := make([]*ownedPartition, 0, len(c.health.parts))
	for _, op := range c.health.parts {
		out = append(out, op)
	}
	return out
}

// commitMarks commits the session's marks and records, per owned partition, the offset the
// commit carried (for the lag gauge) and the commit's duration. It returns false when the
// commit did not finish within commitTimeout.
func (c *Consumer) commitMarks(sess sarama.ConsumerGroupSession) bool {
	parts := c.owned()
	marks := make([]int64, len(parts))
	for i, op := range parts {
		marks[i] = op.p.marked()
	}
	began := time.Now()
	if !within(commitTimeout, sess.Commit) {
		return false
	}
	if m := c.meters; m != nil {
		m.commitDuration.Record(c.runCtx, since(began), m.base)
	}
	for i, op := range parts {
		if marks[i] >= 0 {
			op.committed.Store(marks[i])
		}
	}
	c.stats.commits.Add(1)
	c.health.moved()
	return true
}

// marked returns the offset marked for commit (the watermark), -1 before any.
func (p *partition) marked() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if last := p.w.LastDone(); last >= 0 && !p.abandoned {
		return last + 1
	}
	return -1
}

// committer commits a session's marks every Config.CommitInterval until Cleanup stops it.
type committer struct {
	stop chan struct{}
	done chan struct{}
}

// commitTimeout bounds a commit on revoke or shutdown: sarama's Commit takes no context and,
// against a broker that hangs, waits out its network timeouts. A commit that does not finish
// in time is left to finish in the background; the marks are redone by the next owner at
// worst (G2 holds: nothing is committed early, at most late).
const commitTimeout = 5 * time.Second

func (c *Consumer) commit(sess sarama.ConsumerGroupSession, log *slog.Logger) {
	if !c.commitMarks(sess) {
		log.Warn("commit did not finish in time; continuing", "timeout", commitTimeout.String())
		if c.runCtx.Err() != nil {
			c.shutdownFailed(fmt.Errorf("a commit did not finish within %s", commitTimeout))
		}
	}
}
