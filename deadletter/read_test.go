package deadletter_test

import (
	"context"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/deadletter"
	"github.com/turnstile-go/turnstile/turntest"
)

// In the transactional mode dead letters are written in transactions, so a dead-letter
// partition ends in a commit marker: a control record that no consumer is given. Read must
// still end at the end offset it saw, not wait for a record that never comes.
func TestReadEndsAtATransactionMarker(t *testing.T) {
	t.Parallel()
	kc := turntest.NewCluster(t, turntest.Options{})
	topic := kc.CreateTopic(t, "dlq", 1)
	p, err := sarama.NewSyncProducer(kc.Brokers(), kc.TransactionalConfig(""))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	require.NoError(t, p.BeginTxn())
	for _, reason := range []string{"first reason", "second reason"} {
		_, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder("c-1"), Value: sarama.StringEncoder("{}"),
			Headers: []sarama.RecordHeader{{Key: []byte(consumer.HeaderReason), Value: []byte(reason)}}})
		require.NoError(t, err)
	}
	require.NoError(t, p.CommitTxn())

	client, err := sarama.NewClient(kc.Brokers(), kc.Config())
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, client.Close()) })
	end, err := client.GetOffset(topic, 0, sarama.OffsetNewest)
	require.NoError(t, err)
	require.EqualValues(t, 3, end, "two dead letters and the commit marker")

	// A deadline far beyond the wait for a quiet partition: Read returning before it, with both
	// letters, is the point; its error would be the deadline's.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	letters, err := deadletter.Read(ctx, client, topic, deadletter.Filter{})
	require.NoError(t, err)
	require.Len(t, letters, 2)
	require.Equal(t, "first reason", letters[0].Reason)
	require.Equal(t, "second reason", letters[1].Reason)
}
