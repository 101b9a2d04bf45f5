package workflow_test

import (
	"context"
	"fmt"
	"time"

	"github.com/IBM/sarama"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	twf "go.temporal.io/sdk/workflow"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/workflow"
)

// Temporal mode in a host's main: a worker that runs the conversation workflows and their
// turns, and a consumer member whose handler is the bridge.
func Example() {
	ctx := context.Background()
	var runner *turn.Runner        // the host's Runner: model, session store, inbox
	var ledger *workflow.SQLLedger // on the stores' database: hand-offs and idle runs' states
	brokers := []string{"kafka:9092"}

	c, err := client.Dial(client.Options{
		HostPort:           "temporal:7233",
		ContextPropagators: []twf.ContextPropagator{workflow.NewContextPropagator()},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	pub, err := workflow.NewKafkaPublisher(brokers, nil, "agent.results", "agent.requests.dlq")
	if err != nil {
		fmt.Println(err)
		return
	}
	w := worker.New(c, "turnstile", worker.Options{})
	if err := workflow.Register(w, workflow.WorkerOptions{Runner: runner, Publisher: pub, States: ledger}); err != nil {
		fmt.Println(err)
		return
	}
	if err := w.Start(); err != nil {
		fmt.Println(err)
		return
	}
	defer w.Stop()

	tap := workflow.NewHeaderTap(0)
	bridge, err := workflow.NewBridge(c, workflow.BridgeOptions{TaskQueue: "turnstile", Tap: tap, Ledger: ledger})
	if err != nil {
		fmt.Println(err)
		return
	}
	sc := sarama.NewConfig()
	sc.Version = sarama.V3_6_0_0
	sc.Consumer.Interceptors = []sarama.ConsumerInterceptor{tap}
	cons, err := consumer.New(consumer.Config{
		Brokers: brokers, GroupID: "support-agent", RequestsTopic: "agent.requests",
		ResultsTopic: "agent.results", DeadLetterTopic: "agent.requests.dlq", Sarama: sc,
	}, bridge)
	if err != nil {
		fmt.Println(err)
		return
	}
	go func() { _ = bridge.RunSweeps(ctx, time.Minute, 5*time.Minute) }() // reconcile gaps
	_ = cons.Run(ctx)
}
