package main

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"go.temporal.io/sdk/client"
	tworker "go.temporal.io/sdk/worker"

	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/session/sqlsession"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turntest"
	"github.com/turnstile-go/turnstile/workflow"
)

// envWorker makes this binary the worker process that is killed: "HOST|DBPATH|BROKERS".
const envWorker = "TURNSTILE_EXAMPLE_WORKER"

// inModelLine starts the line the worker process prints when its model is mid-turn.
const inModelLine = "IN-MODEL "

// stores are the SQLite stores every worker shares: sessions, inbox, the bridge's hand-off
// ledger, and the refund tool's table.
type stores struct {
	db       *sql.DB
	sessions *sqlsession.Store
	inbox    *sqlinbox.Inbox
	ledger   *workflow.SQLLedger
}

func openStores(ctx context.Context, path string) (*stores, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)")
	if err != nil {
		return nil, err
	}
	st := &stores{db: db}
	if st.sessions, err = sqlsession.New(db, sqlsession.SQLite, sqlsession.Options{}); err != nil {
		return nil, err
	}
	if st.inbox, err = sqlinbox.New(db, sqlinbox.SQLite, sqlinbox.Options{}); err != nil {
		return nil, err
	}
	if st.ledger, err = workflow.NewSQLLedger(db, workflow.SQLite, ""); err != nil {
		return nil, err
	}
	for _, m := range []interface{ Migrate(context.Context) error }{st.sessions, st.inbox, st.ledger} {
		if err := m.Migrate(ctx); err != nil {
			return nil, err
		}
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS refunds (key TEXT PRIMARY KEY);
		CREATE TABLE IF NOT EXISTS refund_calls (key TEXT NOT NULL)`); err != nil {
		return nil, err
	}
	return st, nil
}

// refund is the demo's tool: the "payment service" performs a refund once per idempotency key
// (turn.ToolKey), however often it is asked.
func refund(ctx context.Context, db *sql.DB, in turn.Input) error {
	key := in.ToolKey("refund")
	if _, err := db.ExecContext(ctx, `INSERT INTO refund_calls (key) VALUES (?)`, key); err != nil {
		return turn.Unavailable(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO refunds (key) VALUES (?) ON CONFLICT (key) DO NOTHING`, key); err != nil {
		return turn.Unavailable(err)
	}
	return nil
}

// demoModel answers with the turn's number and the user's previous message, so a turn without
// its context, out of order or run twice would show. It records the traceparent it saw.
type demoModel struct {
	db     *sql.DB
	calls  atomic.Int64
	traces syncMap
}

func (m *demoModel) Respond(ctx context.Context, in turn.Input) (turn.Output, error) {
	m.calls.Add(1)
	m.traces.store(in.Request.ID, in.Request.Metadata["traceparent"])
	if err := refund(ctx, m.db, in); err != nil {
		return turn.Output{}, err
	}
	return turn.Output{Events: []session.Event{{Text: reply(in.Session.Version+1, previousUserText(in.Session))}}}, nil
}

func previousUserText(s session.Session) string {
	for i := len(s.Events) - 1; i >= 0; i-- {
		if s.Events[i].Author == "user" {
			return s.Events[i].Text
		}
	}
	return ""
}

// reply is the answer to the n-th turn after the user's previous message prev.
func reply(n int64, prev string) string {
	return fmt.Sprintf("turn %d; you said before: %q", n, prev)
}

// startWorker starts an in-process worker of the example's task queue.
func startWorker(w *world, model turn.ModelClient, log *slog.Logger) (tworker.Worker, error) {
	return newWorker(w.client, w.st, w.brokers, model, log)
}

func newWorker(c client.Client, st *stores, brokers []string, model turn.ModelClient, log *slog.Logger) (tworker.Worker, error) {
	pub, err := workflow.NewKafkaPublisher(brokers, turntest.Config(), ResultsTopic, DeadLetterTopic)
	if err != nil {
		return nil, err
	}
	runner := &turn.Runner{Model: model, Sessions: st.sessions, Inbox: st.inbox, TurnTimeout: 30 * time.Second, Logger: log}
	// NewWorker: its Stop lets the turns in flight finish (WorkerStopTimeout = StopTimeout).
	wk, err := workflow.NewWorker(c, TaskQueue, tworker.Options{}, workflow.WorkerOptions{Runner: runner, Publisher: pub, States: st.ledger, HeartbeatTimeout: heartbeatTimeout, Logger: log})
	if err != nil {
		return nil, err
	}
	return wk, wk.Start()
}

// hangingModel calls the tool, says so on stdout and hangs until the process is killed.
type hangingModel struct{ db *sql.DB }

func (m hangingModel) Respond(ctx context.Context, in turn.Input) (turn.Output, error) {
	if err := refund(ctx, m.db, in); err != nil {
		return turn.Output{}, err
	}
	fmt.Println(inModelLine + in.Request.ID)
	<-ctx.Done()
	return turn.Output{}, ctx.Err()
}

// workerProcess is the worker that gets killed: it serves the task queue until SIGKILL.
func workerProcess() int {
	parts := strings.SplitN(os.Getenv(envWorker), "|", 3)
	if len(parts) != 3 {
		fmt.Fprintln(os.Stderr, "worker process: bad", envWorker)
		return 2
	}
	st, err := openStores(context.Background(), parts[1])
	if err == nil {
		var c client.Client
		if c, err = dial(parts[0]); err == nil {
			_, err = newWorker(c, st, strings.Split(parts[2], ","), hangingModel{db: st.db}, slog.New(slog.DiscardHandler))
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker process:", err)
		return 1
	}
	select {} // until killed
}
