// Command quickstart shows turnstile's whole job with one command and nothing to install:
//
//	go run ./examples/quickstart
//
// It starts an embedded Kafka broker (kfake, in process, on 127.0.0.1), creates agent.requests
// (12 partitions), agent.results and agent.requests.dlq, keeps sessions and the dedup inbox in
// SQLite in a temporary directory, and runs two consumer members of one group, each with its
// own turn.Runner over the shared stores. A deterministic demo model answers each request by
// quoting the conversation's previous message, so a turn that lost its context would show it.
// The program then produces 2,000 requests over 200 conversations, interleaved and keyed by
// conversation (murmur2, as a Java producer places them), while a progress line counts the
// results; halfway through, one member leaves gracefully and a new one joins, which moves
// partitions between members mid-run (a rebalance).
//
// At the end it prints a summary (requests, turns, results, duplicates suppressed, dead
// letters, p50/p99 latency from produce to result) and checks that nothing was lost, no turn
// ran twice, every conversation's history is in order and every reply shows the earlier
// context. It exits 0 only if every check passes.
//
// Flags:
//
//	-requests N        requests to produce (default 2000)
//	-conversations N   conversations they belong to (default 200)
//	-rate R            requests produced per second (default 400; negative: unpaced)
//	-brokers LIST      a real Kafka cluster (host:port,...): no embedded broker; the topics are
//	                   created if missing and the run starts at their current end
//	-postgres DSN      PostgreSQL stores (pgx) instead of SQLite
//	-db PATH           the SQLite database file (default: in a temporary directory)
//	-v                 log the consumers' info lines too
//	-otel FILE         export traces and metrics with the OpenTelemetry SDK (stdout exporters,
//	                   JSON) to FILE ("-": standard error): a span per request from the producer,
//	                   through the member that ran it (process, inbox, session, model, append,
//	                   send), and the members' metrics (turns, lag, pauses, ...)
//
// The logic lives in run (quickstart.go), which quickstart_test.go calls with a small workload.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

// realMain parses the flags, runs the quickstart until it finishes or a signal arrives and
// returns the exit code: 0 when every check passed, 1 when one failed or the run broke off,
// 2 for bad flags.
func realMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("quickstart", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := Config{}
	var brokers string
	var verbose bool
	fs.IntVar(&cfg.Requests, "requests", DefaultRequests, "requests to produce")
	fs.IntVar(&cfg.Conversations, "conversations", DefaultConversations, "conversations the requests belong to")
	fs.Float64Var(&cfg.Rate, "rate", DefaultRate, "requests produced per second; negative: as fast as possible")
	fs.StringVar(&brokers, "brokers", "", "comma separated host:port of a real Kafka cluster (default: an embedded broker)")
	fs.StringVar(&cfg.Postgres, "postgres", "", "PostgreSQL DSN for the session store and inbox (default: SQLite)")
	fs.StringVar(&cfg.DBPath, "db", "", "SQLite database file (default: in a temporary directory)")
	fs.BoolVar(&verbose, "v", false, "log the consumers' info lines")
	otelPath := fs.String("otel", "", "write OpenTelemetry traces and metrics as JSON to this file (- for stderr)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "quickstart: unexpected arguments %q\n", fs.Args())
		return 2
	}
	for b := range strings.SplitSeq(brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			cfg.Brokers = append(cfg.Brokers, b)
		}
	}
	level := slog.LevelWarn
	if verbose {
		level = slog.LevelInfo
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	switch *otelPath {
	case "":
	case "-":
		cfg.Telemetry = stderr
	default:
		f, err := os.Create(*otelPath)
		if err != nil {
			fmt.Fprintf(stderr, "quickstart: -otel: %v\n", err)
			return 2
		}
		defer func() {
			_ = f.Close()
			fmt.Fprintf(stdout, "telemetry: spans and metrics of every member and the producer in %s (OpenTelemetry JSON)\n", *otelPath)
		}()
		cfg.Telemetry = f
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sum, err := run(ctx, cfg, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "quickstart: %v\n", err)
		return 1
	}
	if !sum.OK() {
		return 1
	}
	return 0
}
