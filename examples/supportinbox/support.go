package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/IBM/sarama"
	"github.com/turnstile-go/turnstile/deadletter"
	"github.com/turnstile-go/turnstile/examples/internal/demo"
	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
	"github.com/turnstile-go/turnstile/session/sqlsession"
	"github.com/turnstile-go/turnstile/turn/agent"
	"github.com/turnstile-go/turnstile/turntest"
)

// Defaults of Config, after the ADK note's worked example.
const (
	DefaultCustomers   = 96
	DefaultMembers     = 8
	DefaultPartitions  = 48
	DefaultPoisonBytes = 6_000_000 // "a 6 MB pasted log"
	DefaultTimeout     = 3 * time.Minute
	// ContextWindow is the largest prompt, in bytes, the demo model takes.
	ContextWindow = 1 << 20
)

// Config configures a run. The zero value is the worked example: 96 customers, 8 members,
// 48 partitions, a 6 MB poison email.
type Config struct {
	// Customers is how many customers write twice; at least 1. One of them is Protagonist.
	Customers int
	// Members and Partitions size the consumer group and the requests topic.
	Members, Partitions int
	// PoisonBytes is the size of the pasted log in the poison email.
	PoisonBytes int
	// Timeout bounds the wait for every email's outcome.
	Timeout time.Duration
	// Logger gets the members' logs; default: discarded.
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Customers, DefaultCustomers)
	def(&c.Members, DefaultMembers)
	def(&c.Partitions, DefaultPartitions)
	def(&c.PoisonBytes, DefaultPoisonBytes)
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

func (c *Config) validate() error {
	switch {
	case c.Customers < 1:
		return fmt.Errorf("Customers: %d, want at least 1", c.Customers)
	case c.Members < 2:
		return fmt.Errorf("Members: %d, want at least 2 (one is redeployed)", c.Members)
	case c.Partitions < c.Members:
		return fmt.Errorf("Partitions: %d, want at least Members (%d)", c.Partitions, c.Members)
	case c.PoisonBytes <= ContextWindow || c.PoisonBytes > MaxRecordBytes-64<<10:
		return fmt.Errorf("PoisonBytes: %d, want over the context window (%d) and under the record limit (%d)",
			c.PoisonBytes, ContextWindow, MaxRecordBytes-64<<10)
	}
	return nil
}

// Report is what a run saw and checked.
type Report struct {
	// Customers, Emails, Members and Partitions describe the run.
	Customers, Emails, Members, Partitions int
	// Replies counts the emails with a reply on the results topic; ReplyRecords counts the
	// records, repeats included (the mail sender dedups them on the request id).
	Replies, ReplyRecords int
	// Refunds counts the refunds the payment service issued; RefundCalls the refund requests
	// it got, repeats included: equal, for the journal answers a completed refund step on a
	// re-run of its turn without calling the payment service again.
	Refunds, RefundCalls int
	// ModelCalls counts the fake LLM's model calls (Complete), ToolCalls the tool calls run
	// inside turns, per tool (deferred ones are not run inside a turn).
	ModelCalls int
	ToolCalls  map[string]int
	// Mails counts the emails the mail service sent, one per idempotency key; MailRequests
	// the send requests the outbox relay made, redeliveries included.
	Mails, MailRequests int
	// Steps is the journal of Protagonist's second email: its agent steps, and where each ran.
	Steps []string
	// DeadLetters are the records on the dead-letter topic, one per request id.
	DeadLetters []deadletter.Letter
	// Protagonist's partition, and the story of the redeploy.
	Partition int32
	Redeploy  string
	// Transcript is Protagonist's conversation as the session store holds it.
	Transcript []string
	// Elapsed is the wall time from the first email produced to the outbox drained.
	Elapsed time.Duration
	// Checks are the run's checks, in order.
	Checks demo.Checks
}

// OK reports whether every check passed.
func (r Report) OK() bool { return r.Checks.OK() }

