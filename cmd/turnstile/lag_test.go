package main

import (
	"testing"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/turntest"
)

// offsetsAdmin is a cluster admin whose OffsetFetch answer is fixed: a partition-level error
// that a real broker gives only in passing (a partition moving, a coordinator loading).
type offsetsAdmin struct {
	sarama.ClusterAdmin
	resp *sarama.OffsetFetchResponse
}

func (a offsetsAdmin) ListConsumerGroupOffsets(string, map[string][]int32) (*sarama.OffsetFetchResponse, error) {
	return a.resp, nil
}

// A partition whose committed offset the broker could not read is an error, not a partition
// the group never committed (whose lag would be counted from the oldest record).
func TestLagReportsOffsetFetchErrors(t *testing.T) {
	t.Parallel()
	kc := turntest.NewCluster(t, turntest.Options{})
	topic := kc.CreateTopic(t, "lagged", 2)
	kc.ProduceTo(t, topic, 0, "c-1", []byte("x"), nil)
	client, err := sarama.NewClient(kc.Brokers(), kc.Config())
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })

	resp := &sarama.OffsetFetchResponse{Version: 1}
	resp.AddBlock(topic, 0, &sarama.OffsetFetchResponseBlock{Offset: 1})
	resp.AddBlock(topic, 1, &sarama.OffsetFetchResponseBlock{Offset: -1})
	lags, err := groupLag(client, offsetsAdmin{resp: resp}, "g", topic)
	require.NoError(t, err)
	require.Equal(t, []partitionLag{{Partition: 0, Committed: 1, End: 1}, {Partition: 1, Committed: -1}}, lags)

	resp.AddBlock(topic, 1, &sarama.OffsetFetchResponseBlock{Offset: -1, Err: sarama.ErrUnstableOffsetCommit})
	_, err = groupLag(client, offsetsAdmin{resp: resp}, "g", topic)
	require.ErrorIs(t, err, sarama.ErrUnstableOffsetCommit)
	require.ErrorContains(t, err, topic+"/1")
}
