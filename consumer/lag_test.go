package consumer_test

import (
	"testing"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/turntest"
)

// offsetsAdmin is a cluster admin whose OffsetFetch answer is fixed.
type offsetsAdmin struct {
	sarama.ClusterAdmin
	resp *sarama.OffsetFetchResponse
}

func (a offsetsAdmin) ListConsumerGroupOffsets(string, map[string][]int32) (*sarama.OffsetFetchResponse, error) {
	return a.resp, nil
}

func (offsetsAdmin) ListConsumerGroups() (map[string]string, error) {
	return map[string]string{"agent": "consumer"}, nil
}

// GroupLag counts a partition never committed from its oldest record, refuses a partition
// whose committed offset the broker could not read, and does not find a group that committed
// nowhere on the topic.
func TestGroupLag(t *testing.T) {
	t.Parallel()
	kc := turntest.NewCluster(t, turntest.Options{})
	topic := kc.CreateTopic(t, "lagged", 2)
	kc.ProduceTo(t, topic, 0, "c-1", []byte("x"), nil)
	kc.ProduceTo(t, topic, 1, "c-2", []byte("y"), nil)
	client, err := sarama.NewClient(kc.Brokers(), kc.Config())
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })

	resp := &sarama.OffsetFetchResponse{Version: 1}
	resp.AddBlock(topic, 0, &sarama.OffsetFetchResponseBlock{Offset: 1})
	resp.AddBlock(topic, 1, &sarama.OffsetFetchResponseBlock{Offset: -1})
	lags, err := consumer.GroupLag(client, offsetsAdmin{resp: resp}, "g", topic)
	require.NoError(t, err)
	require.Equal(t, []consumer.PartitionLag{{Partition: 0, Committed: 1, End: 1}, {Partition: 1, Committed: -1, End: 1, Lag: 1}}, lags)

	resp.AddBlock(topic, 1, &sarama.OffsetFetchResponseBlock{Offset: -1, Err: sarama.ErrUnstableOffsetCommit})
	_, err = consumer.GroupLag(client, offsetsAdmin{resp: resp}, "g", topic)
	require.ErrorIs(t, err, sarama.ErrUnstableOffsetCommit)
	require.ErrorContains(t, err, topic+"/1")

	none := &sarama.OffsetFetchResponse{Version: 1}
	none.AddBlock(topic, 0, &sarama.OffsetFetchResponseBlock{Offset: -1})
	_, err = consumer.GroupLag(client, offsetsAdmin{resp: none}, "nope", topic)
	require.ErrorIs(t, err, consumer.ErrNoCommittedOffsets)
	require.ErrorContains(t, err, `group "nope" has no committed offsets on topic "`+topic+`"`)
	require.ErrorContains(t, err, "the cluster's groups: agent")

	_, err = consumer.GroupLag(client, offsetsAdmin{resp: resp}, "g", "no-such-topic")
	require.Error(t, err)
}
