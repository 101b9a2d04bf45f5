package chaos

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/IBM/sarama"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	"github.com/twmb/franz-go/pkg/kfake"
	"go.temporal.io/sdk/client"
	tworker "go.temporal.io/sdk/worker"
	twf "go.temporal.io/sdk/workflow"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/session/sqlsession"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/workflow"
)

// envChild carries a child process's role and arguments, as JSON (childArgs).
const envChild = "TURNSTILE_CHAOS_CHILD"

// Exit codes of the child processes.
const (
	exitOK     = 0
	exitFailed = 1
	// exitPoison is a member's exit when its model met a poison request: a crash the run
	// provoked, not a failure of the member.
	exitPoison = 86
)

// childArgs is what a child process is told through envChild.
type childArgs struct {
	Role string // "broker", "member" or "worker"
	Name string
	Cell Cell

	// broker
	Port    int
	DataDir string

	// member
	Brokers     []string
	DSN         string
	AppName     string // the PostgreSQL application_name of the member's connections
	Prefix      string
	Group       string
	Requests    string
	Results     string
	DeadLetters string
	MaxInFlight int
	MaxBatch    int // consumer.Config.MaxBatch (Cell.MemberMaxBatch); over 1 also turns telemetry on
	Faults      modelFaults

	// Temporal mode: the dev server's frontend and the conversation workflows' task queue.
	TemporalHost string
	TaskQueue    string
}

// ChildMain runs the broker or member role and exits when the environment says this process
// is a child of a chaos run; otherwise it returns at once. Call it first thing in main (or in
// TestMain) of the program that Config.Exe names.
func ChildMain() {
	raw := os.Getenv(envChild)
	if raw == "" {
		return
	}
	var a childArgs
	if err := json.Unmarshal([]byte(raw), &a); err != nil {
		fmt.Fprintf(os.Stderr, "chaos child: %s: %v\n", envChild, err)
		os.Exit(exitFailed)
	}
	switch a.Role {
	case "broker":
		os.Exit(runBroker(a))
	case "member":
		os.Exit(runMember(a))
	case "worker":
		os.Exit(runWorker(a))
	}
	fmt.Fprintf(os.Stderr, "chaos child: unknown role %q\n", a.Role)
	os.Exit(exitFailed)
}

// runBroker serves a one-broker kfake cluster on 127.0.0.1:Port that keeps its state in
// DataDir, fsyncing every write, until SIGTERM; then it closes the cluster, which saves the
// rest of its state, and exits. A new process on the same directory and port continues it.
func runBroker(a childArgs) int {
	c, err := kfake.NewCluster(
		kfake.Ports(a.Port),
		kfake.DataDir(a.DataDir),
		kfake.SyncWrites(),
		// Classic groups refuse a session timeout below this minimum (6 s by default).
		kfake.GroupMinSessionTimeout(100*time.Millisecond),
		kfake.WithLogger(kfake.BasicLogger(os.Stderr, kfake.LogLevelWarn)),
	)
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos broker: %v\n", err)
		return exitFailed
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	fmt.Printf("ready %s\n", c.ListenAddrs()[0])
	<-sig
	c.Close()
	return exitOK
}

// memberStores are a member's or worker's connections and stores.
type memberStores struct {
	db       *sql.DB
	sessions session.Store
	inbox    *sqlinbox.Inbox
}

// openStores opens the PostgreSQL stores of a child, its connections named AppName. The
// session store is wrapped in panickyStore.
func openStores(a childArgs) (*memberStores, error) {
	dsn, err := withAppName(a.DSN, a.AppName)
	if err != nil {
		return nil, fmt.Errorf("dsn: %w", err)
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	// The stores' calls plus the model's steps, which run while a turn holds no connection,
	// and the relay's claims and deliveries.
	db.SetMaxOpenConns(a.MaxInFlight + 8)
	sessionOpts := sqlsession.Options{TablePrefix: a.Prefix, Concurrency: a.MaxInFlight}
	inboxOpts := sqlinbox.Options{TablePrefix: a.Prefix, Concurrency: a.MaxInFlight}
	if a.Cell.Batched() {
		batch := sqlsession.Batching{Size: max(a.MaxInFlight/2, 2)}
		sessionOpts.Batch, inboxOpts.Batch = batch, batch
		sessionOpts.Cache = 64 // fewer sessions than the run's conversations: some are dropped
	}
	sessions, err := sqlsession.New(db, sqlsession.PostgreSQL, sessionOpts)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("session store: %w", err)
	}
	dedup, err := sqlinbox.New(db, sqlinbox.PostgreSQL, inboxOpts)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("inbox: %w", err)
	}
	return &memberStores{db: db, sessions: panickyStore{sessions}, inbox: dedup}, nil
}

