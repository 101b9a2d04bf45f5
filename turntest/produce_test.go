package turntest_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/turntest"
)

// An idempotent producer configured as the project's producers are writes
// every record once, in order, with contiguous offsets.
func TestIdempotentProducer(t *testing.T) {
	t.Parallel()
	c := turntest.NewCluster(t, turntest.Options{Brokers: 3})
	topic := c.CreateTopic(t, "idem", 3)

	cfg := c.ProducerConfig()
	require.True(t, cfg.Producer.Idempotent)
	require.Equal(t, sarama.WaitForAll, cfg.Producer.RequiredAcks)
	require.Equal(t, 1, cfg.Net.MaxOpenRequests)
	require.True(t, cfg.Version.IsAtLeast(sarama.V0_11_0_0))
	require.NoError(t, cfg.Validate())

	p, err := sarama.NewSyncProducer(c.Brokers(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })

	const n = 30
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			_, _, err := p.SendMessage(&sarama.ProducerMessage{
				Topic: topic,
				Key:   sarama.StringEncoder(fmt.Sprintf("conv-%d", i%5)),
				Value: sarama.StringEncoder(fmt.Sprintf("v%d", i)),
			})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	// The harness's own producer is idempotent too.
	part, off := c.Produce(t, topic, "conv-0", []byte("last"), map[string]string{"h": "1"})

	got := c.ReadAll(t, topic, n+1, 30*time.Second)
	require.Len(t, got, n+1)
	seen := map[string]bool{}
	next := map[int32]int64{}
	for _, m := range got {
		require.False(t, seen[string(m.Value)], "duplicate %q", m.Value)
		seen[string(m.Value)] = true
		require.Equal(t, next[m.Partition], m.Offset, "offsets of partition %d are contiguous", m.Partition)
		next[m.Partition]++
		if string(m.Value) == "last" {
			require.Equal(t, part, m.Partition)
			require.Equal(t, off, m.Offset)
			require.Equal(t, map[string]string{"h": "1"}, turntest.HeaderMap(m))
		}
	}
	// One key, one partition.
	byKey := map[string]int32{}
	for _, m := range got {
		k := string(m.Key)
		if prev, ok := byKey[k]; ok {
			require.Equal(t, prev, m.Partition, "key %q on two partitions", k)
		}
		byKey[k] = m.Partition
	}
}

// ProduceTo writes to the partition asked for, whatever the key, and
// refuses a partition the topic does not have.
func TestProduceTo(t *testing.T) {
	t.Parallel()
	c := turntest.NewCluster(t, turntest.Options{Brokers: 1})
	topic := c.CreateTopic(t, "to", 4)
	for p := range int32(4) {
		require.Equal(t, int64(0), c.ProduceTo(t, topic, p, "same-key", []byte{byte(p)}, nil))
	}
	got := c.ReadAll(t, topic, 4, 30*time.Second)
	for i, m := range got {
		require.Equal(t, int32(i), m.Partition)
		require.Equal(t, []byte{byte(i)}, m.Value)
	}

	ft := &fakeT{TB: t}
	ft.run(func() { c.ProduceTo(ft, topic, 4, "k", nil, nil) })
	require.True(t, ft.failed)
	require.Contains(t, ft.msg, "out of range")
}

// javaMurmur2 is org.apache.kafka.common.utils.Utils.murmur2 transcribed
// with Java's int arithmetic, and javaPartition the Java producer's choice
// for a keyed record: toPositive(murmur2(key)) % numPartitions.
func javaMurmur2(data []byte) int32 {
	length := int32(len(data))
	const seed = int32(-1756908916) // 0x9747b28c
	const m = int32(0x5bd1e995)
	const r = 24
	h := seed ^ length
	length4 := length / 4
	for i := range length4 {
		i4 := i * 4
		k := int32(data[i4]) + int32(data[i4+1])<<8 + int32(data[i4+2])<<16 + int32(data[i4+3])<<24
		k *= m
		k ^= int32(uint32(k) >> r)
		k *= m
		h *= m
		h ^= k
	}
	tail := length &^ 3
	switch length % 4 {
	case 3:
		h ^= int32(data[tail+2]) << 16
		fallthrough
	case 2:
		h ^= int32(data[tail+1]) << 8
		fallthrough
	case 1:
		h ^= int32(data[tail])
		h *= m
	}
	h ^= int32(uint32(h) >> 13)
	h *= m
	h ^= int32(uint32(h) >> 15)
	return h
}

func javaPartition(key string, n int32) int32 { return (javaMurmur2([]byte(key)) & 0x7fffffff) % n }

// Keyed records land where a Java producer puts them: user-42 on 4 and
// order-1001 on 6 of 12 partitions.
func TestMurmur2Placement(t *testing.T) {
	t.Parallel()
	require.Equal(t, int32(4), javaPartition("user-42", 12))
	require.Equal(t, int32(6), javaPartition("order-1001", 12))

	c := turntest.NewCluster(t, turntest.Options{Brokers: 3})
	topic := c.CreateTopic(t, "murmur", 12)
	p, _ := c.Produce(t, topic, "user-42", []byte("a"), nil)
	require.Equal(t, int32(4), p)
	p, _ = c.Produce(t, topic, "order-1001", []byte("b"), nil)
	require.Equal(t, int32(6), p)

	// Many keys of every length class, through the project's producer
	// config (sarama.NewMurmur2Partitioner) rather than the harness's.
	prod, err := sarama.NewSyncProducer(c.Brokers(), c.ProducerConfig())
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, prod.Close()) })
	for i := range 40 {
		key := strings.Repeat("k", i%7) + fmt.Sprint(i*7919)
		p, _, err := prod.SendMessage(&sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(key), Value: sarama.StringEncoder("x")})
		require.NoError(t, err)
		require.Equal(t, javaPartition(key, 12), p, "key %q", key)
	}

	// sarama's default partitioner (FNV-1a) disagrees for at least one of
	// the two keys: using it would break Java interop.
	fnv := sarama.NewHashPartitioner(topic)
	p1, err := fnv.Partition(&sarama.ProducerMessage{Key: sarama.StringEncoder("user-42")}, 12)
	require.NoError(t, err)
	p2, err := fnv.Partition(&sarama.ProducerMessage{Key: sarama.StringEncoder("order-1001")}, 12)
	require.NoError(t, err)
	require.False(t, p1 == 4 && p2 == 6, "FNV-1a happens to agree on both keys")
}
