package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The run's topics.
const (
	topicRequests    = "chaos.requests"
	topicResults     = "chaos.results"
	topicDeadLetters = "chaos.requests.dlq"
	dlqPartitions    = 3
)

// createTopics creates the run's topics on the broker with a kgo client.
func createTopics(ctx context.Context, brokers []string, partitions int32) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 30000
	for name, n := range map[string]int32{topicRequests: partitions, topicResults: partitions, topicDeadLetters: dlqPartitions} {
		t := kmsg.NewCreateTopicsRequestTopic()
		t.Topic, t.NumPartitions, t.ReplicationFactor = name, n, 1
		req.Topics = append(req.Topics, t)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("create topics: %w", err)
	}
	for _, t := range resp.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return fmt.Errorf("create topic %s: %w", t.Topic, err)
		}
	}
	return nil
}

// endOffsets returns the high-water mark of every partition of topic.
func endOffsets(ctx context.Context, cl *kgo.Client, topic string, partitions int32) (map[int32]int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	for p := range partitions {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = p, -1, -1 // -1: the latest offset
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("list offsets of %s: %w", topic, err)
	}
	ends := make(map[int32]int64, partitions)
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return nil, fmt.Errorf("list offsets of %s[%d]: %w", topic, p.Partition, err)
			}
			ends[p.Partition] = p.Offset
		}
	}
	if len(ends) != int(partitions) {
		return nil, fmt.Errorf("list offsets of %s: %d of %d partitions answered", topic, len(ends), partitions)
	}
	return ends, nil
}

// sentinelKey is the key of the records readTopic writes at the end of each partition when it
// reads committed records only.
const sentinelKey = "chaos-sentinel"

// readTopic reads every record of topic from the start to the high-water mark it finds
// first, with a kgo client of its own (not sarama, which the members use). With committed it
// reads as a read_committed consumer: the records of aborted transactions are never seen.
// Then the last offsets of a partition may be transaction markers, which no fetch returns, so
// it first appends a sentinel record (outside any transaction) to every partition and reads
// each partition up to its sentinel, which it leaves out; a transaction a killed member left
// open holds the sentinel back until the coordinator aborts it (the transaction timeout).
func readTopic(ctx context.Context, brokers []string, topic string, partitions int32, committed bool) ([]*kgo.Record, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	admin, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return nil, err
	}
	var ends map[int32]int64
	if committed {
		ends = make(map[int32]int64, partitions)
		for p := range partitions {
			r, err := admin.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: p, Key: []byte(sentinelKey)}).First()
			if err != nil {
				admin.Close()
				return nil, fmt.Errorf("sentinel of %s[%d]: %w", topic, p, err)
			}
			ends[p] = r.Offset + 1
		}
	} else {
		ends, err = endOffsets(ctx, admin, topic, partitions)
	}
	admin.Close()
	if err != nil {
		return nil, err
	}
	start := make(map[int32]kgo.Offset, partitions)
	left := map[int32]int64{}
	for p, end := range ends {
		start[p] = kgo.NewOffset().AtStart()
		if end > 0 {
			left[p] = end
		}
	}
	opts := []kgo.Opt{kgo.SeedBrokers(brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: start}),
		kgo.FetchMaxWait(200 * time.Millisecond)}
	if committed {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var out []*kgo.Record
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("read %s: %d partitions not read to their end: %w", topic, len(left), err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if end, ok := left[r.Partition]; ok && r.Offset < end {
				if !committed || r.Offset+1 < end {
					out = append(out, r) // not the sentinel
				}
				if r.Offset+1 >= end {
					delete(left, r.Partition)
				}
			}
		})
	}
	return out, nil
}
