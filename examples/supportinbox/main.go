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
// refund, so the agent can answer it only from the session: it reads the first email from
// the shared SQLite session store, and the order and amount from the session state.
//
// What goes wrong, on purpose:
//
//   - A member is redeployed mid-turn. The member serving c-7731's second email is stopped
//     while that turn is in flight, after the refund tool has already asked the (fake)
//     payment service for a refund. The stop is graceful, as a rolling deploy's: the member
//     gives its turns a one-second shutdown timeout, cancels the rest, commits what finished
//     and leaves the group; a replacement member starts. The partition's next owner reads the
//     email again from the committed offset, the inbox shows it begun but not done, and the
//     turn runs again. The refund tool passes in.ToolKey("refund") (turn.SessionToolKey) as the
//     idempotency key, so the payment service returns the first refund instead of paying
//     twice, and the customer gets one reply.
//   - One email carries a 6 MB pasted log. The demo model's context window is 1 MiB, so
//     every attempt fails; the inbox counts the attempts across deliveries, and after the
//     third the email goes to agent.requests.dlq with the reason in its headers. Its
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
// The run prints the story, c-7731's conversation as the session store holds it, the dead
// letters, and checks: one reply per email, each refund issued once, the poison email in the
// dead-letter topic after 3 attempts with its reason, every second email answered in the
// context of the first, and the redeployed turn run again elsewhere with one refund and one
// reply. It exits 0 only if every check passes.
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
