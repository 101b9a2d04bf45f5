package turntest_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/turntest"
)

// recorder is a ConsumerGroupHandler that hands every record to the test and
// marks the ones mark accepts (all when mark is nil). It never commits: the
// test calls Commit on the session.
type recorder struct {
	mark func(*sarama.ConsumerMessage) bool
	msgs chan *sarama.ConsumerMessage

	mu          sync.Mutex
	sess        sarama.ConsumerGroupSession
	setups      int
	cleanups    int
	claimStarts int
}

func newRecorder(mark func(*sarama.ConsumerMessage) bool) *recorder {
	return &recorder{mark: mark, msgs: make(chan *sarama.ConsumerMessage, 1000)}
}

func (r *recorder) Setup(s sarama.ConsumerGroupSession) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sess = s
	r.setups++
	return nil
}

func (r *recorder) Cleanup(sarama.ConsumerGroupSession) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cleanups++
	return nil
}

func (r *recorder) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	r.mu.Lock()
	r.claimStarts++
	r.mu.Unlock()
	// With the cooperative protocol a revoked claim ends by closing
	// Messages(); the session context only ends with the session.
	for m := range claim.Messages() {
		if r.mark == nil || r.mark(m) {
			s.MarkMessage(m, "")
		}
		select {
		case r.msgs <- m:
		case <-s.Context().Done():
			return nil
		}
	}
	return nil
}

func (r *recorder) session() sarama.ConsumerGroupSession {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sess
}

func (r *recorder) counts() (setups, cleanups, claimStarts int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.setups, r.cleanups, r.claimStarts
}

// claims returns the member's partitions of topic, sorted; nil before the
// first session.
func (r *recorder) claims(topic string) []int32 {
	s := r.session()
	if s == nil {
		return nil
	}
	ps := slices.Clone(s.Claims()[topic])
	slices.Sort(ps)
	return ps
}

// take receives n records or fails the test after timeout.
func (r *recorder) take(t *testing.T, n int, timeout time.Duration) []*sarama.ConsumerMessage {
	t.Helper()
	var got []*sarama.ConsumerMessage
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for len(got) < n {
		select {
		case m := <-r.msgs:
			got = append(got, m)
		case <-timer.C:
			t.Fatalf("received %d of %d records within %v", len(got), n, timeout)
		}
	}
	return got
}

