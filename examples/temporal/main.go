// Command temporal tells the quickstart's story in Temporal mode, with one command:
//
//	go run ./examples/temporal
//
// It starts an embedded Kafka broker (kfake), a Temporal dev server (the temporal CLI: set
// TURNSTILE_TEMPORAL_CLI, or have it in $(go env GOPATH)/bin; install it with
// "go install github.com/temporalio/cli/cmd/temporal@v1.5.1"), SQLite stores in a temporary
// directory (sessions, inbox, hand-off ledger), two consumer members whose handler is the
// bridge (each record becomes a SignalWithStart on its conversation's workflow, and its offset
// commits once Temporal accepted it), and two Temporal workers running the conversation
// workflows. One worker is a separate process that is killed with SIGKILL while its model is
// mid-turn; the turns it held finish on the other worker after the heartbeat timeout, and a
// replacement worker joins.
//
// The producer sends sequenced requests (with a traceparent header) over a number of
// conversations. The demo model quotes the conversation's previous message, so a turn without
// its context, out of order or twice would show, and it calls a "refund" tool with the turn's
// idempotency key. At the end the program prints a summary and checks that every request was
// applied once and in order, that each has one result, that the killed worker's turn finished
// elsewhere, that the tool's side effects happened once per request, that the traceparent
// reached the model and that the group's offsets are committed to the end. It exits 0 only if
// every check passes.
//
// Flags:
//
//	-requests N        requests to produce (default 400)
//	-conversations N   conversations they belong to (default 40)
//	-timeout D         how long to wait for every outcome (default 3m)
package main

import (
	"context"
	"flag"
	"io"
	"os"
	"time"

	"github.com/turnstile-go/turnstile/examples/internal/demo"
)

func main() {
	if os.Getenv(envWorker) != "" {
		os.Exit(workerProcess())
	}
	os.Exit(command().Main(os.Args[1:], os.Stdout, os.Stderr))
}

// command is the example's command line.
func command() demo.Command {
	cfg := Config{}
	return demo.Command{Name: "temporal", Flags: func(fs *flag.FlagSet) {
		fs.IntVar(&cfg.Requests, "requests", 400, "requests to produce")
		fs.IntVar(&cfg.Conversations, "conversations", 40, "conversations the requests belong to")
		fs.DurationVar(&cfg.Timeout, "timeout", 3*time.Minute, "how long to wait for every outcome")
	}, Run: func(ctx context.Context, _ bool, stdout, _ io.Writer) (bool, error) {
		sum, err := run(ctx, cfg, stdout)
		return sum.OK(), err
	}}
}
