package turntest

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/uuid"

	"github.com/turnstile-go/turnstile/deadletter"
	"github.com/turnstile-go/turnstile/turn"
)

// NewRequest returns a valid request of user in conversation with text: a fresh request id
// (a random UUID) and turn.SchemaVersion.
func NewRequest(conversation, user, text string) turn.Request {
	return turn.Request{Schema: turn.SchemaVersion, ID: uuid.NewString(), ConversationID: conversation, UserID: user, Text: text}
}

// ProduceRequest is [Cluster.ProduceRequestContext] for a test: it fails the test on an
// error.
func (c *Cluster) ProduceRequest(t testing.TB, topic string, req turn.Request) (partition int32, offset int64) {
	t.Helper()
	partition, offset, err := c.ProduceRequestContext(context.Background(), topic, req)
	fatalIf(t, err)
	return partition, offset
}

// ProduceRequestContext writes req to topic as its producer should: the JSON envelope
// (turn.Request.Encode) keyed by the conversation id, on the partition a Java producer picks
// for that key (murmur2), with the cluster's shared idempotent producer. It returns where the
// record landed. req is written as given, so a caller may produce an invalid request on
// purpose. Errors: req does not encode, and those of [Cluster.ProduceContext].
func (c *Cluster) ProduceRequestContext(ctx context.Context, topic string, req turn.Request) (partition int32, offset int64, err error) {
	value, err := req.Encode()
	if err != nil {
		return -1, -1, fmt.Errorf("turntest: encode request %s: %w", req.ID, err)
	}
	return c.ProduceContext(ctx, topic, req.ConversationID, value, nil)
}

// ReadResults is [Cluster.ReadResultsContext] for a test, waiting at most timeout (> 0) as
// [Cluster.ReadAll] does: it fails the test on an error.
func (c *Cluster) ReadResults(t testing.TB, topic string, n int, timeout time.Duration) []turn.Result {
	t.Helper()
	results, err := decodeResults(c.readFor(t, topic, sarama.ReadCommitted, n, timeout))
	fatalIf(t, err)
	return results
}

// ReadResultsContext reads at least n results from topic (as [Cluster.ReadAllContext] does)
// and returns them decoded (turn.DecodeResult), by partition then offset. Errors: those of
// ReadAllContext, and a record that is not a result envelope.
func (c *Cluster) ReadResultsContext(ctx context.Context, topic string, n int) ([]turn.Result, error) {
	msgs, err := c.ReadAllContext(ctx, topic, n)
	if err != nil {
		return nil, err
	}
	return decodeResults(msgs)
}

func decodeResults(msgs []*sarama.ConsumerMessage) ([]turn.Result, error) {
	out := make([]turn.Result, 0, len(msgs))
	for _, m := range msgs {
		res, err := turn.DecodeResult(m.Value)
		if err != nil {
			raw, _ := json.Marshal(string(m.Value))
			return nil, fmt.Errorf("turntest: %s/%d/%d is not a result: %w: %s", m.Topic, m.Partition, m.Offset, err, raw)
		}
		out = append(out, res)
	}
	return out, nil
}

// ReadDeadLetters is [Cluster.ReadDeadLettersContext] for a test, waiting at most timeout
// (> 0) as [Cluster.ReadAll] does: it fails the test on an error.
func (c *Cluster) ReadDeadLetters(t testing.TB, topic string, n int, timeout time.Duration) []deadletter.Letter {
	t.Helper()
	return parseLetters(c.readFor(t, topic, sarama.ReadCommitted, n, timeout))
}

// ReadDeadLettersContext reads at least n dead letters from topic (as [Cluster.ReadAllContext]
// does) and returns them parsed (deadletter.Parse), by partition then offset. Errors: those of
// ReadAllContext.
func (c *Cluster) ReadDeadLettersContext(ctx context.Context, topic string, n int) ([]deadletter.Letter, error) {
	msgs, err := c.ReadAllContext(ctx, topic, n)
	if err != nil {
		return nil, err
	}
	return parseLetters(msgs), nil
}

func parseLetters(msgs []*sarama.ConsumerMessage) []deadletter.Letter {
	out := make([]deadletter.Letter, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, deadletter.Parse(m))
	}
	return out
}
