package turntest

import (
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

func (c *Cluster) syncProducer(t testing.TB) sarama.SyncProducer {
	t.Helper()
	c.prodMu.Lock()
	defer c.prodMu.Unlock()
	if c.producer == nil && c.prodErr == nil {
		cfg := c.ProducerConfig()
		cfg.Producer.Partitioner = newHarnessPartitioner
		c.producer, c.prodErr = sarama.NewSyncProducer(c.brokers, cfg)
	}
	if c.prodErr != nil {
		t.Fatalf("turntest: idempotent producer: %v", c.prodErr)
	}
	return c.producer
}

// Produce writes one record to topic with the cluster's shared idempotent
// producer (see [Cluster.ProducerConfig]) and returns where it landed. The
// partition is the one a Java producer picks for key (murmur2); an empty key
// is sent as a null key and lands on a random partition. value may be nil
// (a tombstone). Headers are sent sorted by name. It fails the test when the
// broker does not acknowledge the record.
func (c *Cluster) Produce(t testing.TB, topic, key string, value []byte, headers map[string]string) (partition int32, offset int64) {
	t.Helper()
	msg := newMessage(topic, key, value, headers)
	return c.send(t, msg)
}

// ProduceTo is [Cluster.Produce] to an explicit partition, whatever the
// key. A partition outside the topic fails the test. It returns the
// record's offset.
func (c *Cluster) ProduceTo(t testing.TB, topic string, partition int32, key string, value []byte, headers map[string]string) (offset int64) {
	t.Helper()
	msg := newMessage(topic, key, value, headers)
	msg.Metadata = explicitPartition(partition)
	_, offset = c.send(t, msg)
	return offset
}

func (c *Cluster) send(t testing.TB, msg *sarama.ProducerMessage) (int32, int64) {
	t.Helper()
	p, o, err := c.syncProducer(t).SendMessage(msg)
	if err != nil {
		t.Fatalf("turntest: produce to %q (key %q): %v", msg.Topic, keyString(msg), err)
	}
	return p, o
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
