// Command devloop is a local dev loop on turnstile's test kit, in a program rather than a
// test: the context forms of turntest start the kit's cluster, produce requests and read the
// results back, with no testing.T.
//
//	go run ./examples/devloop "where is my refund?" "and my invoice?"
//
// It starts the kit's cluster (turntest.NewClusterContext: an in-process kfake broker, or the
// cluster TURNSTILE_KAFKA_BROKERS names), creates a requests, a results and a dead-letter
// topic (3 partitions each, names made unique by the kit), runs one consumer over memory
// stores and a model that echoes, produces one request per argument ("hello, agent" when there
// is none) into one conversation, reads the results back and prints one line each:
//
//	result 1 of 2: conversation c-dev, 2 events: you said "where is my refund?" (message 1 of the conversation)
//
// It exits 0 when every request has its result, 1 on an error (printed to stderr), and gives
// up after -timeout (default 1m).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turntest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run parses args, runs the loop and returns the exit code: 0, 1 on an error, 2 for bad flags.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("devloop", flag.ContinueOnError)
	fs.SetOutput(stderr)
	timeout := fs.Duration("timeout", time.Minute, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	texts := fs.Args()
	if len(texts) == 0 {
		texts = []string{"hello, agent"}
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if err := loop(ctx, texts, stdout); err != nil {
		fmt.Fprintf(stderr, "devloop: %v\n", err)
		return 1
	}
	return 0
}

// echo is the model: it answers with the user's message and its place in the conversation.
func echo(_ context.Context, in turn.Input) (turn.Output, error) {
	n := len(in.Session.Events)/2 + 1 // each earlier turn stored the user's message and a reply
	return turn.Output{Events: []session.Event{{Text: fmt.Sprintf("you said %q (message %d of the conversation)", in.Request.Text, n)}}}, nil
}

// loop is the dev loop: cluster, topics, consumer, requests, results.
func loop(ctx context.Context, texts []string, out io.Writer) (err error) {
	kc, err := turntest.NewClusterContext(ctx, turntest.Options{})
	if err != nil {
		return err
	}
	defer kc.Close()
	var topics [3]string
	for i, name := range []string{"requests", "results", "dlq"} {
		if topics[i], err = kc.CreateTopicContext(ctx, name, 3); err != nil {
			return err
		}
	}
	runner := &turn.Runner{Model: turn.ModelFunc(echo), Sessions: session.NewMemoryStore(), Inbox: inbox.NewMemoryInbox()}
	c, err := consumer.New(consumer.Config{
		Brokers: kc.Brokers(), GroupID: kc.Unique("devloop"), RequestsTopic: topics[0], ResultsTopic: topics[1],
		DeadLetterTopic: topics[2], Sarama: kc.Config(), CommitInterval: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}, consumer.RunnerHandler(runner))
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	defer func() {
		stop()
		if runErr := <-done; runErr != nil && err == nil {
			err = fmt.Errorf("consumer: %w", runErr)
		}
	}()

	for _, text := range texts {
		if _, _, err := kc.ProduceRequestContext(ctx, topics[0], turntest.NewRequest("c-dev", "u-dev", text)); err != nil {
			return err
		}
	}
	results, err := kc.ReadResultsContext(ctx, topics[1], len(texts))
	if err != nil {
		return err
	}
	// One conversation is one key, so one partition: the results come in the order produced.
	for i, res := range results {
		fmt.Fprintf(out, "result %d of %d: conversation %s, %d events: %s\n", i+1, len(results), res.ConversationID, res.Events, res.Text)
	}
	return nil
}
