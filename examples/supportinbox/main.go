// Command supportinbox plays the worked example of the ADK design note in Go: a support
// platform whose emails flow through Kafka to a group of agent workers.
//
//	go run ./examples/supportinbox
//
// agent.requests has 48 partitions, read by a consumer group of 8 members (each runs up to six
// turns at once, one per partition). Customers write twice, a minute apart: the emails carry
// created_at times a minute apart and are produced in that order, keyed by conversation, so
// both emails of a conversation land on one partition and are answered in order. The first
// email names the order ("charged twice for order A-10123"); the second only asks for the
// refund, so the agent can answer it only from the session.
//
// # The agent
//
// Each member runs one turn.Runner whose model is the agent loop of turn/agent (agent.New)
// over a scripted, deterministic fake LLM, an agent.Provider standing in for a real model: it
// reads the messages it is given (the conversation from the shared SQLite session store, the
// case file, this turn's tool calls and their results) and decides the next step as a model
// with tools would. Its tools:
//
//   - open_case (first emails): the model records the order, the issue and the amount it
//     read in the email. The loop's Output carries events only, so the host's wrapper around
//     the agent (desk) copies the open_case call's arguments into the session state, and on
//     later emails shows the model that state as a "case file" system note.
//   - lookup_refund: asks the fake payment service whether the order was refunded already.
//   - refund: the payment service's idempotent refund, with agent.Call.Key (the step's key,
//     the same on every run of the turn) as its idempotency key.
//   - send_email, a deferred tool (agent.NewDeferred): the confirmation email is recorded as
//     an intent in the turn's journal, promoted to the outbox when the turn commits, and
//     delivered after by an inbox.Relay through agent.Deliverer, to a fake mail service that
//     dedups on the intent's key. One relay serves the fleet: SQLite has one writer at a time.
//
// So the second email of a double charge is seven journal steps: model, lookup_refund, model,
// refund, model, send_email (deferred), model (the answer). Every model call and tool call is
// a durable step (turn.Journal): when the request runs again, the completed steps return their
// recorded outputs without running, and only the step in flight runs again.
//
// What goes wrong, on purpose:
//
//   - A member is redeployed mid-loop. The member serving c-7731's second email is stopped
//     after its refund step completed, while the next model call (step 5) is in flight. The
//     stop is graceful, as a rolling deploy's: the member gives its turns a one-second
//     shutdown timeout, cancels the rest, commits what finished and leaves the group; a
//     replacement member starts. The partition's next owner reads the email again from the
//     committed offset, the inbox shows it begun but not done, and the turn runs again: the
//     journal answers steps 1 to 4 (two model calls, the lookup, the refund) without running
//     them, so the fake LLM is called again only for step 5 and the payment service gets one
//     refund call, not a second one that its idempotency would have absorbed. The email goes
//     out once, after the re-run commits.
//   - One email carries a 6 MB pasted log, over the Runner's context budget
//     (turn.Runner.ContextBudget) whatever a compaction could fold: the Runner refuses it
//     before any model call, and the email goes to agent.requests.dlq at once with the reason
//     in its headers (a producer should send such a log as an attachment: turn.Offload). Its
//     conversation hashes to c-7731's partition and it arrives between c-7731's two emails,
//     so the emails behind it show the partition does not stall.
//
// Kafka refuses records over 1 MiB by default, and so does turnstile's decoder. To carry the
// 6 MB email as it is, the example raises every limit on its way, as a host that accepts such
// emails must: the broker's message.max.bytes and the requests and dead-letter topics'
// max.message.bytes (8 MiB plus headroom), sarama's Producer.MaxMessageBytes (MaxRecordBytes)
// for the mail gateway's producer and for the members' results and dead-letter producer (via
// consumer.Config.Sarama), and the Runner's Decoder.MaxTextBytes (the consumer decodes with the
// Runner's Decoder). Compressing the producer's batches (Producer.Compression) would shrink
// what the broker stores, a log compresses well, but not what sarama checks against
// Producer.MaxMessageBytes, which is the uncompressed size; and many hosts would rather store
// such attachments elsewhere and send a link.
//
// The run prints the story, c-7731's conversation as the session store holds it, the agent
// steps of its second email from the turn's journal (inbox.Journal.Steps) with the member that
// ran each, the dead letters, the counts (model calls, tool calls per tool, refund calls,
// emails and the relay's send requests) and checks: one reply per email; each refund issued
// once, by one refund call; one confirmation email per refund, delivered once through the
// outbox (redeliveries deduped by key); the poison email in the dead-letter topic at once,
// with its reason and no model call; every second email answered in the context of the first; and the
// redeployed turn resumed mid-loop without re-running its completed steps. The outbox is
// drained before the checks. It exits 0 only if every check passes.
//
// Flags: -customers N (default 96), -v to log what the members do (they are quiet otherwise).
package main

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"os"

	"github.com/turnstile-go/turnstile/examples/internal/demo"
)

func main() { os.Exit(command().Main(os.Args[1:], os.Stdout, os.Stderr)) }

// command is the example's command line.
func command() demo.Command {
	var cfg Config
	return demo.Command{
		Name: "supportinbox",
		Flags: func(fs *flag.FlagSet) {
			fs.IntVar(&cfg.Customers, "customers", DefaultCustomers, "customers who write twice")
		},
		Run: func(ctx context.Context, verbose bool, stdout, stderr io.Writer) (bool, error) {
			if verbose { // the members are quiet otherwise
				cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
			}
			rep, err := run(ctx, cfg, stdout)
			return rep.OK(), err
		},
	}
}
