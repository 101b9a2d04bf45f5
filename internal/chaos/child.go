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
	"syscall"
	"time"

	"github.com/IBM/sarama"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
	"github.com/turnstile-go/turnstile/session/sqlsession"
	"github.com/turnstile-go/turnstile/turn"
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
	Role string // "broker" or "member"
	Name string

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
	Faults      modelFaults
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

// runMember is a host's main.go: a turn.Runner with the fake model on the PostgreSQL stores,
// behind a consumer.Consumer, until SIGTERM (drain, commit, leave) or a kill.
func runMember(a childArgs) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("member", a.Name)
	dsn, err := withAppName(a.DSN, a.AppName)
	if err != nil {
		log.Error("dsn", "err", err)
		return exitFailed
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		log.Error("open database", "err", err)
		return exitFailed
	}
	defer db.Close()
	// The stores' calls plus the model's refunds, which run while a turn holds no connection.
	db.SetMaxOpenConns(a.MaxInFlight + 4)
	sessions, err := sqlsession.New(db, sqlsession.PostgreSQL, sqlsession.Options{TablePrefix: a.Prefix, Concurrency: a.MaxInFlight})
	if err != nil {
		log.Error("session store", "err", err)
		return exitFailed
	}
	dedup, err := sqlinbox.New(db, sqlinbox.PostgreSQL, sqlinbox.Options{TablePrefix: a.Prefix, Concurrency: a.MaxInFlight})
	if err != nil {
		log.Error("inbox", "err", err)
		return exitFailed
	}
	m := newModel(db, a.Prefix, a.Faults)
	bursts := make(chan os.Signal, 1)
	signal.Notify(bursts, syscall.SIGUSR1)
	go func() {
		for range bursts {
			m.burst()
		}
	}()

	runner := &turn.Runner{Model: m, Sessions: sessions, Inbox: dedup, TurnTimeout: 30 * time.Second, Logger: log}
	c, err := consumer.New(consumer.Config{
		Brokers:         a.Brokers,
		GroupID:         a.Group,
		RequestsTopic:   a.Requests,
		ResultsTopic:    a.Results,
		DeadLetterTopic: a.DeadLetters,
		MaxInFlight:     a.MaxInFlight,
		ShutdownTimeout: 10 * time.Second,
		CommitInterval:  250 * time.Millisecond,
		Sarama:          memberSarama(a.Name),
		Logger:          log,
	}, consumer.RunnerHandler(runner))
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
