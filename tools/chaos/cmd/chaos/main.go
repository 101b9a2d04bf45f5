// Command chaos runs turnstile's chaos suite (package tools/chaos) and prints its figures:
// member processes on PostgreSQL stores against a broker process, under a seeded schedule of
// kill -9, SIGTERM, database connection kills, broker restarts, 429 bursts, slow turns and
// model failures, then an independent check of the topics and tables.
//
//	go run ./tools/chaos/cmd/chaos                # the short form (what TestChaosShort runs)
//	go run ./tools/chaos/cmd/chaos -long          # 20,000 requests, 40 kill -9s, 3 broker restarts
//	go run ./tools/chaos/cmd/chaos -seed 7        # replay a schedule
//	go run ./tools/chaos/cmd/chaos -cell temporal # another cell of the matrix (-cell list: them all)
//
// The last line of its output is the figures line; the exit code is 0 when every check
// passed, 1 when one failed and 2 when the run could not be made. PostgreSQL is found at
// TURNSTILE_POSTGRES_DSN (default postgres://postgres@127.0.0.1:5432/test?sslmode=disable).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/turnstile-go/turnstile/internal/temporaldev"
	"github.com/turnstile-go/turnstile/tools/chaos"
)

func main() {
	chaos.ChildMain() // the broker and the members are this program, run again
	os.Exit(run())
}

func run() int {
	long := flag.Bool("long", false, "the long form: 20,000 requests over 500 conversations, 40 kill -9s, 3 broker restarts")
	seed := flag.Uint64("seed", 0, "the schedule's seed (0: drawn from the clock and printed)")
	cellName := flag.String("cell", string(chaos.CellByKey), "the cell of the matrix to run in; \"list\" prints the cells")
	requests := flag.Int("requests", 0, "valid requests (0: the form's)")
	kills := flag.Int("kills", -1, "kill -9s (-1: the form's)")
	dir := flag.String("dir", "", "directory for the broker's data and the processes' logs (default: a new temporary one, removed after a run that passed)")
	keep := flag.Bool("keep", false, "keep the run's tables in the database")
	flag.Parse()

	if *cellName == "list" {
		for _, c := range chaos.Cells() {
			fmt.Println(c)
		}
		return 0
	}
	cell, err := chaos.ParseCell(*cellName)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 2
	}
	cfg := chaos.Short()
	if *long {
		cfg = chaos.Long()
	}
	cfg = cfg.ForCell(cell)
	if cell.Temporal() {
		if cfg.TemporalCLI, err = temporaldev.CLIPath(); err != nil {
			fmt.Fprintln(os.Stderr, "chaos:", err)
			return 2
		}
	}
	if *requests > 0 {
		cfg.Requests = *requests
	}
	if *kills >= 0 {
		cfg.Kills = *kills
	}
	cfg.Seed = *seed
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano()%1_000_000) + 1
	}
	cfg.DSN = os.Getenv("TURNSTILE_POSTGRES_DSN")
	if cfg.DSN == "" {
		cfg.DSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 2
	}
	cfg.Exe = exe
	cfg.Dir = *dir
	removeDir := false
	if cfg.Dir == "" {
		if cfg.Dir, err = os.MkdirTemp("", "turnstile-chaos-"); err != nil {
			fmt.Fprintln(os.Stderr, "chaos:", err)
			return 2
		}
		removeDir = true
	}
	cfg.KeepTables = *keep
	cfg.Log = os.Stderr

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fig, err := chaos.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos: the run could not be made (seed %d; logs in %s): %v\n", cfg.Seed, cfg.Dir, err)
		return 2
	}
	for _, f := range fig.Failures {
		fmt.Fprintln(os.Stderr, "FAIL", f)
	}
	fmt.Println("chaos:", fig.Line())
	if !fig.OK() {
		fmt.Fprintf(os.Stderr, "chaos: checks failed; logs in %s\n", cfg.Dir)
		return 1
	}
	if removeDir {
		os.RemoveAll(cfg.Dir)
	}
	return 0
}
