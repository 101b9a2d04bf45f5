package turntest_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/turntest"
)

// kcat (librdkafka) and sarama read each other's records, keys and headers
// through the cluster.
func TestKcatRoundTrip(t *testing.T) {
	t.Parallel()
	c := turntest.NewCluster(t, turntest.Options{Brokers: 3})
	topic := c.CreateTopic(t, "kcat", 3)

	// kcat -> sarama
	turntest.KcatInput(t, []byte("from-kcat\n"), "-b", c.BrokerList(), "-P", "-t", topic,
		"-k", "conv-1", "-H", "tenant=acme", "-H", "trace=abc")
	// sarama -> kcat
	part, off := c.Produce(t, topic, "conv-2", []byte("from-sarama"), map[string]string{"tenant": "globex", "x": "y"})

	got := c.ReadAll(t, topic, 2, 30*time.Second)
	var fromKcat bool
	for _, m := range got {
		if string(m.Value) == "from-kcat" {
			fromKcat = true
			require.Equal(t, "conv-1", string(m.Key))
			require.Equal(t, map[string]string{"tenant": "acme", "trace": "abc"}, turntest.HeaderMap(m))
		}
	}
	require.True(t, fromKcat, "sarama did not read kcat's record: %v", values(got))

	out := turntest.Kcat(t, "-b", c.BrokerList(), "-C", "-t", topic, "-e", "-q",
		"-f", `%p|%o|%k|%s|%h\n`)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2, "kcat output:\n%s", out)
	require.Contains(t, lines, fmt.Sprintf("%d|%d|conv-2|from-sarama|tenant=globex,x=y", part, off))
	require.True(t, slices.ContainsFunc(lines, func(l string) bool {
		return strings.HasSuffix(l, "|conv-1|from-kcat|tenant=acme,trace=abc")
	}), "kcat output:\n%s", out)
}

// librdkafka's Java-compatible partitioner (murmur2_random) agrees with the
// harness's: user-42 on 4 and order-1001 on 6 of 12 partitions.
func TestKcatMurmur2Agrees(t *testing.T) {
	t.Parallel()
	c := turntest.NewCluster(t, turntest.Options{Brokers: 3})
	topic := c.CreateTopic(t, "kcat-murmur", 12)
	keys := []string{"user-42", "order-1001", "a", "ab", "abc", "abcd", "conversation-7f3a"}
	for _, k := range keys {
		turntest.KcatInput(t, []byte(k+"\n"), "-b", c.BrokerList(), "-P", "-t", topic, "-k", k,
			"-X", "topic.partitioner=murmur2_random")
	}
	got := c.ReadAll(t, topic, len(keys), 30*time.Second)
	for _, m := range got {
		k := string(m.Key)
		require.Equal(t, javaPartition(k, 12), m.Partition, "key %q", k)
		p, _ := c.Produce(t, topic, k, []byte("sarama"), nil)
		require.Equal(t, m.Partition, p, "key %q: sarama and librdkafka disagree", k)
		switch k {
		case "user-42":
			require.Equal(t, int32(4), m.Partition)
		case "order-1001":
			require.Equal(t, int32(6), m.Partition)
		}
	}
}
