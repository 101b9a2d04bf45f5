package consumer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turntest"
)

// The Runner is the one place for the limits of a turn: with no consumer setting, a Runner
// with MaxAttempts 5 dead-letters after 5 attempts (the consumer's own default is 3, so a
// consumer that kept its default would dead-letter after 3 failures in the member).
func TestRunnerHandlerCarriesMaxAttempts(t *testing.T) {
	t.Parallel()
	e := setup(t, 1, 1)
	m := e.start(memberOpts{
		model: func(context.Context, turn.Input) (turn.Output, error) {
			return turn.Output{}, errors.New("context window exceeded")
		},
		runner: func(r *turn.Runner) { r.MaxAttempts = 5 },
	})
	poison := request("c-five-attempts", "always fails")
	e.produce(poison)

	dead := e.cluster.ReadAll(t, e.dlq, 1, wait)
	require.Len(t, dead, 1)
	h := turntest.HeaderMap(dead[0])
	require.Equal(t, poison.ID, h[consumer.HeaderRequestID])
	require.Equal(t, "5", h[consumer.HeaderAttempts])
	require.Contains(t, h[consumer.HeaderReason], "5 attempts exhausted")
	require.EqualValues(t, 5, e.callsOf(poison.ID), "the model ran once per attempt")
	eventually(t, func() bool { return m.c.Stats().DeadLetters == 1 })
	require.EqualValues(t, 4, m.c.Stats().Retries, "four failed attempts retried, the fifth dead-lettered")
}

// A Config that sets a limit of the Runner's to another value is refused; one that leaves it
// zero or repeats the Runner's value is accepted.
func TestRunnerHandlerRefusesConflictingLimits(t *testing.T) {
	t.Parallel()
	base := consumer.Config{Brokers: []string{"127.0.0.1:1"}, GroupID: "g", RequestsTopic: "r", ResultsTopic: "res", DeadLetterTopic: "d"}
	model := turn.ModelFunc(func(context.Context, turn.Input) (turn.Output, error) { return turn.Output{}, nil })
	runner := func(f func(r *turn.Runner)) *turn.Runner {
		r := &turn.Runner{Model: model, Sessions: session.NewMemoryStore(), Inbox: inbox.NewMemoryInbox()}
		if f != nil {
			f(r)
		}
		return r
	}
	for _, c := range []struct {
		name   string
		runner func(r *turn.Runner)
		config func(c *consumer.Config)
		err    string // empty: accepted
	}{
		{name: "nothing set"},
		{name: "set on the Runner only", runner: func(r *turn.Runner) {
			r.MaxAttempts, r.TurnTimeout, r.Decoder.MaxTextBytes = 5, time.Second, 1000
		}},
		{name: "the same on both", runner: func(r *turn.Runner) {
			r.MaxAttempts, r.TurnTimeout, r.Decoder.MaxTextBytes = 5, time.Second, 1000
		}, config: func(c *consumer.Config) {
			c.MaxAttempts, c.TurnTimeout, c.Decoder.MaxTextBytes = 5, time.Second, 1000
		}},
		{name: "the Runner's defaults spelled out", config: func(c *consumer.Config) {
			c.MaxAttempts, c.TurnTimeout, c.Decoder.MaxTextBytes = turn.DefaultMaxAttempts, turn.DefaultTurnTimeout, turn.DefaultMaxTextBytes
		}},
		{name: "MaxAttempts differs", runner: func(r *turn.Runner) { r.MaxAttempts = 5 },
			config: func(c *consumer.Config) { c.MaxAttempts = 3 },
			err:    "MaxAttempts: 3, but the Runner's is 5; set it on the Runner only"},
		{name: "MaxAttempts against the Runner's default", config: func(c *consumer.Config) { c.MaxAttempts = 5 },
			err: "MaxAttempts: 5, but the Runner's is 3 (its default)"},
		{name: "TurnTimeout differs", runner: func(r *turn.Runner) { r.TurnTimeout = 30 * time.Second },
			config: func(c *consumer.Config) { c.TurnTimeout = time.Second },
			err:    "TurnTimeout: 1s, but the Runner's is 30s"},
		{name: "Decoder differs", runner: func(r *turn.Runner) { r.Decoder.MaxTextBytes = 1000 },
			config: func(c *consumer.Config) { c.Decoder.MaxTextBytes = 2000 },
			err:    "Decoder: MaxTextBytes 2000, but the Runner's is 1000"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg := base
			if c.config != nil {
				c.config(&cfg)
			}
			_, err := consumer.New(cfg, consumer.RunnerHandler(runner(c.runner)))
			if c.err == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, c.err)
			require.ErrorContains(t, err, "consumer: Config disagrees with the Runner of RunnerHandler")
		})
	}
}
