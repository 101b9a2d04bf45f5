package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/deadletter"
	"github.com/turnstile-go/turnstile/internal/record"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turntest"
)

// deadLetterOf produces a dead letter of the request record at topic/partition/offset to dlq,
// with value (nil: dropped, as the consumer drops a value the dead-letter topic refuses).
func deadLetterOf(t *testing.T, kc *turntest.Cluster, dlq, key, requestID, topic string, partition int32, offset int64, value []byte) {
	t.Helper()
	h := map[string]string{consumer.HeaderReason: "bug 42", consumer.HeaderAttempts: "1",
		consumer.HeaderSourceTopic: topic, consumer.HeaderSourcePartition: fmt.Sprint(partition),
		consumer.HeaderSourceOffset: fmt.Sprint(offset)}
	if requestID != "" {
		h[consumer.HeaderRequestID] = requestID
		h[consumer.HeaderConversationID] = key
	}
	if value == nil {
		h[consumer.HeaderValueDropped] = "value of 1572864 bytes refused by the dead-letter topic"
	}
	kc.Produce(t, dlq, key, value, h)
}

// redriveRows runs dlq redrive with args and --json and returns its exit code and rows by
// request id (the dead letter's id when it has none).
func redriveRows(t *testing.T, args ...string) (int, map[string]map[string]string, string) {
	t.Helper()
	code, out, errOut := cli(t, append([]string{"dlq", "redrive", "--json"}, args...)...)
	var rows []map[string]string
	require.NoError(t, json.Unmarshal([]byte(out), &rows), "stdout: %s\nstderr: %s", out, errOut)
	by := map[string]map[string]string{}
	for _, r := range rows {
		by[cmpOr(r["request_id"], r["id"])] = r
	}
	return code, by, errOut
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// A dead letter whose request record is larger than the producer's limit (1.1 MB,
// dropped from the dead letter and read back from its source record) is refused by the dry run
// as by the real run, which does not advise running it again; a higher --max-message-bytes
// re-drives it. Records the consumer can never accept (malformed JSON, no user id, a key that
// is not the conversation id) are refused with their reason, by the dry run too, unless
// --force; a valid one next to them is re-driven.
func TestRedriveRefusesWhatCanNeverPass(t *testing.T) {
	t.Parallel()
	kc := turntest.NewCluster(t, turntest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	requests, dlq := kc.Unique("requests"), kc.CreateTopic(t, "dlq", 1)
	_, err := turntest.CreateTopics(ctx, kc.Brokers(), nil, turntest.Topic{Name: requests, Partitions: 1,
		Configs: map[string]string{"max.message.bytes": "4194304"}})
	require.NoError(t, err)
	sc := kc.Config()
	sc.Producer.Return.Successes = true
	sc.Producer.MaxMessageBytes = 4 << 20
	p, err := sarama.NewSyncProducer(kc.Brokers(), sc)
	require.NoError(t, err)
	defer p.Close()

	// Valid (the text within turn.DefaultMaxTextBytes, the metadata within its limits) and over
	// the producer's default limit of 1 MiB.
	big := turntest.NewRequest("c-big", "u-1", strings.Repeat("x", turn.DefaultMaxTextBytes-100))
	big.Metadata = map[string]string{}
	for i := range 16 {
		big.Metadata[fmt.Sprint("k", i)] = strings.Repeat("m", 4000)
	}
	value, err := big.Encode()
	require.NoError(t, err)
	part, off, err := p.SendMessage(&sarama.ProducerMessage{Topic: requests, Key: sarama.StringEncoder("c-big"), Value: sarama.ByteEncoder(value)})
	require.NoError(t, err)
	deadLetterOf(t, kc, dlq, "c-big", big.ID, requests, part, off, nil)

	good := turntest.NewRequest("c-good", "u-1", "fine")
	goodValue, err := good.Encode()
	require.NoError(t, err)
	noUser := turntest.NewRequest("c-nouser", "", "who am I")
	noUserValue, err := json.Marshal(map[string]any{"schema": turn.SchemaVersion, "id": noUser.ID, "conversation_id": "c-nouser", "text": "who"})
	require.NoError(t, err)
	other := turntest.NewRequest("c-other", "u-1", "not mine")
	otherValue, err := other.Encode()
	require.NoError(t, err)
	deadLetterOf(t, kc, dlq, "c-good", good.ID, requests, 0, 100, goodValue)
	deadLetterOf(t, kc, dlq, "c-malformed", "", requests, 0, 101, []byte(`{"schema": 1, "id": `))
	deadLetterOf(t, kc, dlq, "c-nouser", noUser.ID, requests, 0, 102, noUserValue)
	deadLetterOf(t, kc, dlq, "c-wrong-key", other.ID, requests, 0, 103, otherValue)
	brokers, topic := "--brokers="+kc.BrokerList(), "--topic="+dlq

	// The dry run fails where the real run would, with the same reasons.
	code, dry, errOut := redriveRows(t, brokers, topic, "--all", "--dry-run")
	require.Equal(t, exitFailed, code, errOut)
	require.Contains(t, errOut, "4 of 5 dead letters would not be re-driven")
	require.Contains(t, dry[big.ID]["error"], "larger than the producer's limit")
	require.Contains(t, dry[big.ID]["error"], fmt.Sprintf("limit %d", sarama.NewConfig().Producer.MaxMessageBytes))
	require.Equal(t, "redriven", dry[good.ID]["action"], "%v", dry)
	require.Contains(t, dry[noUser.ID]["error"], "can never pass")
	require.Contains(t, dry[noUser.ID]["error"], "user_id")
	require.Contains(t, dry[other.ID]["error"], "differs from conversation_id")
	require.Len(t, dry, 5)
	for id, r := range dry {
		if id != good.ID {
			require.Empty(t, r["action"], "%s: %v", id, r)
		}
	}
	code, out, _ := cli(t, "dlq", "redrive", brokers, topic, "--all", "--dry-run")
	require.Equal(t, exitFailed, code)
	require.Contains(t, out, "would be redriven")
	require.Equal(t, 1, strings.Count(out, "would be redriven"), out)

	// The consumer's checks are under the service's limits: --max-text-bytes.
	code, dry, errOut = redriveRows(t, brokers, topic, "--request-id="+good.ID, "--dry-run", "--max-text-bytes=3")
	require.Equal(t, exitFailed, code, errOut)
	require.Contains(t, dry[good.ID]["error"], "can never pass")

	// The real run of the large one fails the same way, without advising a retry, and leaves the
	// inbox entry as it was.
	db := "--db=sqlite:" + migratedSQLite(t)
	code, real, errOut := redriveRows(t, brokers, topic, db, "--request-id="+big.ID)
	require.Equal(t, exitFailed, code, errOut)
	require.Contains(t, real[big.ID]["error"], "running the re-drive again fails the same way")
	require.NotContains(t, real[big.ID]["error"], "run the re-drive again")
	// With the topic's limit it goes.
	code, real, errOut = redriveRows(t, brokers, topic, db, "--request-id="+big.ID, "--max-message-bytes=4194304")
	require.Equal(t, exitOK, code, "%v %s", real, errOut)
	require.Equal(t, "redriven", real[big.ID]["action"])

	// --force publishes the refused requests anyway (and the dry run says so).
	code, dry, errOut = redriveRows(t, brokers, topic, "--reason=bug", "--dry-run", "--force", "--source-offset=103")
	require.Equal(t, exitOK, code, errOut)
	require.Equal(t, "redriven", dry[other.ID]["action"])
	code, real, errOut = redriveRows(t, brokers, topic, db, "--source-offset=103", "--force")
	require.Equal(t, exitOK, code, errOut)
	require.Equal(t, "redriven", real[other.ID]["action"])
	require.Equal(t, requests+"/0/"+fmt.Sprint(off+2) /* after the large one */, real[other.ID]["published_to"])
}

// migratedSQLite returns the path of a SQLite database with the stores' tables.
func migratedSQLite(t *testing.T) string {
	t.Helper()
	path := t.TempDir() + "/turnstile.db"
	ok(t, "migrate", "--db=sqlite:"+path)
	return path
}

// A gap dead letter and a Bridge.Submit one have no source record: dlq list's SOURCE says
// "gap" and "submit", not "/0/0" (the empty source headers they are written with).
func TestDLQListSourceOfLettersWithoutRecord(t *testing.T) {
	t.Parallel()
	kc := turntest.NewCluster(t, turntest.Options{})
	dlq := kc.CreateTopic(t, "dlq", 1)
	for _, origin := range []string{deadletter.OriginGap, deadletter.OriginSubmit} {
		d := record.DeadLetter{Reason: "gap", Attempts: 0, RequestID: "r-" + origin, ConversationID: "c-" + origin, Origin: origin,
			WorkflowID: "turnstile-c", Sequence: 2}
		h := map[string]string{}
		for _, x := range d.Headers(nil) {
			h[string(x.Key)] = string(x.Value)
		}
		require.Equal(t, "0", h[consumer.HeaderSourceOffset], "written with empty source headers, as the workflow's publisher does")
		kc.Produce(t, dlq, "c-"+origin, nil, h)
	}
	out := ok(t, "dlq", "list", "--brokers="+kc.BrokerList(), "--topic="+dlq)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3, out)
	var sources []string
	for _, l := range lines[1:] {
		sources = append(sources, strings.Fields(l)[5])
	}
	require.ElementsMatch(t, []string{deadletter.OriginGap, deadletter.OriginSubmit}, sources, out)
	var listed []letterJSON
	require.NoError(t, json.Unmarshal([]byte(ok(t, "dlq", "list", "--brokers="+kc.BrokerList(), "--topic="+dlq, "--json")), &listed))
	for _, l := range listed {
		require.Equal(t, l.Origin, l.Source)
		require.NotContains(t, l.Source, "/0/0")
	}
}