// newRunner returns the Runner of a member (direct mode) or a worker (Temporal mode): the
// fake model on the stores, its bursts started by SIGUSR1, compacting conversations past
// chaosHistoryLimit events with the model as the summarizer.
func newRunner(a childArgs, st *memberStores, log *slog.Logger) *turn.Runner {
	m := newModel(st.db, a.Prefix, a.Faults)
	bursts := make(chan os.Signal, 1)
	signal.Notify(bursts, syscall.SIGUSR1)
	go func() {
		for range bursts {
			m.burst()
		}
	}()
	return &turn.Runner{Model: m, Sessions: st.sessions, Inbox: st.inbox, TurnTimeout: 30 * time.Second, Logger: log,
		HistoryLimit: chaosHistoryLimit}
}

// runMember is a host's main.go: in direct mode a turn.Runner with the fake model on the
// PostgreSQL stores behind a consumer.Consumer, with an inbox.Relay delivering the turns'
// deferred emails, in Temporal mode the workflow bridge behind
// it (with a Handler decorator that panics on the requests of kindPanicHandler), configured
// as the cell says, until SIGTERM (drain, commit, leave) or a kill.
func runMember(a childArgs) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("member", a.Name)
	cfg := consumer.Config{
		Brokers:         a.Brokers,
		GroupID:         a.Group,
		RequestsTopic:   a.Requests,
		ResultsTopic:    a.Results,
		DeadLetterTopic: a.DeadLetters,
		MaxInFlight:     a.MaxInFlight,
		ShutdownTimeout: 10 * time.Second,
		CommitInterval:  250 * time.Millisecond,
		// An always rate-limited request is dead-lettered after a few short pauses, not
		// after the default's quarter of an hour.
		MaxPause:      time.Second,
		MaxRateLimits: 5,
		Sarama:        memberSarama(a.Name),
		Logger:        log,
		MaxBatch:      a.MaxBatch, // 0 and 1 both leave batching off
	}
	if a.Cell == CellByKeyOTel || a.MaxBatch > 1 {
		tel, shutdown := sdkTelemetry()
		defer shutdown()
		cfg.Telemetry = tel
	}
	switch a.Cell {
	case CellByPartition:
		cfg.Ordering = consumer.OrderByPartition
	case CellTransactional:
		cfg.Transactional = &consumer.Transactional{IDPrefix: "chaos-" + a.Prefix, InstanceID: a.Name}
	}
	var h consumer.Handler
	if a.Cell.Temporal() {
		c, err := temporalClient(a.TemporalHost)
		if err != nil {
			log.Error("temporal client", "err", err)
			return exitFailed
		}
		defer c.Close()
		b, err := workflow.NewBridge(c, workflow.BridgeOptions{TaskQueue: a.TaskQueue, Logger: log,
			Config: workflow.Config{MaxTurnsPerRun: 50, IdleTimeout: time.Hour}})
		if err != nil {
			log.Error("bridge", "err", err)
			return exitFailed
		}
		h = panickyBridge{b, log}
	} else {
		st, err := openStores(a)
		if err != nil {
			log.Error("stores", "err", err)
			return exitFailed
		}
		defer st.db.Close()
		h = consumer.RunnerHandler(newRunner(a, st, log))
		// The relay runs until the consumer has drained (deferred calls run last first: it
		// is stopped and waited for before the database closes).
		relayCtx, stopRelay := context.WithCancel(context.Background())
		defer runRelay(relayCtx, emailRelay(st.db, st.inbox, a.Prefix, log), log)()
		defer stopRelay()
	}
	c, err := consumer.New(cfg, h)
	if err != nil {
		log.Error("consumer", "err", err)
		return exitFailed
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := c.Run(ctx); err != nil {
		log.Error("consumer stopped", "err", err)
		return exitFailed
	}
	return exitOK
}

// runWorker is a Temporal worker of the conversation workflows (CellTemporal): the Runner of
// direct mode and its relay, publishing results and dead letters with
// workflow.KafkaPublisher, until SIGTERM or a kill.
func runWorker(a childArgs) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("worker", a.Name)
	st, err := openStores(a)
	if err != nil {
		log.Error("stores", "err", err)
		return exitFailed
	}
	defer st.db.Close()
	c, err := temporalClient(a.TemporalHost)
	if err != nil {
		log.Error("temporal client", "err", err)
		return exitFailed
	}
	defer c.Close()
	pub, err := workflow.NewKafkaPublisher(a.Brokers, memberSarama(a.Name), a.Results, a.DeadLetters)
	if err != nil {
		log.Error("publisher", "err", err)
		return exitFailed
	}
	defer pub.Close()
	runner := newRunner(a, st, log)
	// The activities run the Runner here, so the relay runs here too, until the worker stopped.
	relayCtx, stopRelay := context.WithCancel(context.Background())
	defer runRelay(relayCtx, emailRelay(st.db, st.inbox, a.Prefix, log), log)()
	defer stopRelay()
	// Start checks the namespace with the server, which may be restarting (a fault of the
	// run): try again for a minute, as an orchestrator's restarts would.
	var wk tworker.Worker
	for try := 0; ; try++ {
		wk = tworker.New(c, a.TaskQueue, tworker.Options{MaxConcurrentActivityExecutionSize: a.MaxInFlight})
		if err := workflow.Register(wk, workflow.WorkerOptions{Runner: runner, Publisher: pub,
			HeartbeatTimeout: 2 * time.Second, RetryMax: 5 * time.Second, MaxRateLimits: workerMaxRateLimits, Logger: log}); err != nil {
			log.Error("register", "err", err)
			return exitFailed
		}
		err := wk.Start()
		if err == nil {
			break
		}
		if try == 60 {
			log.Error("worker start", "err", err)
			return exitFailed
		}
		log.Warn("worker start failed; trying again", "err", err)
		time.Sleep(time.Second)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	<-sig
	wk.Stop()
	return exitOK
}

