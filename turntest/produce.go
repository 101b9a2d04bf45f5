package turntest

import (
	"context"
	"fmt"
	"sort"
	"testing"

	"github.com/IBM/sarama"
)

// explicitPartition in ProducerMessage.Metadata asks the harness partitioner
// for that partition instead of hashing the key.
type explicitPartition int32

// harnessPartitioner places a record where ProduceTo asked, or else where a
// Java producer would (murmur2 of the key).
type harnessPartitioner struct {
	murmur2 sarama.Partitioner
}

func newHarnessPartitioner(topic string) sarama.Partitioner {
	return &harnessPartitioner{murmur2: sarama.NewMurmur2Partitioner(topic)}
}

func (p *harnessPartitioner) Partition(msg *sarama.ProducerMessage, numPartitions int32) (int32, error) {
	if want, ok := msg.Metadata.(explicitPartition); ok {
		if int32(want) < 0 || int32(want) >= numPartitions {
			return -1, fmt.Errorf("turntest: partition %d out of range: topic %q has %d partitions",
				want, msg.Topic, numPartitions)
		}
		return int32(want), nil
	}
	return p.murmur2.Partition(msg, numPartitions)
}

func (p *harnessPartitioner) RequiresConsistency() bool { return true }

func (p *harnessPartitioner) MessageRequiresConsistency(msg *sarama.ProducerMessage) bool {
	if _, ok := msg.Metadata.(explicitPartition); ok {
		return true
	}
	return msg.Key != nil
}

func (c *Cluster) syncProducer() (sarama.SyncProducer, error) {
	c.prodMu.Lock()
	defer c.prodMu.Unlock()
	if c.producer == nil && c.prodErr == nil {
		cfg := c.ProducerConfig()
		cfg.Producer.Partitioner = newHarnessPartitioner
		c.producer, c.prodErr = sarama.NewSyncProducer(c.brokers, cfg)
	}
	if c.prodErr != nil {
		return nil, fmt.Errorf("turntest: idempotent producer: %w", c.prodErr)
	}
	return c.producer, nil
}

// Produce is [Cluster.ProduceContext] for a test: it fails the test on an error.
func (c *Cluster) Produce(t testing.TB, topic, key string, value []byte, headers map[string]string) (partition int32, offset int64) {
	t.Helper()
	partition, offset, err := c.ProduceContext(context.Background(), topic, key, value, headers)
	fatalIf(t, err)
	return partition, offset
}

// ProduceContext writes one record to topic with the cluster's shared idempotent producer
// (see [Cluster.ProducerConfig]) and returns where it landed. The partition is the one a Java
// producer picks for key (murmur2); an empty key is sent as a null key and lands on a random
// partition. value may be nil (a tombstone). Headers are sent sorted by name. ctx is checked
// before the record is sent; the send itself is bounded by the producer's retries and
// timeouts. Errors: ctx's, a producer that cannot connect, a broker that does not acknowledge
// the record.
func (c *Cluster) ProduceContext(ctx context.Context, topic, key string, value []byte, headers map[string]string) (partition int32, offset int64, err error) {
	return c.send(ctx, newMessage(topic, key, value, headers))
}

// ProduceTo is [Cluster.ProduceToContext] for a test: it fails the test on an error.
func (c *Cluster) ProduceTo(t testing.TB, topic string, partition int32, key string, value []byte, headers map[string]string) (offset int64) {
	t.Helper()
	offset, err := c.ProduceToContext(context.Background(), topic, partition, key, value, headers)
	fatalIf(t, err)
	return offset
}

// ProduceToContext is [Cluster.ProduceContext] to an explicit partition, whatever the key. It
// returns the record's offset. Errors: those of ProduceContext, and a partition outside the
// topic.
func (c *Cluster) ProduceToContext(ctx context.Context, topic string, partition int32, key string, value []byte, headers map[string]string) (offset int64, err error) {
	msg := newMessage(topic, key, value, headers)
	msg.Metadata = explicitPartition(partition)
	_, offset, err = c.send(ctx, msg)
	return offset, err
}

func (c *Cluster) send(ctx context.Context, msg *sarama.ProducerMessage) (int32, int64, error) {
	if err := ctx.Err(); err != nil {
		return -1, -1, fmt.Errorf("turntest: produce to %q (key %q): %w", msg.Topic, keyString(msg), err)
	}
	producer, err := c.syncProducer()
	if err != nil {
		return -1, -1, err
	}
	p, o, err := producer.SendMessage(msg)
	if err != nil {
		return -1, -1, fmt.Errorf("turntest: produce to %q (key %q): %w", msg.Topic, keyString(msg), err)
	}
	return p, o, nil
}

func newMessage(topic, key string, value []byte, headers map[string]string) *sarama.ProducerMessage {
	msg := &sarama.ProducerMessage{Topic: topic, Headers: Headers(headers)}
	if key != "" {
		msg.Key = sarama.StringEncoder(key)
	}
	if value != nil {
		msg.Value = sarama.ByteEncoder(value)
	}
	return msg
}

// Headers converts a map to record headers sorted by name; nil for an empty
// map.
func Headers(m map[string]string) []sarama.RecordHeader {
	if len(m) == 0 {
		return nil
	}
	out := make([]sarama.RecordHeader, 0, len(m))
	for k, v := range m {
		out = append(out, sarama.RecordHeader{Key: []byte(k), Value: []byte(v)})
	}
	sort.Slice(out, func(i, j int) bool { return string(out[i].Key) < string(out[j].Key) })
	return out
}

// HeaderMap converts a consumed record's headers to a map; of repeated
// names the last one wins.
func HeaderMap(msg *sarama.ConsumerMessage) map[string]string {
	if msg == nil || len(msg.Headers) == 0 {
		return nil
	}
	m := make(map[string]string, len(msg.Headers))
	for _, h := range msg.Headers {
		if h != nil {
			m[string(h.Key)] = string(h.Value)
		}
	}
	return m
}

func keyString(msg *sarama.ProducerMessage) string {
	if msg.Key == nil {
		return ""
	}
	b, err := msg.Key.Encode()
	if err != nil {
		return "<unencodable>"
	}
	return string(b)
}
