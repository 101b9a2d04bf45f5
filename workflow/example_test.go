package workflow_test

import (
	"context"
	"fmt"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	twf "go.temporal.io/sdk/workflow"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/inbox"
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
	// NewWorker: worker.New and Register, with a Stop that lets the turns in flight finish.
	w, err := workflow.NewWorker(c, "turnstile", worker.Options{}, workflow.WorkerOptions{Runner: runner, Publisher: pub, States: ledger})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := w.Start(); err != nil {
		fmt.Println(err)
		return
	}
	defer w.Stop()

	// The consumer hands the bridge each request with its record's headers: no HeaderTap.
	bridge, err := workflow.NewBridge(c, workflow.BridgeOptions{TaskQueue: "turnstile", Ledger: ledger})
	if err != nil {
		fmt.Println(err)
		return
	}
	cons, err := consumer.New(consumer.Config{
		Brokers: brokers, GroupID: "support-agent", RequestsTopic: "agent.requests",
		ResultsTopic: "agent.results", DeadLetterTopic: "agent.requests.dlq",
	}, bridge)
	if err != nil {
		fmt.Println(err)
		return
	}
	go func() { _ = bridge.RunSweeps(ctx, time.Minute, 5*time.Minute) }() // reconcile gaps
	// The ledger's hand-offs older than 30 days go, as the inbox's entries do.
	go func() {
		_ = workflow.RunLedgerPurge(ctx, ledger, inbox.PurgeSchedule{Horizon: 30 * 24 * time.Hour})
	}()
	_ = cons.Run(ctx)
}