// run plays the support inbox: it starts an embedded broker and the members, waits until they
// share the partitions, delivers the emails, redeploys the member that is in the middle of
// Protagonist's second turn, waits for every email's outcome and checks them. It writes the
// story and the report to out. The error is for a run that could not finish.
func run(ctx context.Context, cfg Config, out io.Writer) (Report, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return Report{}, fmt.Errorf("supportinbox: %w", err)
	}
	mb := newMailbag(cfg.Customers, cfg.Partitions, cfg.PoisonBytes)
	rep := Report{Customers: cfg.Customers, Emails: len(mb.order), Members: cfg.Members, Partitions: cfg.Partitions, Partition: mb.partition[Protagonist]}

	kc, err := turntest.Start(turntest.Options{MaxMessageBytes: MaxRecordBytes + 1<<20})
	if err != nil {
		return rep, err
	}
	defer kc.Close()
	brokers := kc.Brokers()
	big := map[string]string{"max.message.bytes": strconv.Itoa(MaxRecordBytes + 1<<20)}
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, err = turntest.CreateTopics(tctx, brokers, nil,
		turntest.Topic{Name: RequestsTopic, Partitions: int32(cfg.Partitions), Configs: big},
		turntest.Topic{Name: ResultsTopic, Partitions: int32(cfg.Partitions)},
		turntest.Topic{Name: DeadLetterTopic, Partitions: int32(cfg.Partitions), Configs: big})
	cancel()
	if err != nil {
		return rep, err
	}
	db, cleanup, err := openSQLite(ctx)
	if err != nil {
		return rep, err
	}
	defer cleanup()
	sessions, err := sqlsession.New(db, sqlsession.SQLite, sqlsession.Options{})
	if err != nil {
		return rep, err
	}
	ib, err := sqlinbox.New(db, sqlinbox.SQLite, sqlinbox.Options{})
	if err != nil {
		return rep, err
	}
	if err := errors.Join(sessions.Migrate(ctx), ib.Migrate(ctx)); err != nil {
		return rep, err
	}

	pay, ml := newPayments(), newMail()
	victim := mb.byConv[Protagonist].emails[1]
	sup, err := newSupport(pay, ml, ContextWindow, victim.ID)
	if err != nil {
		return rep, err
	}
	fl := &fleet{Fleet: &demo.Fleet{Log: cfg.Logger}, brokers: brokers, group: "support-agents", sessions: sessions, inbox: ib, support: sup, log: cfg.Logger}
	defer fl.StopAll()
	// One relay for the fleet, a service of its own like the mail gateway: SQLite has one
	// writer at a time, and eight relays polling it would only queue on its lock. On
	// PostgreSQL each member could run one: their claims lease intents and skip each other's.
	relay := &inbox.Relay{Outbox: ib, Deliver: agent.Deliverer(sup.tools...), Poll: 100 * time.Millisecond, Lease: 10 * time.Second,
		Backoff: inbox.RelayBackoff{Initial: 100 * time.Millisecond, Max: time.Second}, Logger: cfg.Logger}
	rctx, cancelRelay := context.WithCancel(ctx)
	relayDone := make(chan error, 1)
	go func() { relayDone <- relay.Run(rctx) }()
	stopRelay := sync.OnceValue(func() error {
		cancelRelay()
		return <-relayDone
	})
	defer stopRelay()
	fmt.Fprintf(out, "support inbox: %d customers write %d emails to %s (%d partitions); %d members in group %s\n",
		cfg.Customers, rep.Emails, RequestsTopic, cfg.Partitions, cfg.Members, fl.group)
	for range cfg.Members {
		if _, err := fl.start(); err != nil {
			return rep, err
		}
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	a, err := waitStable(sctx, brokers, fl.group, cfg.Members, cfg.Partitions)
	cancel()
	if err != nil {
		return rep, err
	}
	fmt.Fprintf(out, "group stable, partitions per member: %s\n", describeAssignment(a))
	fmt.Fprintf(out, "%s hashes to partition %d; the poison email's conversation %s too, and arrives between its two emails\n",
		Protagonist, rep.Partition, mb.poison.ConversationID)

	w, err := demo.NewWatcher(brokers, saramaConfig("support-watcher"), ResultsTopic, DeadLetterTopic, sarama.OffsetOldest)
	if err != nil {
		return rep, err
	}
	defer w.Close()
	start := time.Now()
	if err := produce(brokers, mb.order); err != nil {
		return rep, err
	}
	if err := waitOutcomes(ctx, cfg, &rep, mb, w, fl, sup, out); err != nil {
		return rep, err
	}
	fl.StopAll()
	w.Close()
	if err := drain(ctx, ib, cfg.Timeout); err != nil {
		return rep, err
	}
	rep.Elapsed = time.Since(start)
	if err := stopRelay(); err != nil {
		return rep, err
	}
	if err := check(ctx, &rep, mb, w, sup, pay, ml, sessions, ib); err != nil {
		return rep, err
	}
	rep.print(out)
	return rep, nil
}