// temporalClient is a lazy client of the dev server (it connects on first use, so that a
// child starts while the server restarts), with turnstile's context propagator.
func temporalClient(host string) (client.Client, error) {
	return client.NewLazyClient(client.Options{HostPort: host, Logger: quietTemporal{},
		ContextPropagators: []twf.ContextPropagator{workflow.NewContextPropagator()}})
}

// quietTemporal drops the Temporal SDK's logs below errors.
type quietTemporal struct{}

func (quietTemporal) Debug(string, ...any) {}
func (quietTemporal) Info(string, ...any)  {}
func (quietTemporal) Warn(string, ...any)  {}
func (quietTemporal) Error(msg string, kv ...any) {
	fmt.Fprintln(os.Stderr, append([]any{"temporal:", msg}, kv...)...)
}

// memberSarama is the members' client configuration: a group that notices a killed member
// within 3 s, and retries long enough to ride out a broker restart.
func memberSarama(name string) *sarama.Config {
	sc := sarama.NewConfig()
	sc.Version = sarama.V3_6_0_0
	sc.ClientID = "chaos-" + name
	sc.Net.DialTimeout = 3 * time.Second
	// Above the rebalance timeout: a JoinGroup is answered once the group has rejoined, which
	// can take that long when a member is slow to give up its claims.
	sc.Net.ReadTimeout = 30 * time.Second
	sc.Net.WriteTimeout = 5 * time.Second
	sc.Metadata.Retry.Max = 40
	sc.Metadata.Retry.Backoff = 250 * time.Millisecond
	sc.Consumer.Group.Session.Timeout = 3 * time.Second
	sc.Consumer.Group.Heartbeat.Interval = 300 * time.Millisecond
	sc.Consumer.Group.Rebalance.Timeout = 8 * time.Second
	sc.Consumer.Group.Rebalance.Retry.Max = 40
	sc.Consumer.Group.Rebalance.Retry.Backoff = 250 * time.Millisecond
	sc.Consumer.MaxWaitTime = 100 * time.Millisecond
	sc.Consumer.Retry.Backoff = 250 * time.Millisecond
	sc.Producer.Retry.Max = 40
	sc.Producer.Retry.Backoff = 250 * time.Millisecond
	return sc
}

// withAppName sets application_name in a PostgreSQL URL, so that the run finds its members'
// connections in pg_stat_activity.
func withAppName(dsn, name string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", fmt.Errorf("parse DSN: %w", err)
	}
	q := u.Query()
	q.Set("application_name", name)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// panickyBridge is the Temporal cell's Handler: the bridge behind a decorator that panics on
// the requests of kindPanicHandler, alone or in a batch. It forwards the dead-letter notice
// (consumer.DeadLetterNotifier), so the workflow passes over the requests it dead-letters, and
// logs each batch it hands off (batchHandedOff), for Figures.Batches.
type panickyBridge struct {
	*workflow.Bridge
	log *slog.Logger
}

func (h panickyBridge) Handle(ctx context.Context, req turn.Request) (*turn.Result, error) {
	if strings.HasSuffix(req.Text, kindPanicHandler.suffix()) {
		panic("chaos: the member's Handler panics on request " + req.ID)
	}
	return h.Bridge.Handle(ctx, req)
}

// HandleBatch implements consumer.BatchHandler: a batch that holds a request of
// kindPanicHandler panics (the consumer then serves its requests one by one, and Handle panics
// on that one); any other is the bridge's.
func (h panickyBridge) HandleBatch(ctx context.Context, reqs []turn.Request) error {
	for _, req := range reqs {
		if strings.HasSuffix(req.Text, kindPanicHandler.suffix()) {
			panic("chaos: the member's Handler panics on a batch with request " + req.ID)
		}
	}
	if err := h.Bridge.HandleBatch(ctx, reqs); err != nil {
		return err
	}
	h.log.Warn(batchHandedOff, "records", len(reqs), "conversation_id", reqs[0].ConversationID)
	return nil
}

// batchHandedOff is the message of the line a member logs for each batch it handed off.
const batchHandedOff = "chaos: batch handed off"

var (
	_ consumer.DeadLetterNotifier = panickyBridge{}
	_ consumer.BatchHandler       = panickyBridge{}
)

// workerMaxRateLimits is the workers' WorkerOptions.MaxRateLimits. The activity counts its
// rate-limited attempts without telling a request's own limit from the provider's, so the bound
// must outlast a 429 burst (BurstLength 2 s at the model's 250 ms, about 8 attempts) while the
// always-limited request (100 ms) is still dead-lettered within seconds.
const workerMaxRateLimits = 16
