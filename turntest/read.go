package turntest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// ReadAll is [Cluster.ReadAllContext] for a test, waiting at most timeout (> 0): it fails the
// test with what it got per partition and the last consumer error when too few records come.
func (c *Cluster) ReadAll(t testing.TB, topic string, wantAtLeast int, timeout time.Duration) []*sarama.ConsumerMessage {
	t.Helper()
	return c.readFor(t, topic, sarama.ReadCommitted, wantAtLeast, timeout)
}

// ReadAllUncommitted is [Cluster.ReadAllUncommittedContext] for a test, as ReadAll is.
func (c *Cluster) ReadAllUncommitted(t testing.TB, topic string, wantAtLeast int, timeout time.Duration) []*sarama.ConsumerMessage {
	t.Helper()
	return c.readFor(t, topic, sarama.ReadUncommitted, wantAtLeast, timeout)
}

// ReadAllContext reads topic from the oldest offset of every partition, as a read_committed
// consumer (records of open or aborted transactions are never returned), until it holds at
// least wantAtLeast (>= 0) records, and returns them sorted by partition then offset. It may
// return more than wantAtLeast, never fewer. Errors: a bad wantAtLeast, an unknown topic, a
// broker error, and ctx ending first, with what it got per partition and the last consumer
// error.
func (c *Cluster) ReadAllContext(ctx context.Context, topic string, wantAtLeast int) ([]*sarama.ConsumerMessage, error) {
	return c.read(ctx, topic, sarama.ReadCommitted, wantAtLeast)
}

// ReadAllUncommittedContext is [Cluster.ReadAllContext] as a read_uncommitted consumer: it
// also returns records of open and aborted transactions. A test uses it to show that what
// read_committed hides was written.
func (c *Cluster) ReadAllUncommittedContext(ctx context.Context, topic string, wantAtLeast int) ([]*sarama.ConsumerMessage, error) {
	return c.read(ctx, topic, sarama.ReadUncommitted, wantAtLeast)
}

// readFor is read for a test, bounded by timeout.
func (c *Cluster) readFor(t testing.TB, topic string, iso sarama.IsolationLevel, want int, timeout time.Duration) []*sarama.ConsumerMessage {
	t.Helper()
	if timeout <= 0 {
		t.Fatalf("turntest: read %q: timeout %v must be > 0", topic, timeout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	got, err := c.read(ctx, topic, iso, want)
	if err != nil && ctx.Err() != nil {
		t.Fatalf("%v (the timeout was %v)", err, timeout)
	}
	fatalIf(t, err)
	return got
}

func (c *Cluster) read(ctx context.Context, topic string, iso sarama.IsolationLevel, want int) ([]*sarama.ConsumerMessage, error) {
	if want < 0 {
		return nil, fmt.Errorf("turntest: read %q: wantAtLeast %d must be >= 0", topic, want)
	}
	cfg := c.Config()
	cfg.Consumer.IsolationLevel = iso
	cfg.Consumer.Return.Errors = true
	client, err := sarama.NewClient(c.brokers, cfg)
	if err != nil {
		return nil, fmt.Errorf("turntest: read %q: client: %w", topic, err)
	}
	defer client.Close()
	partitions, err := client.Partitions(topic)
	if err != nil {
		return nil, fmt.Errorf("turntest: read %q: partitions: %w", topic, err)
	}
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		return nil, fmt.Errorf("turntest: read %q: consumer: %w", topic, err)
	}
	defer consumer.Close()

	var (
		msgs    = make(chan *sarama.ConsumerMessage)
		errMu   sync.Mutex
		lastErr error
		done    = make(chan struct{})
		wg      sync.WaitGroup
	)
	defer func() {
		close(done)
		wg.Wait()
	}()
	for _, p := range partitions {
		pc, err := consumer.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			return nil, fmt.Errorf("turntest: read %q partition %d: %w", topic, p, err)
		}
		defer pc.AsyncClose() // runs before wg.Wait above: closes the channels we drain
		wg.Add(2)
		go func() {
			defer wg.Done()
			for m := range pc.Messages() {
				select {
				case msgs <- m:
				case <-done:
				}
			}
		}()
		go func() {
			defer wg.Done()
			for e := range pc.Errors() {
				errMu.Lock()
				lastErr = e
				errMu.Unlock()
			}
		}()
	}

	var got []*sarama.ConsumerMessage
	for len(got) < want {
		select {
		case m := <-msgs:
			got = append(got, m)
		case <-ctx.Done():
			errMu.Lock()
			e := lastErr
			errMu.Unlock()
			return nil, fmt.Errorf("turntest: read %q (%s): %d of at least %d records before the context ended (%w); per partition: %s; last consumer error: %v",
				topic, isoName(iso), len(got), want, ctx.Err(), perPartition(got, partitions), e)
		}
	}
	sort.Slice(got, func(i, j int) bool {
		if got[i].Partition != got[j].Partition {
			return got[i].Partition < got[j].Partition
		}
		return got[i].Offset < got[j].Offset
	})
	return got, nil
}