// member is one consumer group member running Consume in a loop.
type member struct {
	group  sarama.ConsumerGroup
	rec    *recorder
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

func startMember(t *testing.T, c *turntest.Cluster, groupID, topic string, rec *recorder) *member {
	t.Helper()
	g, err := sarama.NewConsumerGroup(c.Brokers(), groupID, c.Config())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	m := &member{group: g, rec: rec, cancel: cancel, done: make(chan error, 1)}
	go func() {
		for {
			err := g.Consume(ctx, []string{topic}, rec)
			if ctx.Err() != nil || errors.Is(err, sarama.ErrClosedConsumerGroup) {
				m.done <- nil
				return
			}
			if err != nil {
				m.done <- err
				return
			}
		}
	}()
	t.Cleanup(func() { m.stop(t) })
	return m
}

// stop leaves the group: marks that were not committed are dropped.
func (m *member) stop(t *testing.T) {
	m.once.Do(func() {
		m.cancel()
		require.NoError(t, m.group.Close())
		require.NoError(t, <-m.done)
	})
}

func allPartitions(n int32) []int32 {
	ps := make([]int32, n)
	for i := range ps {
		ps[i] = int32(i)
	}
	return ps
}

// A cooperative-sticky group member consumes; with AutoCommit off nothing
// is committed until Commit, Commit stores exactly what was marked (the next
// offset to read), Close drops marks that were not committed, and the next
// member resumes from the committed offsets. A second member then takes
// half of the 6 partitions.
func TestGroupCommitsWhatWasMarked(t *testing.T) {
	t.Parallel()
	c := turntest.NewCluster(t, turntest.Options{Brokers: 3})
	topic := c.CreateTopic(t, "group", 6)
	group := c.Unique("g")
	for p := range int32(6) {
		c.ProduceTo(t, topic, p, "k", []byte("done"), nil)
		c.ProduceTo(t, topic, p, "k", []byte("hold"), nil)
	}

	cfg := c.Config()
	require.False(t, cfg.Consumer.Offsets.AutoCommit.Enable)
	require.Equal(t, sarama.CooperativeStickyBalanceStrategyName, cfg.Consumer.Group.Rebalance.GroupStrategies[0].Name())

	a := newRecorder(func(m *sarama.ConsumerMessage) bool { return string(m.Value) == "done" })
	ma := startMember(t, c, group, topic, a)
	got := a.take(t, 12, 30*time.Second)
	require.Len(t, got, 12)
	require.Equal(t, allPartitions(6), a.claims(topic))
	for p := range int32(6) {
		require.Equal(t, int64(-1), c.CommittedOffset(t, group, topic, p), "partition %d committed before Commit", p)
	}

	a.session().Commit()
	for p := range int32(6) {
		require.Equal(t, int64(1), c.CommittedOffset(t, group, topic, p), "partition %d", p)
	}

	// A mark that is never committed is lost on Close.
	a.session().MarkOffset(topic, 0, 2, "")
	ma.stop(t)
	require.Equal(t, int64(1), c.CommittedOffset(t, group, topic, 0))

	// The next member starts at the committed offsets: the held records
	// come again, nothing else.
	b := newRecorder(nil)
	startMember(t, c, group, topic, b)
	again := b.take(t, 6, 30*time.Second)
	for _, m := range again {
		require.Equal(t, "hold", string(m.Value))
		require.Equal(t, int64(1), m.Offset)
	}

	// A second member joins: cooperative-sticky gives each 3 partitions.
	d := newRecorder(nil)
	startMember(t, c, group, topic, d)
	require.Eventually(t, func() bool {
		pb, pd := b.claims(topic), d.claims(topic)
		if len(pb) != 3 || len(pd) != 3 {
			return false
		}
		both := append(slices.Clone(pb), pd...)
		slices.Sort(both)
		return slices.Equal(both, allPartitions(6))
	}, 30*time.Second, 20*time.Millisecond, "two members split 6 partitions 3/3")

	// The first member kept its session through the cooperative rebalance.
	setups, cleanups, _ := b.counts()
	require.Equal(t, 1, setups)
	require.Equal(t, 0, cleanups)

	// New records reach whichever member owns their partition.
	for p := range int32(6) {
		c.ProduceTo(t, topic, p, "k", []byte("after"), nil)
	}
	var fromB, fromD []*sarama.ConsumerMessage
	require.Eventually(t, func() bool {
		for {
			select {
			case m := <-b.msgs:
				fromB = append(fromB, m)
			case m := <-d.msgs:
				fromD = append(fromD, m)
			default:
				return len(fromB)+len(fromD) >= 6
			}
		}
	}, 30*time.Second, 20*time.Millisecond)
	for _, m := range fromB {
		require.Contains(t, b.claims(topic), m.Partition)
	}
	for _, m := range fromD {
		require.Contains(t, d.claims(topic), m.Partition)
	}
}

// PauseAll stops delivery without a rebalance, for longer than the session
// timeout (heartbeats go on), and ResumeAll picks up where it stopped.
func TestGroupPauseResume(t *testing.T) {
	t.Parallel()
	c := turntest.NewCluster(t, turntest.Options{Brokers: 3})
	topic := c.CreateTopic(t, "pause", 3)
	group := c.Unique("g")
	for p := range int32(3) {
		c.ProduceTo(t, topic, p, "k", []byte("before"), nil)
	}
	r := newRecorder(nil)
	m := startMember(t, c, group, topic, r)
	r.take(t, 3, 30*time.Second)
	gen := r.session().GenerationID()
	member := r.session().MemberID()

	m.group.PauseAll()
	// A fetch already in flight may still deliver (the consumer must hold
	// such records); give it time to return before producing. This wait
	// sets the scene, it asserts nothing (a second: fetches wait at most
	// MaxWaitTime, 100 ms, but a loaded machine is slow to hand them over).
	time.Sleep(time.Second)
	for p := range int32(3) {
		c.ProduceTo(t, topic, p, "k", []byte("while-paused"), nil)
	}
	require.Never(t, func() bool { return len(r.msgs) > 0 }, 2*c.SessionTimeout(), 20*time.Millisecond,
		"a record was delivered while paused")

	s := r.session()
	require.Equal(t, gen, s.GenerationID(), "no rebalance while paused")
	require.Equal(t, member, s.MemberID())
	setups, cleanups, starts := r.counts()
	require.Equal(t, [3]int{1, 0, 3}, [3]int{setups, cleanups, starts})

	m.group.ResumeAll()
	got := r.take(t, 3, 30*time.Second)
	for _, msg := range got {
		require.Equal(t, "while-paused", string(msg.Value))
	}
	require.Equal(t, gen, r.session().GenerationID())
	setups, cleanups, starts = r.counts()
	require.Equal(t, [3]int{1, 0, 3}, [3]int{setups, cleanups, starts})
}
