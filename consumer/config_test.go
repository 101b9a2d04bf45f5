package consumer_test

import (
	"context"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/turn"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	h := consumer.HandlerFunc(func(context.Context, turn.Request) (*turn.Result, error) { return nil, nil })
	_, err := consumer.New(consumer.Config{}, h)
	require.ErrorContains(t, err, "Brokers: empty")
	require.ErrorContains(t, err, "GroupID: empty")
	require.ErrorContains(t, err, "RequestsTopic: empty")
	require.ErrorContains(t, err, "DeadLetterTopic: empty")
	require.ErrorContains(t, err, "ResultsTopic: empty")

	ok := consumer.Config{Brokers: []string{"127.0.0.1:1"}, GroupID: "g", RequestsTopic: "r", ResultsTopic: "res", DeadLetterTopic: "d"}
	_, err = consumer.New(ok, nil)
	require.ErrorContains(t, err, "nil Handler")

	bad := ok
	bad.RevokeGrace = -time.Second
	_, err = consumer.New(bad, h)
	require.ErrorContains(t, err, "RevokeGrace: negative")

	bad = ok
	bad.Sarama = sarama.NewConfig()
	bad.RevokeGrace = 2 * bad.Sarama.Consumer.Group.Rebalance.Timeout
	_, err = consumer.New(bad, h)
	require.ErrorContains(t, err, "RevokeGrace: 2m0s (plus 1s to abandon the turn) is not shorter than")

	bad = ok
	bad.ResultsTopic = "r"
	_, err = consumer.New(bad, h)
	require.ErrorContains(t, err, "RequestsTopic: must differ")

	c, err := consumer.New(ok, h)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.ErrorContains(t, c.Run(ctx), "consumer: connect to")
}

// Validate's message lists every problem, in the order of Config's fields, the same on every run.
func TestConfigValidateOrder(t *testing.T) {
	t.Parallel()
	cfg := consumer.Config{MaxInFlight: -1, TurnTimeout: -time.Second, MaxPause: -time.Minute, Ordering: 7}
	want := "consumer: invalid Config: Brokers: empty\nGroupID: empty\nRequestsTopic: empty\nResultsTopic: empty\n" +
		"DeadLetterTopic: empty\nTurnTimeout: negative (-1s)\nOrdering: unknown (7)\nMaxInFlight: negative (-1)\n" +
		"MaxPause: negative (-1m0s)"
	for range 20 { // map iteration would differ within a few runs
		require.EqualError(t, cfg.Validate(), want)
	}
}
