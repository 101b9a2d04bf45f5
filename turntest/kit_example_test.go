package turntest_test

import (
	"context"
	"fmt"
	"log"
	"testing"
	"time"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turntest"
)

// agent is a host's model whose refund goes through a payment service that dedups on the
// idempotency key, as turntest.Effects does.
type agent struct{ payments *turntest.Effects }

func (a agent) Respond(_ context.Context, in turn.Input) (turn.Output, error) {
	a.payments.Do(in.ToolKey("refund#1"), "the refund asked for in "+in.Request.ID)
	return turn.Output{Events: []session.Event{{Author: "assistant", Text: "Your refund is on its way."}}}, nil
}

// A host's test of its agent with the consumer it ships, on the embedded broker: a request in,
// its result out. In the host's _test.go file the function below is
// func TestAgentAnswers(t *testing.T); it needs a *testing.T, so the example is not run.
func ExampleNewCluster() {
	testAgentAnswers := func(t *testing.T) {
		kc := turntest.NewCluster(t, turntest.Options{}) // kfake, or TURNSTILE_KAFKA_BROKERS
		requests, results, dlq := kc.CreateTopic(t, "requests", 3), kc.CreateTopic(t, "results", 3), kc.CreateTopic(t, "dlq", 3)
		runner := &turn.Runner{Model: agent{payments: turntest.NewEffects()}, Sessions: session.NewMemoryStore(), Inbox: inbox.NewMemoryInbox()}
		c, err := consumer.New(consumer.Config{Brokers: kc.Brokers(), GroupID: kc.Unique("svc"), RequestsTopic: requests,
			ResultsTopic: results, DeadLetterTopic: dlq, Sarama: kc.Config()}, consumer.RunnerHandler(runner))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		defer func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		}()

		req := turntest.NewRequest("c-1", "u-1", "where is my refund?")
		kc.ProduceRequest(t, requests, req)
		got := kc.ReadResults(t, results, 1, time.Minute) // fails the test after a minute
		if got[0].RequestID != req.ID || got[0].Text != "Your refund is on its way." {
			t.Errorf("result %+v", got[0])
		}
	}
	_ = testAgentAnswers
}

// A host's test that its side effects happen once through every crash of the crash table
// (G3): func TestRefundsOnce(t *testing.T) in the host's _test.go file. CheckCrashes fails the
// test with the report of each crash point that performed a side effect twice.
func ExampleCheckCrashes() {
	testRefundsOnce := func(t *testing.T) {
		turntest.CheckCrashes(t, turntest.CrashConfig{
			NewModel: func(fx *turntest.Effects) turn.ModelClient { return agent{payments: fx} },
		})
	}
	_ = testRefundsOnce
}

// Effects stands for a payment or mail service that dedups on an idempotency key: the same
// effect under two keys is performed twice, which is what the crash harness catches.
func ExampleEffects() {
	fx := turntest.NewEffects()
	stable := turn.ToolKey("6f1b7c1e-2d8f-4a53-9c1e-0f6f3a3c2b10", "refund#1")
	fmt.Println(fx.Do(stable, "refund A-1 700"))
	fmt.Println(fx.Do(stable, "refund A-1 700")) // the turn ran again: deduplicated
	// A key from the provider's tool-call id, new in every response, lets it through again.
	fx.Do(turn.ToolKey("6f1b7c1e-2d8f-4a53-9c1e-0f6f3a3c2b10", "call_Xf3"), "refund A-1 700")
	// Outside CheckCrashes, Performed counts what happened: two refunds where one was meant.
	// (Duplicates needs the harness's runs to know what one run intends.)
	fmt.Println(fx.Performed("refund A-1 700"))
	// Output:
	// true
	// false
	// 2
}

// Start runs the embedded broker in a program without a *testing.T (the module's examples run
// on it); CreateTopics creates topics on it or on any cluster, and reports those that existed.
func ExampleStart() {
	kc, err := turntest.Start(turntest.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer kc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	topics := []turntest.Topic{{Name: "agent.requests", Partitions: 12}, {Name: "agent.results", Partitions: 12},
		{Name: "agent.requests.dlq", Partitions: 12, Configs: map[string]string{"retention.ms": "2592000000"}}}
	for range 2 {
		existing, err := turntest.CreateTopics(ctx, kc.Brokers(), nil, topics...)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("existing:", existing)
	}
	// Output:
	// existing: []
	// existing: [agent.requests agent.results agent.requests.dlq]
}
