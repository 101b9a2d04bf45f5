package main

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/deadletter"
	"github.com/turnstile-go/turnstile/internal/record"
	"github.com/turnstile-go/turnstile/turn"
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

// letterFieldsInJSON names, for every field of deadletter.Letter, the key of dlq's JSON that
// carries it (the dead letter's own location is "id"); a field added to Letter without an
// entry here fails TestLetterJSONCoversEveryField, so that the CLI cannot leave it out.
var letterFieldsInJSON = map[string]string{
	"Topic": "id", "Partition": "id", "Offset": "id", "Timestamp": "time", "Key": "key", "Value": "value",
	"Headers": "headers", "RequestID": "request_id", "ConversationID": "conversation_id", "Reason": "reason",
	"Error": "error", "Attempts": "attempts", "Kind": "kind", "Source": "source", "ValueDropped": "value_dropped",
	"HeadersDropped": "headers_dropped", "KeyDropped": "key_dropped", "Origin": "origin", "WorkflowID": "workflow_id",
	"Sequence": "sequence",
}

// dlq show --json carries every field of a dead letter: a Letter with each field set comes
// out with each field's key present and not empty.
func TestLetterJSONCoversEveryField(t *testing.T) {
	t.Parallel()
	l := deadletter.Letter{Topic: "dlq", Partition: 2, Offset: 17, Timestamp: time.Now().Add(-time.Minute),
		Key: []byte("c-1"), Value: []byte("{}"), Headers: []sarama.RecordHeader{{Key: []byte("tenant"), Value: []byte("acme")}},
		RequestID: "r-1", ConversationID: "c-1", Reason: "bug 42", Error: "boom", Attempts: 3, Kind: turn.KindPermanent,
		Source: turn.Source{Topic: "requests", Partition: 1, Offset: 5}, ValueDropped: "value 2 MiB refused",
		HeadersDropped: "refused with headers", KeyDropped: "refused with key", Origin: deadletter.OriginSubmit,
		WorkflowID: "turnstile-c-1", Sequence: 9}
	v := reflect.ValueOf(l)
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		require.False(t, v.Field(i).IsZero(), "the test's Letter sets %s", name)
		_, ok := letterFieldsInJSON[name]
		require.True(t, ok, "Letter.%s has no key in dlq's JSON (letterFieldsInJSON)", name)
	}
	data, err := json.Marshal(toJSON(l, true))
	require.NoError(t, err)
	var out map[string]any
	require.NoError(t, json.Unmarshal(data, &out))
	for field, key := range letterFieldsInJSON {
		require.NotEmpty(t, out[key], "Letter.%s in dlq's JSON as %q: %s", field, key, data)
	}
}

// A dead letter of Temporal mode with no request record (Bridge.Submit's) shows its origin in
// dlq list's SOURCE column, and its origin, workflow id and sequence in dlq show and --json.
func TestDLQShowsTemporalOrigin(t *testing.T) {
	t.Parallel()
	kc := turntest.NewCluster(t, turntest.Options{})
	dlq := kc.CreateTopic(t, "dlq", 1)
	kc.Produce(t, dlq, "c-9", []byte("{}"), map[string]string{
		consumer.HeaderRequestID: "r-9", consumer.HeaderConversationID: "c-9", consumer.HeaderReason: "refused by the validator",
		consumer.HeaderAttempts: "1", record.HeaderOrigin: deadletter.OriginSubmit, record.HeaderWorkflowID: "wf-c-9",
		record.HeaderSequence: "4",
	})
	brokers := "--brokers=" + kc.BrokerList()

	out := ok(t, "dlq", "list", brokers, "--topic="+dlq)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2, out)
	// TIME CONVERSATION REQUEST-ID ATTEMPTS AGE SOURCE ...: SOURCE is the sixth field of a row.
	require.Equal(t, deadletter.OriginSubmit, strings.Fields(lines[1])[5], "the SOURCE column names the origin:\n%s", out)

	out = ok(t, "dlq", "show", brokers, "--topic="+dlq, "--request-id=r-9")
	for _, want := range []string{"origin:", deadletter.OriginSubmit, "workflow id:", "wf-c-9", "sequence:", "4"} {
		require.Contains(t, out, want)
	}
	var shown []letterJSON
	require.NoError(t, json.Unmarshal([]byte(ok(t, "dlq", "show", brokers, "--topic="+dlq, "--request-id=r-9", "--json")), &shown))
	require.Len(t, shown, 1)
	require.Equal(t, deadletter.OriginSubmit, shown[0].Origin)
	require.Equal(t, "wf-c-9", shown[0].WorkflowID)
	require.EqualValues(t, 4, shown[0].Sequence)
	require.Empty(t, shown[0].Headers, "the dead-letter headers are fields, not the request's own headers")
}
