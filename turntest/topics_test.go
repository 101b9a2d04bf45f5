package turntest_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/turntest"
)

func start(t *testing.T, opts turntest.Options) *turntest.Cluster {
	t.Helper()
	c, err := turntest.Start(opts)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

func TestCreateTopicsCreatesMissingAndKeepsExisting(t *testing.T) {
	t.Parallel()
	c := start(t, turntest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	existing, err := turntest.CreateTopics(ctx, c.Brokers(), nil,
		turntest.Topic{Name: "a", Partitions: 12}, turntest.Topic{Name: "b", Partitions: 1})
	require.NoError(t, err)
	require.Empty(t, existing)

	existing, err = turntest.CreateTopics(ctx, c.Brokers(), nil,
		turntest.Topic{Name: "a", Partitions: 3}, turntest.Topic{Name: "c", Partitions: 2})
	require.NoError(t, err)
	require.Equal(t, []string{"a"}, existing)

	client, err := sarama.NewClient(c.Brokers(), turntest.Config())
	require.NoError(t, err)
	defer client.Close()
	for topic, want := range map[string]int{"a": 12, "b": 1, "c": 2} {
		parts, err := client.Partitions(topic)
		require.NoError(t, err)
		require.Len(t, parts, want, "topic %s keeps its first partition count", topic)
	}

	_, err = turntest.CreateTopics(ctx, c.Brokers(), nil, turntest.Topic{Name: "d"})
	require.ErrorContains(t, err, "0 partitions")
}

func TestTopicMaxMessageBytesAdmitsLargeRecords(t *testing.T) {
	t.Parallel()
	c := start(t, turntest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const limit = 4 << 20
	_, err := turntest.CreateTopics(ctx, c.Brokers(), nil,
		turntest.Topic{Name: "big", Partitions: 1, Configs: map[string]string{"max.message.bytes": "4194304"}},
		turntest.Topic{Name: "small", Partitions: 1})
	require.NoError(t, err)

	sc := turntest.Config()
	sc.Producer.Return.Successes = true
	sc.Producer.MaxMessageBytes = limit
	sc.Producer.Retry.Max = 0
	p, err := sarama.NewSyncProducer(c.Brokers(), sc)
	require.NoError(t, err)
	defer p.Close()
	value := bytes.Repeat([]byte("x"), 2<<20)
	_, _, err = p.SendMessage(&sarama.ProducerMessage{Topic: "big", Value: sarama.ByteEncoder(value)})
	require.NoError(t, err, "a 2 MiB record fits the topic's 4 MiB limit")
	_, _, err = p.SendMessage(&sarama.ProducerMessage{Topic: "small", Value: sarama.ByteEncoder(value)})
	require.ErrorIs(t, err, sarama.ErrMessageSizeTooLarge, "the default 1 MiB limit refuses it")

	cons, err := sarama.NewConsumer(c.Brokers(), turntest.Config())
	require.NoError(t, err)
	defer cons.Close()
	pc, err := cons.ConsumePartition("big", 0, sarama.OffsetOldest)
	require.NoError(t, err)
	defer pc.Close()
	select {
	case m := <-pc.Messages():
		require.Len(t, m.Value, len(value))
	case <-ctx.Done():
		t.Fatal("the large record was not fetched")
	}
}

func TestStartValidatesOptions(t *testing.T) {
	t.Parallel()
	_, err := turntest.Start(turntest.Options{Brokers: 6})
	require.ErrorContains(t, err, "Brokers")
	_, err = turntest.Start(turntest.Options{MaxMessageBytes: -1})
	require.ErrorContains(t, err, "MaxMessageBytes")
}
