// Command contextbench measures what issue 35 asks of a long conversation, for BENCHMARKS.md:
//
//   - -input: the model's input per turn (tokens as the Runner counts them, with tiktoken's
//     o200k_base, and bytes of the chat-completions request body) against the turn number,
//     for a conversation of -turns turns with tool calls through turn/agent and
//     turn/chatcompletion against a scripted local server, under three strategies: the whole
//     history every turn, the last 50 events (the Runner's window before compaction), and
//     the Runner's context budget with compaction. It prints a Markdown table and writes
//     -plot (a PNG or SVG).
//   - -stored: the bytes stored per turn in each SQL store's tables (session events with
//     their checkpoints, inbox entries with their journals, outbox rows) after -conversations
//     conversations of -stored-turns turns each, then after turn.Retention runs past the inbox
//     horizon, then past the sessions' idle time; on SQLite and on PostgreSQL at -postgres.
//
// The amortized cost of compaction per turn is BenchmarkCompaction, in this package's tests:
//
//	go test -run '^$' -bench BenchmarkCompaction -benchtime 1000x ./tools/contextbench/
//
// Usage:
//
//	go run ./tools/contextbench -input -plot docs/context-input.png
//	go run ./tools/contextbench -stored
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/turnstile-go/turnstile/internal/sqltest"
)

func main() {
	log.SetFlags(0)
	var (
		input         = flag.Bool("input", false, "measure the model's input per turn under the three strategies")
		turns         = flag.Int("turns", 1000, "with -input: the turns of the conversation")
		budget        = flag.Int("budget", 0, "with -input: the compaction strategy's context budget in tokens (0: turn.DefaultContextBudget)")
		plotPath      = flag.String("plot", "docs/context-input.png", "with -input: write the plot to this .png or .svg file (\"none\": no plot)")
		stored        = flag.Bool("stored", false, "measure the bytes stored per turn, with and without the retention run")
		conversations = flag.Int("conversations", 10, "with -stored: the conversations")
		storedTurns   = flag.Int("stored-turns", 100, "with -stored: the turns of each conversation")
		dbs           = flag.String("dbs", "sqlite,postgres", "with -stored: the databases, comma-separated")
		postgres      = flag.String("postgres", sqltest.PostgresDSN(), "with -stored: PostgreSQL's DSN (default TURNSTILE_POSTGRES_DSN or the tests' default)")
	)
	flag.Parse()
	if !*input && !*stored {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	progress := func(s string) { log.Print(s) }
	if *input {
		start := time.Now()
		series, err := measureInput(ctx, *turns, *budget, progress)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("Model input per turn, %d turns (%s):\n\n", *turns, time.Since(start).Round(time.Second))
		writeInputTable(os.Stdout, series)
		if *plotPath != "none" {
			if err := writeInputPlot(series, *plotPath); err != nil {
				log.Fatal(err)
			}
			fmt.Printf("\nplot: %s\n", *plotPath)
		}
	}
	if *stored {
		var reports []storedReport
		for _, name := range strings.Split(*dbs, ",") {
			r, err := measureStored(ctx, storedOptions{DB: strings.TrimSpace(name), PostgresDSN: *postgres,
				Conversations: *conversations, Turns: *storedTurns, Dir: os.TempDir()}, progress)
			if err != nil {
				log.Fatal(err)
			}
			reports = append(reports, r)
		}
		fmt.Printf("\nStored bytes per turn, %d conversations of %d turns:\n\n", *conversations, *storedTurns)
		writeStoredTable(os.Stdout, reports)
	}
}
