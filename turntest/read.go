package turntest

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// ReadAll reads topic from the oldest offset of every partition, as a
// read_committed consumer (records of open or aborted transactions are
// never returned), until it holds at least wantAtLeast records, and returns
// them sorted by partition then offset. It may return more than
// wantAtLeast, never fewer: when timeout passes first it fails the test
// with what it got per partition and the last consumer error. wantAtLeast
// must be >= 0 and timeout > 0.
func (c *Cluster) ReadAll(t testing.TB, topic string, wantAtLeast int, timeout time.Duration) []*sarama.ConsumerMessage {
	t.Helper()
	return c.read(t, topic, sarama.ReadCommitted, wantAtLeast, timeout)
}

// ReadAllUncommitted is [Cluster.ReadAll] as a read_uncommitted consumer:
// it also returns records of open and aborted transactions. A test uses it
// to show that what read_committed hides was written.
func (c *Cluster) ReadAllUncommitted(t testing.TB, topic string, wantAtLeast int, timeout time.Duration) []*sarama.ConsumerMessage {
	t.Helper()
	return c.read(t, topic, sarama.ReadUncommitted, wantAtLeast, timeout)
}

func (c *Cluster) read(t testing.TB, topic string, iso sarama.IsolationLevel, want int, timeout time.Duration) []*sarama.ConsumerMessage {
	t.Helper()
	if want < 0 || timeout <= 0 {
		t.Fatalf("turntest: read %q: wantAtLeast %d must be >= 0 and timeout %v > 0", topic, want, timeout)
	}
	cfg := c.Config()
	cfg.Consumer.IsolationLevel = iso
	cfg.Consumer.Return.Errors = true
	client, err := sarama.NewClient(c.brokers, cfg)
	if err != nil {
		t.Fatalf("turntest: read %q: client: %v", topic, err)
	}
	defer client.Close()
	partitions, err := client.Partitions(topic)
	if err != nil {
		t.Fatalf("turntest: read %q: partitions: %v", topic, err)
	}
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		t.Fatalf("turntest: read %q: consumer: %v", topic, err)
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
			t.Fatalf("turntest: read %q partition %d: %v", topic, p, err)
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
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for len(got) < want {
		select {
		case m := <-msgs:
			got = append(got, m)
		case <-timer.C:
			errMu.Lock()
			e := lastErr
			errMu.Unlock()
			t.Fatalf("turntest: read %q (%s): %d of at least %d records within %v; per partition: %s; last consumer error: %v",
				topic, isoName(iso), len(got), want, timeout, perPartition(got, partitions), e)
		}
	}
	sort.Slice(got, func(i, j int) bool {
		if got[i].Partition != got[j].Partition {
			return got[i].Partition < got[j].Partition
		}
		return got[i].Offset < got[j].Offset
	})
	return got
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

// CommittedOffset returns the offset group has committed for the partition
// of topic: the next offset the group will read, or -1 when it has
// committed none. It fails the test on a broker error.
func (c *Cluster) CommittedOffset(t testing.TB, group, topic string, partition int32) int64 {
	t.Helper()
	admin, err := c.clusterAdmin()
	if err != nil {
		t.Fatalf("turntest: admin client: %v", err)
	}
	resp, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: {partition}})
	if errors.Is(err, sarama.ErrGroupIDNotFound) {
		// kfake answers GROUP_ID_NOT_FOUND for a group it never saw;
		// a real broker answers offset -1.
		return -1
	}
	if err != nil {
		t.Fatalf("turntest: committed offset of group %q on %s/%d: %v", group, topic, partition, err)
	}
	block := resp.GetBlock(topic, partition)
	if block == nil {
		return -1
	}
	if block.Err != sarama.ErrNoError && !errors.Is(block.Err, sarama.ErrUnknownTopicOrPartition) {
		t.Fatalf("turntest: committed offset of group %q on %s/%d: %v", group, topic, partition, block.Err)
	}
	if block.Offset < 0 {
		return -1
	}
	return block.Offset
}

// RecordCount returns the number of records written to topic: the sum over its partitions
// of the next offset to be written (the high-water mark). It counts records of aborted
// transactions and transaction markers too, so use it on topics written without
// transactions. A test that has waited for its writers to finish uses it to prove there is
// no extra record, which [Cluster.ReadAll] (it returns once it has enough) cannot.
func (c *Cluster) RecordCount(t testing.TB, topic string) int64 {
	t.Helper()
	client, err := sarama.NewClient(c.brokers, c.Config())
	if err != nil {
		t.Fatalf("turntest: count %q: client: %v", topic, err)
	}
	defer client.Close()
	partitions, err := client.Partitions(topic)
	if err != nil {
		t.Fatalf("turntest: count %q: partitions: %v", topic, err)
	}
	var n int64
	for _, p := range partitions {
		hw, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			t.Fatalf("turntest: count %q partition %d: %v", topic, p, err)
		}
		n += hw
	}
	return n
}
