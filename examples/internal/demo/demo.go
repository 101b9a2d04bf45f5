// Package demo is the plumbing the runnable examples (examples/quickstart,
// examples/supportinbox, examples/temporal) share, so that each example's own files tell only
// its story: the base config of their Kafka clients, a watcher of the results and dead-letter
// topics, a fleet of consumer members in one process, the PASS/FAIL checks a run ends with, and
// the command's main (flags, signals, exit codes). Kafka plumbing the test kit has is the
// kit's: the embedded broker and topics (turntest.Start, turntest.CreateTopics), the request
// producer's settings (turntest.IdempotentProducer), and dead letters as deadletter.Parse
// reads them. Nothing here is part of turnstile's API.
package demo

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/IBM/sarama"

	"github.com/turnstile-go/turnstile/turntest"
)

// ClientConfig returns the base config of an example's Kafka clients, a fresh one on every
// call: a consumer group member needs its own (the cooperative-sticky strategy keeps state per
// member), and the consumer copies it for its producer. clientID names the client in the
// group's description. On top of turntest.Config:
//   - a 100 ms fetch long-poll (Consumer.MaxWaitTime): the long-poll also delays a commit sent
//     to the same broker, so a short one keeps commits fast;
//   - heartbeats every 300 ms, a 10 s session and a 20 s rebalance timeout: members learn of a
//     rebalance from a heartbeat's answer, so frequent heartbeats make member changes quick
//     (the session timeout must be at least a real broker's group.min.session.timeout.ms, 6 s).
func ClientConfig(clientID string) *sarama.Config {
	sc := turntest.Config()
	sc.ClientID = clientID
	sc.Consumer.MaxWaitTime = 100 * time.Millisecond
	sc.Consumer.Group.Session.Timeout = 10 * time.Second
	sc.Consumer.Group.Heartbeat.Interval = 300 * time.Millisecond
	sc.Consumer.Group.Rebalance.Timeout = 20 * time.Second
	sc.Consumer.Group.Rebalance.Retry.Backoff = 100 * time.Millisecond
	return sc
}

// Command is an example's command line: its own flags and its run. Main adds -v.
type Command struct {
	// Name is the command's name, for flag errors and the error line.
	Name string
	// Flags defines the command's own flags on fs.
	Flags func(fs *flag.FlagSet)
	// Run runs the example once the flags are parsed; verbose is -v (log more). It returns
	// whether every check passed, or an error for a run that broke off.
	Run func(ctx context.Context, verbose bool, stdout, stderr io.Writer) (ok bool, err error)
}

// Main parses args (no positional arguments allowed), calls Run with a context that SIGINT
// and SIGTERM cancel, and returns the exit code: 0 when the run finished and every check
// passed, 1 when a check failed or the run broke off (its error is printed to stderr), 2 for
// bad flags.
func (c Command) Main(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(c.Name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	verbose := fs.Bool("v", false, "log what the members do at info level")
	c.Flags(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected arguments %q\n", c.Name, fs.Args())
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ok, err := c.Run(ctx, *verbose, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", c.Name, err)
		return 1
	}
	if !ok {
		return 1
	}
	return 0
}