func isoName(iso sarama.IsolationLevel) string {
	if iso == sarama.ReadCommitted {
		return "read_committed"
	}
	return "read_uncommitted"
}

func perPartition(got []*sarama.ConsumerMessage, partitions []int32) string {
	n := make(map[int32]int, len(partitions))
	for _, m := range got {
		n[m.Partition]++
	}
	parts := make([]string, 0, len(partitions))
	for _, p := range partitions {
		parts = append(parts, fmt.Sprintf("p%d=%d", p, n[p]))
	}
	return strings.Join(parts, " ")
}

// CommittedOffset is [Cluster.CommittedOffsetContext] for a test: it fails the test on an
// error.
func (c *Cluster) CommittedOffset(t testing.TB, group, topic string, partition int32) int64 {
	t.Helper()
	offset, err := c.CommittedOffsetContext(context.Background(), group, topic, partition)
	fatalIf(t, err)
	return offset
}

// CommittedOffsetContext returns the offset group has committed for the partition of topic:
// the next offset the group will read, or -1 when it has committed none. ctx is checked before
// the broker is asked. Errors: ctx's, a broker error.
func (c *Cluster) CommittedOffsetContext(ctx context.Context, group, topic string, partition int32) (int64, error) {
	if err := ctx.Err(); err != nil {
		return -1, fmt.Errorf("turntest: committed offset of group %q: %w", group, err)
	}
	admin, err := c.clusterAdmin()
	if err != nil {
		return -1, fmt.Errorf("turntest: admin client: %w", err)
	}
	resp, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: {partition}})
	if errors.Is(err, sarama.ErrGroupIDNotFound) {
		// kfake answers GROUP_ID_NOT_FOUND for a group it never saw;
		// a real broker answers offset -1.
		return -1, nil
	}
	if err != nil {
		return -1, fmt.Errorf("turntest: committed offset of group %q on %s/%d: %w", group, topic, partition, err)
	}
	block := resp.GetBlock(topic, partition)
	if block == nil {
		return -1, nil
	}
	if block.Err != sarama.ErrNoError && !errors.Is(block.Err, sarama.ErrUnknownTopicOrPartition) {
		return -1, fmt.Errorf("turntest: committed offset of group %q on %s/%d: %w", group, topic, partition, block.Err)
	}
	return max(block.Offset, -1), nil
}

// RecordCount is [Cluster.RecordCountContext] for a test: it fails the test on an error.
func (c *Cluster) RecordCount(t testing.TB, topic string) int64 {
	t.Helper()
	n, err := c.RecordCountContext(context.Background(), topic)
	fatalIf(t, err)
	return n
}

// RecordCountContext returns the number of records written to topic: the sum over its
// partitions of the next offset to be written (the high-water mark). It counts records of
// aborted transactions and transaction markers too, so use it on topics written without
// transactions. A caller that has waited for its writers to finish uses it to prove there is
// no extra record, which [Cluster.ReadAllContext] (it returns once it has enough) cannot. ctx
// is checked before the brokers are asked. Errors: ctx's, an unknown topic, a broker error.
func (c *Cluster) RecordCountContext(ctx context.Context, topic string) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("turntest: count %q: %w", topic, err)
	}
	client, err := sarama.NewClient(c.brokers, c.Config())
	if err != nil {
		return 0, fmt.Errorf("turntest: count %q: client: %w", topic, err)
	}
	defer client.Close()
	partitions, err := client.Partitions(topic)
	if err != nil {
		return 0, fmt.Errorf("turntest: count %q: partitions: %w", topic, err)
	}
	var n int64
	for _, p := range partitions {
		hw, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			return 0, fmt.Errorf("turntest: count %q partition %d: %w", topic, p, err)
		}
		n += hw
	}
	return n, nil
}
