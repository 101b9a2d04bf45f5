package turntest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/turnstile-go/turnstile/deadletter"
	"github.com/turnstile-go/turnstile/turn"
)

// NewRequest returns a valid request of user in conversation with text: a fresh request id
// (a random UUID) and turn.SchemaVersion.
func NewRequest(conversation, user, text string) turn.Request {
	return turn.Request{Schema: turn.SchemaVersion, ID: uuid.NewString(), ConversationID: conversation, UserID: user, Text: text}
}

// ProduceRequest writes req to topic as its producer should: the JSON envelope
// (turn.Request.Encode) keyed by the conversation id, on the partition a Java producer picks
// for that key (murmur2), with the cluster's shared idempotent producer. It returns where the
// record landed, and fails the test when req does not encode or the broker does not
// acknowledge it. req is written as given, so a test may produce an invalid request on
// purpose.
func (c *Cluster) ProduceRequest(t testing.TB, topic string, req turn.Request) (partition int32, offset int64) {
	t.Helper()
	value, err := req.Encode()
	if err != nil {
		t.Fatalf("turntest: encode request %s: %v", req.ID, err)
	}
	return c.Produce(t, topic, req.ConversationID, value, nil)
}

// ReadResults reads at least n results from topic (as [Cluster.ReadAll] does, failing the test
// after timeout) and returns them decoded (turn.DecodeResult), by partition then offset. A
// record that is not a result envelope fails the test.
func (c *Cluster) ReadResults(t testing.TB, topic string, n int, timeout time.Duration) []turn.Result {
	t.Helper()
	msgs := c.ReadAll(t, topic, n, timeout)
	out := make([]turn.Result, 0, len(msgs))
	for _, m := range msgs {
		res, err := turn.DecodeResult(m.Value)
		if err != nil {
			raw, _ := json.Marshal(string(m.Value))
			t.Fatalf("turntest: %s/%d/%d is not a result: %v: %s", m.Topic, m.Partition, m.Offset, err, raw)
		}
		out = append(out, res)
	}
	return out
}

// ReadDeadLetters reads at least n dead letters from topic (as [Cluster.ReadAll] does, failing
// the test after timeout) and returns them parsed (deadletter.Parse), by partition then offset.
func (c *Cluster) ReadDeadLetters(t testing.TB, topic string, n int, timeout time.Duration) []deadletter.Letter {
	t.Helper()
	msgs := c.ReadAll(t, topic, n, timeout)
	out := make([]deadletter.Letter, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, deadletter.Parse(m))
	}
	return out
}
