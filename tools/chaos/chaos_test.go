package chaos

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/internal/sqltest"
	"github.com/turnstile-go/turnstile/internal/temporaldev"
)

// TestChaosShort runs the short form in every cell of the matrix (Cells), one subtest per
// cell, one after the other: at least 2,000 requests over 100 conversations on 3 member
// processes (500 over 50 in the Temporal cell, with 2 worker processes and a dev server
// restart), with at least 5 kill -9s and a database connection kill among the faults, hostile,
// stranger, panicking, always rate-limited and poison records mixed in, and requires the
// checker's zeros: nothing lost, no duplicate turn, no order violation, no context miss, no
// duplicate side effect (refund or email), no valid request dead-lettered, every record with
// an outcome, every expected dead letter dead-lettered with a reason, no member dead by
// itself, no email of a turn that did not commit, every committed turn's email delivered, no
// intent buried or left pending, model steps and compactions run again no more often than
// the kills, poison exits, SIGTERMs and killed connections (Figures.ExtraBound), compactions
// (the members' Runners compact past chaosHistoryLimit events) with no checkpoint lost,
// doubled, out of chain or missing a message and no event left uncovered and, in the
// transactional cell, no request with two committed results. The members are the command
// tools/chaos/cmd/chaos, built without the race detector. TURNSTILE_CHAOS_SEED replays a
// seed; TURNSTILE_CHAOS_CELL runs one cell only. The seed is logged with the figures.
func TestChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("the chaos suite takes a few minutes; -short skips it")
	}
	sqltest.Postgres(t) // skips, or fails under CI=true, when PostgreSQL is unreachable
	only := os.Getenv("TURNSTILE_CHAOS_CELL")
	if only != "" {
		_, err := ParseCell(only)
		require.NoError(t, err, "TURNSTILE_CHAOS_CELL")
	}
	exe := buildCommand(t)
	for _, cell := range Cells() {
		t.Run(string(cell), func(t *testing.T) {
			if only != "" && only != string(cell) {
				t.Skipf("TURNSTILE_CHAOS_CELL=%s", only)
			}
			runShort(t, exe, cell)
		})
	}
}

// runShort runs the short form of one cell and checks its figures.
func runShort(t *testing.T, exe string, cell Cell) {
	cfg := Short().ForCell(cell)
	if cell.Temporal() {
		// Before anything starts, so that a skip leaves nothing to clean up.
		cli, err := temporaldev.CLIPath()
		if err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("cell %s needs the temporal CLI: %v", cell, err)
			}
			t.Skipf("cell %s needs the temporal CLI: %v", cell, err)
		}
		cfg.TemporalCLI = cli
	}
	cfg.Exe = exe
	cfg.DSN = sqltest.PostgresDSN()
	cfg.Dir = t.TempDir()
	cfg.Log = t.Output()
	cfg.Seed = uint64(time.Now().UnixNano()%1_000_000) + 1
	if s := os.Getenv("TURNSTILE_CHAOS_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, "TURNSTILE_CHAOS_SEED")
		cfg.Seed = seed
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	fig, err := Run(ctx, cfg)
	require.NoError(t, err, "cell %s seed %d", cell, cfg.Seed)
	t.Logf("chaos: %s", fig.Line())
	if !fig.OK() {
		logTails(t, cfg.Dir)
	}

	require.Equal(t, cell, fig.Cell)
	require.GreaterOrEqual(t, fig.Requests, cfg.Requests)
	require.GreaterOrEqual(t, fig.Conversations, cfg.Conversations)
	require.Equal(t, 3, fig.Members)
	require.GreaterOrEqual(t, fig.Kills+fig.WorkerKills, 5, "kill -9s")
	require.Equal(t, cfg.BrokerRestarts, fig.Restarts, "broker restarts")
	require.GreaterOrEqual(t, fig.DBKills, 1, "database connection kills")
	require.Positive(t, fig.ConnsKilled, "connections the database kills ended")
	require.Positive(t, fig.Strangers, "stranger records")
	require.Positive(t, fig.Panics, "panicking requests")
	require.Positive(t, fig.Limited, "always rate-limited requests")
	if cell.Temporal() {
		require.Equal(t, cfg.Workers, fig.Workers)
		require.Positive(t, fig.WorkerKills, "kill -9s of workers")
		require.Positive(t, fig.Kills, "kill -9s of bridge members")
		require.Equal(t, 1, fig.ServerRestarts, "dev server restarts")
		require.Positive(t, fig.Batches, "batches handed off by the members with MaxBatch %d (seed %d)", cell.MemberMaxBatch(1), cfg.Seed)
	}
	require.Empty(t, fig.Failures, "cell %s seed %d", cell, cfg.Seed)
	for name, v := range map[string]int{"lost": fig.Lost, "duplicate turns": fig.DuplicateTurns,
		"order violations": fig.OrderViolations, "context misses": fig.ContextMisses,
		"duplicate side effects": fig.DuplicateSideEffects, "valid dead letters": fig.ValidDeadLetters,
		"records with no outcome": fig.NoOutcome, "member failures": fig.MemberFails,
		"emails without a committed turn": fig.EmailsWithoutCommit, "committed turns without their email": fig.CommittedWithoutEmail,
		"buried intents": fig.DeadIntents, "intents left pending": fig.PendingIntents} {
		require.Zero(t, v, "%s (cell %s seed %d)", name, cell, cfg.Seed)
	}
	if cell.Transactional() {
		require.Zero(t, fig.DuplicateResults, "request ids with two committed results (seed %d)", cfg.Seed)
	}
	require.Equal(t, fig.Requests-fig.Poison, fig.Turns, "every valid request has its turn")
	require.Equal(t, fig.Turns, fig.Emails, "every committed turn's email delivered, and no other")
	require.GreaterOrEqual(t, fig.ModelSteps, 2*fig.Turns, "two model steps a turn")
	require.LessOrEqual(t, fig.ExtraModelSteps+fig.ExtraCompactionRuns, fig.ExtraBound(),
		"model steps and compactions run again: no more than the kills, poison exits, SIGTERMs and killed connections (seed %d)", cfg.Seed)
	require.Positive(t, fig.Compactions, "conversations compacted (HistoryLimit %d) under the faults (seed %d)", chaosHistoryLimit, cfg.Seed)
	require.GreaterOrEqual(t, fig.CompactionRuns, fig.Compactions, "every checkpoint's compaction counted")
	require.Zero(t, fig.CompactionProblems, "checkpoints lost, doubled, unchained, cutting a turn or missing a message, events uncovered (cell %s seed %d)", cell, cfg.Seed)
	require.Equal(t, fig.Invalid+fig.Poison+fig.Strangers+fig.Panics+fig.Limited, fig.DeadLetters,
		"every invalid, poison, stranger, panicking and always-limited record is dead-lettered")
}

// buildCommand builds tools/chaos/cmd/chaos without the race detector, for the member
// and broker processes.
func buildCommand(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go") // go test puts its own go first on PATH
	require.NoError(t, err, "the go command, to build the member and broker processes")
	exe := filepath.Join(t.TempDir(), "chaos")
	cmd := exec.Command(goTool, "build", "-o", exe, "./cmd/chaos")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build ./tools/chaos/cmd/chaos: %s", out)
	return exe
}

// logTails logs the end of every process log of a failed run.
func logTails(t *testing.T, dir string) {
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, path := range logs {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		if len(b) > 4000 {
			b = b[len(b)-4000:]
		}
		t.Logf("--- %s (end)\n%s", filepath.Base(path), b)
	}
}
