package main

import (
	"testing"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/turntest"
)

// A group with no committed offset on the topic (a mistyped --group) is not found, and says
// so, instead of printing the whole topic as its lag.
func TestLagGroupWithoutOffsets(t *testing.T) {
	t.Parallel()
	kc := turntest.NewCluster(t, turntest.Options{})
	topic := kc.CreateTopic(t, "requests", 2)
	kc.ProduceTo(t, topic, 0, "c-1", []byte("x"), nil)
	code, out, errOut := cli(t, "lag", "--brokers="+kc.BrokerList(), "--group=nope", "--topic="+topic)
	require.Equal(t, exitNotFound, code, "stdout: %s\nstderr: %s", out, errOut)
	require.NotZero(t, code)
	require.Contains(t, errOut, `group "nope" has no committed offsets on topic "`+topic+`"`)
	require.Empty(t, out, "no lag table for a group that is not there")
	code, out, _ = cli(t, "lag", "--brokers="+kc.BrokerList(), "--group=nope", "--topic="+topic, "--json")
	require.Equal(t, exitNotFound, code)
	require.Empty(t, out)
}

// A partition whose last offsets are transaction markers (two transactional producers
// committing in turn: R_A R_B COMMIT_A COMMIT_B) is read far enough back to find its records;
// a sandbox topic written by replay passes.
func TestReplayCheckReadsPastTransactionMarkers(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	kc := turntest.NewCluster(t, turntest.Options{})
	production := kc.CreateTopic(t, "results", 1)
	var producers []sarama.SyncProducer
	for range 2 {
		p, err := sarama.NewSyncProducer(kc.Brokers(), kc.TransactionalConfig(""))
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Close() })
		require.NoError(t, p.BeginTxn())
		_, _, err = p.SendMessage(&sarama.ProducerMessage{Topic: production, Value: sarama.StringEncoder("a result")})
		require.NoError(t, err)
		producers = append(producers, p)
	}
	for _, p := range producers {
		require.NoError(t, p.CommitTxn())
	}
	client, err := sarama.NewClient(kc.Brokers(), kc.Config())
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	end, err := client.GetOffset(production, 0, sarama.OffsetNewest)
	require.NoError(t, err)
	require.EqualValues(t, 4, end, "two records, then two commit markers")
	checkSandbox := func(to string) error {
		probe, err := probeSandbox(ctx, client, to)
		require.NoError(t, err)
		return probe.foreign(to)
	}
	err = checkSandbox(production)
	require.ErrorContains(t, err, "replay did not write")
	require.ErrorContains(t, err, "offset 0")

	sandbox := kc.CreateTopic(t, "sandbox", 1)
	kc.Produce(t, sandbox, "c-1", []byte("a copy"), map[string]string{headerReplayedFrom: production + "/0/0"})
	require.NoError(t, checkSandbox(sandbox))
	require.NoError(t, checkSandbox(kc.CreateTopic(t, "empty", 2)), "an empty topic is a sandbox")
}

// A sandbox that holds a copy of a record the replay would copy is refused; copies of other
// records, of another topic or of another conversation are not.
func TestReplayDuplicate(t *testing.T) {
	t.Parallel()
	probe := sandboxProbe{records: []probedRecord{
		{partition: 0, offset: 7, key: "c-1", replayedFrom: "agent.requests/2/40"},
		{partition: 0, offset: 8, key: "c-2", replayedFrom: "other/1/5"},
		{partition: 1, offset: 0, key: "c-3", replayedFrom: "not a header"},
	}}
	spans := []span{{partition: 2, start: 30, end: 50}, {partition: 1, start: 0, end: 10}}
	err := probe.duplicate("agent.requests", "sandbox", spans, "")
	require.ErrorContains(t, err, "already holds a copy")
	require.ErrorContains(t, err, "--allow-duplicates")
	require.ErrorAs(t, err, new(usageError))
	require.ErrorContains(t, probe.duplicate("agent.requests", "sandbox", spans, "c-1"), "agent.requests/2/40")
	require.NoError(t, probe.duplicate("agent.requests", "sandbox", spans, "c-2"), "another conversation's copy")
	require.NoError(t, probe.duplicate("agent.requests", "sandbox", []span{{partition: 2, start: 41, end: 50}}, ""), "after the copied offset")
	require.NoError(t, probe.duplicate("agent.requests", "sandbox", []span{{partition: 1, start: 0, end: 50}}, ""), "another partition")
	require.NoError(t, probe.duplicate("other.requests", "sandbox", spans, ""), "another topic")
}
