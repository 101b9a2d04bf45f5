package workflow

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	enumspb "go.temporal.io/api/enums/v1"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	tworker "go.temporal.io/sdk/worker"
	twf "go.temporal.io/sdk/workflow"

	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/session/sqlsession"
	"github.com/turnstile-go/turnstile/turn"
)

// envWorkerProcess, when set to a JSON processConfig, makes the test binary a worker process
// (TestMain runs runWorkerProcess instead of the tests), so that a test can SIGKILL a worker.
const envWorkerProcess = "TURNSTILE_WORKFLOW_WORKER_PROCESS"

// processConfig tells a worker process where everything is.
type processConfig struct {
	HostPort, TaskQueue, DBPath string
	Brokers                     []string
	Results, DLQ                string
	HeartbeatTimeout            time.Duration
}

// inModel is the line a worker process prints when its model has made the tool call and hangs.
const inModel = "IN-MODEL"

// openSQLite opens the SQLite database at path with the stores and the tool table on it.
func openSQLite(path string) (*sql.DB, *sqlsession.Store, *sqlinbox.Inbox, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
	if err != nil {
		return nil, nil, nil, err
	}
	ctx := context.Background()
	sessions, err := sqlsession.New(db, sqlsession.SQLite, sqlsession.Options{})
	if err == nil {
		err = sessions.Migrate(ctx)
	}
	ib, err2 := sqlinbox.New(db, sqlinbox.SQLite, sqlinbox.Options{})
	if err == nil && err2 == nil {
		err = ib.Migrate(ctx)
	}
	if err == nil {
		_, err = db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS tool_effects (key TEXT PRIMARY KEY);
			CREATE TABLE IF NOT EXISTS tool_calls (key TEXT NOT NULL, pid INTEGER NOT NULL)`)
	}
	if err == nil {
		err = err2
	}
	return db, sessions, ib, err
}

// refund is the tool: a side effect that the "payment service" (a table) performs once per
// idempotency key, however often it is called.
func refund(ctx context.Context, db *sql.DB, in turn.Input) error {
	key := in.ToolKey("refund")
	if _, err := db.ExecContext(ctx, `INSERT INTO tool_calls (key, pid) VALUES (?, ?)`, key, os.Getpid()); err != nil {
		return err
	}
	_, err := db.ExecContext(ctx, `INSERT INTO tool_effects (key) VALUES (?) ON CONFLICT (key) DO NOTHING`, key)
	return err
}

// runWorkerProcess is the worker process: its model calls the tool, says so on stdout, and
// hangs until the process is killed.
func runWorkerProcess() int {
	var cfg processConfig
	if err := json.Unmarshal([]byte(os.Getenv(envWorkerProcess)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "worker process:", err)
		return 2
	}
	db, sessions, ib, err := openSQLite(cfg.DBPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker process: stores:", err)
		return 2
	}
	model := turn.ModelFunc(func(ctx context.Context, in turn.Input) (turn.Output, error) {
		if err := refund(ctx, db, in); err != nil {
			return turn.Output{}, err
		}
		fmt.Printf("%s %s\n", inModel, in.Request.ID)
		<-ctx.Done() // hang: the test kills this process now
		return turn.Output{}, ctx.Err()
	})
	c, err := client.Dial(client.Options{HostPort: cfg.HostPort, ContextPropagators: []twf.ContextPropagator{NewContextPropagator()}, Logger: quietLogger{}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker process: dial:", err)
		return 2
	}
	pub, err := NewKafkaPublisher(cfg.Brokers, nil, cfg.Results, cfg.DLQ)
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker process: publisher:", err)
		return 2
	}
	w := tworker.New(c, cfg.TaskQueue, tworker.Options{})
	runner := &turn.Runner{Model: model, Sessions: sessions, Inbox: ib, TurnTimeout: 30 * time.Second, Logger: slog.New(slog.DiscardHandler)}
	if err := Register(w, WorkerOptions{Runner: runner, Publisher: pub, HeartbeatTimeout: cfg.HeartbeatTimeout}); err != nil {
		fmt.Fprintln(os.Stderr, "worker process: register:", err)
		return 2
	}
	if err := w.Run(tworker.InterruptCh()); err != nil {
		fmt.Fprintln(os.Stderr, "worker process:", err)
		return 1
	}
	return 0
}

// The acceptance line: a worker process killed with SIGKILL mid-activity; the turn completes
// on another worker after the heartbeat timeout; the session holds it once; the tool's side
// effect (keyed by ToolKey) happens once although both workers called the tool.
func TestDevServerWorkerKilledMidTurn(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	path := filepath.Join(t.TempDir(), "turnstile.db")
	db, sessions, ib, err := openSQLite(path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	s.sessions, s.inbox = sessions, ib

	cfg := processConfig{HostPort: dev.server.FrontendHostPort(), TaskQueue: s.taskQueue, DBPath: path,
		Brokers: s.cluster.Brokers(), Results: s.results, DLQ: s.dlq, HeartbeatTimeout: 2 * time.Second}
	raw, err := json.Marshal(cfg)
	require.NoError(t, err)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envWorkerProcess+"="+string(raw))
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	killed := false
	t.Cleanup(func() {
		if !killed {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	lines := make(chan string, 8)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()

	b := s.bridge(BridgeOptions{})
	conv := s.cluster.Unique("kill")
	req := request(conv, 1, "refund my order")
	_, err = b.Handle(context.Background(), req)
	require.NoError(t, err)
	select {
	case line := <-lines:
		require.Equal(t, inModel+" "+req.ID, strings.TrimSpace(line))
	case <-time.After(wait):
		t.Fatal("the worker process never reached the model")
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	killed = true
	require.Error(t, cmd.Wait(), "killed")

	// Another worker, this process, with a model that calls the same tool and answers.
	s.startWorker(func(o *WorkerOptions) {
		o.States = nil // as in the worker process: the workers of a task queue agree on it
		o.HeartbeatTimeout = 2 * time.Second
		o.Runner.Model = turn.ModelFunc(func(ctx context.Context, in turn.Input) (turn.Output, error) {
			if err := refund(ctx, db, in); err != nil {
				return turn.Output{}, err
			}
			return turn.Output{Events: []session.Event{{Text: "refunded"}}}, nil
		})
	})
	st := s.waitApplied(b, conv, 1)
	require.Equal(t, int64(1), st.LastAppliedSequence)

	sess := s.sessionOf("u-1", conv)
	require.Equal(t, int64(2), sess.EventCount, "the turn is in the session once")
	var effects, calls, pids int
	require.NoError(t, db.QueryRow(`SELECT COUNT(*) FROM tool_effects`).Scan(&effects))
	require.NoError(t, db.QueryRow(`SELECT COUNT(*), COUNT(DISTINCT pid) FROM tool_calls`).Scan(&calls, &pids))
	require.Equal(t, 2, calls, "both workers called the tool")
	require.Equal(t, 2, pids, "from two processes")
	require.Equal(t, 1, effects, "the side effect happened once")
	results := s.cluster.ReadAll(t, s.results, 1, wait)
	require.Len(t, results, 1)
	requireEveryRequestAnswered(t, s.answered(), req)

	// The retry came from the heartbeat timeout (2 s), not from the start-to-close timeout
	// of minutes: the history's started event of the final attempt says why the last one failed.
	it := s.client.GetWorkflowHistory(context.Background(), s.taskQueue+"-"+conv, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var retriedAfterHeartbeat bool
	for it.HasNext() {
		ev, err := it.Next()
		require.NoError(t, err)
		if a := ev.GetActivityTaskStartedEventAttributes(); a != nil && a.GetAttempt() >= 2 {
			retriedAfterHeartbeat = a.GetLastFailure().GetTimeoutFailureInfo().GetTimeoutType() == enumspb.TIMEOUT_TYPE_HEARTBEAT
		}
	}
	require.True(t, retriedAfterHeartbeat, "the killed worker's attempt timed out on its heartbeat")
}

// quietLogger drops the SDK's logs in the worker process.
type quietLogger struct{}

func (quietLogger) Debug(string, ...any) {}
func (quietLogger) Info(string, ...any)  {}
func (quietLogger) Warn(string, ...any)  {}
func (quietLogger) Error(string, ...any) {}
