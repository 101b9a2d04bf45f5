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
)

// TestChaosShort runs the short form: at least 2,000 requests over 100 conversations on 3
// member processes, with at least 5 kill -9s, a broker restart and a database connection kill
// among the faults, and requires the checker's zeros: nothing lost, no duplicate turn, no
// order violation, no context miss, no duplicate side effect, no valid request dead-lettered.
// The members are the command internal/chaos/cmd/chaos, built without the race detector.
// TURNSTILE_CHAOS_SEED replays a seed; the seed is logged with the figures.
func TestChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("the chaos suite takes a minute or two; -short skips it")
	}
	sqltest.Postgres(t) // skips, or fails under CI=true, when PostgreSQL is unreachable
	cfg := Short()
	cfg.Exe = buildCommand(t)
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
	require.NoError(t, err, "seed %d", cfg.Seed)
	t.Logf("chaos: %s", fig.Line())
	if !fig.OK() {
		logTails(t, cfg.Dir)
	}

	require.GreaterOrEqual(t, fig.Requests, 2000)
	require.GreaterOrEqual(t, fig.Conversations, 100)
	require.Equal(t, 3, fig.Members)
	require.GreaterOrEqual(t, fig.Kills, 5, "kill -9s")
	require.GreaterOrEqual(t, fig.Restarts, 1, "broker restarts")
	require.GreaterOrEqual(t, fig.DBKills, 1, "database connection kills")
	require.Positive(t, fig.ConnsKilled, "connections the database kills ended")
	require.Empty(t, fig.Failures, "seed %d", cfg.Seed)
	for name, v := range map[string]int{"lost": fig.Lost, "duplicate turns": fig.DuplicateTurns,
		"order violations": fig.OrderViolations, "context misses": fig.ContextMisses,
		"duplicate side effects": fig.DuplicateSideEffects, "valid dead letters": fig.ValidDeadLetters} {
		require.Zero(t, v, "%s (seed %d)", name, cfg.Seed)
	}
	require.Equal(t, fig.Requests-fig.Poison, fig.Turns, "every valid request has its turn")
	require.Equal(t, fig.Invalid+fig.Poison, fig.DeadLetters, "every invalid and poison record is dead-lettered")
}

// buildCommand builds internal/chaos/cmd/chaos without the race detector, for the member
// and broker processes.
func buildCommand(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go") // go test puts its own go first on PATH
	require.NoError(t, err, "the go command, to build the member and broker processes")
	exe := filepath.Join(t.TempDir(), "chaos")
	cmd := exec.Command(goTool, "build", "-o", exe, "./cmd/chaos")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build ./internal/chaos/cmd/chaos: %s", out)
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