// waitOutcomes waits until every email has a reply or a dead letter, redeploying the member
// that holds Protagonist's second turn when it reports in.
func waitOutcomes(ctx context.Context, cfg Config, rep *Report, mb *mailbag, w *demo.Watcher, fl *fleet, sup *support, out io.Writer) error {
	deadline := time.NewTimer(cfg.Timeout)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	redeployed := make(chan string, 1)
	held := sup.llm.held
	for {
		if err := fl.Failed(); err != nil {
			return err
		}
		replies, dead := w.Counts()
		if replies+dead >= len(mb.order) && held == nil && redeployed == nil {
			return nil
		}
		select {
		case h := <-held:
			held = nil
			fmt.Fprintf(out, "%s's second email is mid-loop on %s: the refund tool issued %s, the next model call is in flight; redeploying %s\n",
				Protagonist, h.member, h.refund, h.member)
			go func() { redeployed <- redeploy(fl, h) }()
		case msg := <-redeployed:
			redeployed = nil
			rep.Redeploy = msg
			fmt.Fprintln(out, msg)
		case <-tick.C:
		case <-deadline.C:
			return fmt.Errorf("supportinbox: %d replies and %d dead letters for %d emails after %s", replies, dead, len(mb.order), cfg.Timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// redeploy stops the member holding the turn, as a rolling deploy does (graceful: the turns
// in flight get the shutdown timeout, then are cancelled), and starts its replacement.
func redeploy(fl *fleet, h heldTurn) string {
	began := time.Now()
	st := fl.Stop(h.member)
	name, err := fl.start()
	if err != nil {
		return fmt.Sprintf("redeploy: %s stopped, but its replacement failed to start: %v", h.member, err)
	}
	return fmt.Sprintf("redeploy: %s stopped in %s (%d turns done, %d abandoned mid-turn and left uncommitted); %s started in its place",
		h.member, time.Since(began).Round(time.Millisecond), st.Turns, st.Abandoned, name)
}

// drain waits until the relay has settled every intent of the outbox: none pending.
func drain(ctx context.Context, ob inbox.Outbox, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		pending, err := ob.Intents(ctx, inbox.IntentFilter{Status: inbox.IntentPending, Limit: 1})
		switch {
		case err != nil:
			return fmt.Errorf("supportinbox: drain the outbox: %w", err)
		case len(pending) == 0:
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("supportinbox: drain the outbox: intent %s still pending: %w", pending[0].ID, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// openSQLite opens a SQLite database in a temporary directory, removed by cleanup.
func openSQLite(ctx context.Context) (*sql.DB, func(), error) {
	dir, err := os.MkdirTemp("", "turnstile-supportinbox-")
	if err != nil {
		return nil, nil, err
	}
	path := filepath.Join(dir, "support.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)")
	if err == nil {
		err = db.PingContext(ctx)
	}
	cleanup := func() {
		if db != nil {
			db.Close()
		}
		os.RemoveAll(dir)
	}
	if err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("supportinbox: SQLite at %s: %w", path, err)
	}
	return db, cleanup, nil
}
