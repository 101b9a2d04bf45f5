package turntest_test

import (
	"errors"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/turntest"
)

func values(msgs []*sarama.ConsumerMessage) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = string(m.Value)
	}
	return out
}

func txn(t *testing.T, p sarama.SyncProducer, topic string, commit bool, vals ...string) {
	t.Helper()
	require.NoError(t, p.BeginTxn())
	for _, v := range vals {
		_, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder("k"), Value: sarama.StringEncoder(v)})
		require.NoError(t, err)
	}
	if commit {
		require.NoError(t, p.CommitTxn())
	} else {
		require.NoError(t, p.AbortTxn())
	}
}

// A transactional producer commits and aborts; read_committed readers see
// only committed records, read_uncommitted readers see both.
func TestTransactionsCommitAndAbort(t *testing.T) {
	t.Parallel()
	c := turntest.NewCluster(t, turntest.Options{})
	topic := c.CreateTopic(t, "txn", 1)

	p, err := sarama.NewSyncProducer(c.Brokers(), c.TransactionalConfig(""))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	require.True(t, p.IsTransactional())

	txn(t, p, topic, true, "a1", "a2")
	txn(t, p, topic, false, "b1", "b2")
	txn(t, p, topic, true, "c1", "c2")

	committed := c.ReadAll(t, topic, 4, 30*time.Second)
	require.Equal(t, []string{"a1", "a2", "c1", "c2"}, values(committed))
	// Offsets: a1 a2 marker b1 b2 marker c1 c2.
	require.Equal(t, []int64{0, 1, 6, 7}, []int64{committed[0].Offset, committed[1].Offset, committed[2].Offset, committed[3].Offset})

	all := c.ReadAllUncommitted(t, topic, 6, 30*time.Second)
	require.Equal(t, []string{"a1", "a2", "b1", "b2", "c1", "c2"}, values(all))
}

// Offsets sent to a transaction are committed with it, or not at all.
func TestTransactionsCommitOffsets(t *testing.T) {
	t.Parallel()
	c := turntest.NewCluster(t, turntest.Options{})
	in := c.CreateTopic(t, "in", 1)
	out := c.CreateTopic(t, "out", 1)
	group := c.Unique("g")

	p, err := sarama.NewSyncProducer(c.Brokers(), c.TransactionalConfig(""))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })

	withOffset := func(offset int64, value string, commit bool) {
		require.NoError(t, p.BeginTxn())
		_, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: out, Value: sarama.StringEncoder(value)})
		require.NoError(t, err)
		require.NoError(t, p.AddOffsetsToTxn(map[string][]*sarama.PartitionOffsetMetadata{
			in: {{Partition: 0, Offset: offset}},
		}, group))
		if commit {
			require.NoError(t, p.CommitTxn())
		} else {
			require.NoError(t, p.AbortTxn())
		}
	}

	withOffset(5, "r5", true)
	require.Equal(t, int64(5), c.CommittedOffset(t, group, in, 0))
	withOffset(9, "r9", false)
	require.Equal(t, int64(5), c.CommittedOffset(t, group, in, 0), "an aborted transaction's offset is not committed")
	withOffset(10, "r10", true)
	require.Equal(t, int64(10), c.CommittedOffset(t, group, in, 0))

	require.Equal(t, []string{"r5", "r10"}, values(c.ReadAll(t, out, 2, 30*time.Second)))
}

// A second producer with the same transactional id fences the first: the
// zombie's transaction fails and is never visible.
func TestTransactionsFencing(t *testing.T) {
	t.Parallel()
	c := turntest.NewCluster(t, turntest.Options{})
	topic := c.CreateTopic(t, "fence", 1)
	id := c.Unique("txn")

	zombie, err := sarama.NewSyncProducer(c.Brokers(), c.TransactionalConfig(id))
	require.NoError(t, err)
	t.Cleanup(func() { _ = zombie.Close() }) // a fenced producer's Close reports the fencing
	require.NoError(t, zombie.BeginTxn())
	_, _, err = zombie.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder("zombie")})
	require.NoError(t, err)

	fresh, err := sarama.NewSyncProducer(c.Brokers(), c.TransactionalConfig(id))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, fresh.Close()) })

	err = zombie.CommitTxn()
	require.Error(t, err)
	require.True(t, errors.Is(err, sarama.ErrProducerFenced) || errors.Is(err, sarama.ErrInvalidProducerEpoch),
		"zombie commit error: %v", err)
	require.NotZero(t, zombie.TxnStatus()&sarama.ProducerTxnFlagFatalError, "status %v", zombie.TxnStatus())

	txn(t, fresh, topic, true, "fresh")
	require.Equal(t, []string{"fresh"}, values(c.ReadAll(t, topic, 1, 30*time.Second)))
}
