package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/turntest"
)

// dlq list prints the time and the conversation of each dead letter, oldest first across
// partitions (not partition by partition), and filters by conversation; so does its JSON.
func TestDLQListTimeOrder(t *testing.T) {
	t.Parallel()
	kc := turntest.NewCluster(t, turntest.Options{})
	dlq := kc.CreateTopic(t, "dlq", 3)
	cfg := kc.ProducerConfig()
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	producer, err := sarama.NewSyncProducer(kc.Brokers(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = producer.Close() })
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond).UTC()
	// Partition order 0, 1, 2 is not time order: c-b (0), c-c (1), c-a (2), then c-d (0).
	letters := []struct {
		partition int32
		conv      string
		at        time.Time
	}{
		{0, "c-b", base.Add(2 * time.Minute)},
		{1, "c-c", base.Add(3 * time.Minute)},
		{2, "c-a", base.Add(1 * time.Minute)},
		{0, "c-d", base.Add(4 * time.Minute)},
	}
	for i, l := range letters {
		_, _, err := producer.SendMessage(&sarama.ProducerMessage{Topic: dlq, Partition: l.partition, Key: sarama.StringEncoder(l.conv),
			Value: sarama.StringEncoder("{}"), Timestamp: l.at, Headers: []sarama.RecordHeader{
				{Key: []byte(consumer.HeaderRequestID), Value: fmt.Appendf(nil, "r-%d", i)},
				{Key: []byte(consumer.HeaderConversationID), Value: []byte(l.conv)},
				{Key: []byte(consumer.HeaderReason), Value: []byte("bug 42")},
				{Key: []byte(consumer.HeaderAttempts), Value: []byte("3")},
			}})
		require.NoError(t, err)
	}
	brokers := "--brokers=" + kc.BrokerList()

	out := ok(t, "dlq", "list", brokers, "--topic="+dlq)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 5, out)
	header := strings.Fields(lines[0])
	require.Equal(t, []string{"TIME", "CONVERSATION"}, header[:2], out)
	var convs []string
	var times []time.Time
	for _, line := range lines[1:] {
		cells := strings.Fields(line)
		at, err := time.Parse(time.RFC3339, cells[0])
		require.NoError(t, err, line)
		times = append(times, at)
		convs = append(convs, cells[1])
	}
	require.Equal(t, []string{"c-a", "c-b", "c-c", "c-d"}, convs, "in time order:\n%s", out)
	require.True(t, times[0].Equal(base.Add(time.Minute).Truncate(time.Second)), "the TIME column is the dead letter's time: %s", times[0])
	require.IsNonDecreasing(t, times)

	var listed []letterJSON
	require.NoError(t, json.Unmarshal([]byte(ok(t, "dlq", "list", brokers, "--topic="+dlq, "--json")), &listed))
	require.Len(t, listed, 4)
	for i, l := range listed {
		require.Equal(t, convs[i], l.ConversationID)
		if i > 0 {
			require.False(t, l.Time.Before(listed[i-1].Time), "JSON in time order too")
		}
	}
	require.True(t, listed[0].Time.Equal(base.Add(time.Minute)))

	out = ok(t, "dlq", "list", brokers, "--topic="+dlq, "--conversation=c-c")
	require.Contains(t, out, "c-c")
	require.NotContains(t, out, "c-a")
	require.Len(t, strings.Split(strings.TrimSpace(out), "\n"), 2, out)
}
