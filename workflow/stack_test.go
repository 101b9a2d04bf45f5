package workflow

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	tworker "go.temporal.io/sdk/worker"
	twf "go.temporal.io/sdk/workflow"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
	"github.com/turnstile-go/turnstile/internal/sqltest"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/session/sqlsession"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turntest"
)

// wait bounds how long a dev-server test waits for the system to converge: a deadline for a
// stuck test, never an assertion about speed.
const wait = 3 * time.Minute

// stack is one dev-server test's world: a kfake cluster with its topics, SQLite stores, a
// Temporal client on the shared dev server and a task queue of its own.
type stack struct {
	t                      testing.TB
	cluster                *turntest.Cluster
	requests, results, dlq string
	group                  string
	db                     *sql.DB
	sessions               *sqlsession.Store
	inbox                  *sqlinbox.Inbox
	client                 client.Client
	taskQueue              string
	model                  *recordingModel
	states                 *MemoryLedger // the workers' StateStore
	logs                   *logCapture
}

func newStack(t testing.TB, partitions int32) *stack {
	t.Helper()
	host := needServer(t)
	s := &stack{t: t, model: &recordingModel{}, states: &MemoryLedger{}, logs: &logCapture{}}
	s.cluster = turntest.NewCluster(t, turntest.Options{Brokers: 3})
	s.requests = s.cluster.CreateTopic(t, "requests", partitions)
	s.results = s.cluster.CreateTopic(t, "results", partitions)
	s.dlq = s.cluster.CreateTopic(t, "dlq", partitions)
	s.group = s.cluster.Unique("group")
	s.taskQueue = s.cluster.Unique("tq")
	s.db = sqltest.SQLiteFile(t)
	var err error
	s.sessions, err = sqlsession.New(s.db, sqlsession.SQLite, sqlsession.Options{})
	require.NoError(t, err)
	require.NoError(t, s.sessions.Migrate(context.Background()))
	s.inbox, err = sqlinbox.New(s.db, sqlinbox.SQLite, sqlinbox.Options{})
	require.NoError(t, err)
	require.NoError(t, s.inbox.Migrate(context.Background()))
	s.client, err = client.Dial(client.Options{
		HostPort: host, Namespace: "default",
		ContextPropagators: []twf.ContextPropagator{NewContextPropagator()},
		Logger:             tlog.NewStructuredLogger(slog.New(s.logs)),
	})
	require.NoError(t, err)
	t.Cleanup(s.client.Close)
	return s
}

// runner returns a Runner over the stack's stores with model m.
func (s *stack) runner(m turn.ModelClient) *turn.Runner {
	// The recording model echoes its input: long conversations compact with a scripted
	// summarizer, whose calls the model's records do not show.
	return &turn.Runner{Model: m, Sessions: s.sessions, Inbox: s.inbox, TurnTimeout: 30 * time.Second, Logger: slog.New(s.logs),
		Summarizer: &turntest.FactSummarizer{}}
}

// startWorker runs a worker of the stack's task queue with the stack's model until the test
// ends; tune may change its options.
func (s *stack) startWorker(tune func(*WorkerOptions)) tworker.Worker {
	return s.startWorkerWith(tune, tworker.Options{})
}

// startWorkerWith is startWorker with the SDK worker's options wo.
func (s *stack) startWorkerWith(tune func(*WorkerOptions), wo tworker.Options) tworker.Worker {
	t := s.t
	t.Helper()
	pub, err := NewKafkaPublisher(s.cluster.Brokers(), s.cluster.Config(), s.results, s.dlq)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	opts := WorkerOptions{Runner: s.runner(s.model), Publisher: pub, States: s.states, Logger: slog.New(s.logs), RetryInitial: 50 * time.Millisecond, RetryMax: time.Second}
	if tune != nil {
		tune(&opts)
	}
	w := tworker.New(s.client, s.taskQueue, wo)
	require.NoError(t, Register(w, opts))
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)
	return w
}

// bridge returns a bridge of the stack's task queue.
func (s *stack) bridge(opts BridgeOptions) *Bridge {
	s.t.Helper()
	opts.TaskQueue = s.taskQueue
	if opts.IDPrefix == "" {
		opts.IDPrefix = s.taskQueue + "-"
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(s.logs)
	}
	b, err := NewBridge(s.client, opts)
	require.NoError(s.t, err)
	return b
}

// startMember runs a consumer group member that hands records to h, until the test ends.
func (s *stack) startMember(h consumer.Handler, tap *HeaderTap) {
	s.t.Helper()
	s.startConsumer(h, func(cfg *consumer.Config) {
		if tap != nil {
			cfg.Sarama.Consumer.Interceptors = []sarama.ConsumerInterceptor{tap}
		}
	})
}

// produce writes req as a record keyed by its conversation, with headers.
func (s *stack) produce(req turn.Request, headers map[string]string) {
	s.t.Helper()
	value, err := req.Encode()
	require.NoError(s.t, err)
	s.cluster.Produce(s.t, s.requests, req.ConversationID, value, headers)
}

// status queries a conversation's workflow.
func (s *stack) status(ctx context.Context, b *Bridge, conv string) (Status, error) {
	v, err := s.client.QueryWorkflow(ctx, b.WorkflowID(conv), "", QueryStatus)
	if err != nil {
		return Status{}, err
	}
	var st Status
	return st, v.Get(&st)
}

// waitApplied waits until the conversation's workflow has applied n turns.
func (s *stack) waitApplied(b *Bridge, conv string, n int64) Status {
	s.t.Helper()
	return s.waitAppliedWithin(b, conv, n, wait)
}

// waitAppliedWithin is waitApplied with a deadline of its own, for long tests.
func (s *stack) waitAppliedWithin(b *Bridge, conv string, n int64, within time.Duration) Status {
	s.t.Helper()
	var last Status
	require.Eventually(s.t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := s.status(ctx, b, conv)
		if err == nil {
			last = st
		}
		return err == nil && st.Applied >= n
	}, within, 50*time.Millisecond, "conversation %s: want %d applied, last status %+v", conv, n, last)
	return last
}

// committedAll waits until the group's committed offsets reach the end of the requests topic.
func (s *stack) committedAll(partitions int32) {
	s.t.Helper()
	end := s.cluster.RecordCount(s.t, s.requests)
	require.Eventually(s.t, func() bool {
		var sum int64
		for p := int32(0); p < partitions; p++ {
			if off := s.cluster.CommittedOffset(s.t, s.group, s.requests, p); off > 0 {
				sum += off
			}
		}
		return sum == end
	}, wait, 50*time.Millisecond, "committed offsets reach the end offsets (%d records)", end)
}

// sessionOf returns the conversation's session with up to 10,000 events.
func (s *stack) sessionOf(user, conv string) session.Session {
	s.t.Helper()
	sess, err := s.sessions.Get(context.Background(), session.Key{App: turn.DefaultApp, User: user, Conversation: conv}, 10_000)
	require.NoError(s.t, err)
	return sess
}

// logCapture is a slog handler that keeps every message, for tests that look for warnings.
type logCapture struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logCapture) Enabled(context.Context, slog.Level) bool { return true }
func (l *logCapture) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", r.Level, r.Message)
	r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s=%v", a.Key, a.Value); return true })
	l.mu.Lock()
	l.msgs = append(l.msgs, b.String())
	l.mu.Unlock()
	return nil
}
func (l *logCapture) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logCapture) WithGroup(string) slog.Handler      { return l }

// matching returns the captured messages that contain sub.
func (l *logCapture) matching(sub string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, m := range l.msgs {
		if strings.Contains(m, sub) {
			out = append(out, m)
		}
	}
	return out
}

// discardLogger drops everything.
// answered returns the request ids with a record on the results or the dead-letter topic.
func (s *stack) answered() map[string]bool {
	s.t.Helper()
	out := map[string]bool{}
	for _, topic := range []string{s.results, s.dlq} {
		n := s.cluster.RecordCount(s.t, topic)
		for _, m := range s.cluster.ReadAll(s.t, topic, int(n), wait) {
			out[turntest.HeaderMap(m)[consumer.HeaderRequestID]] = true
		}
	}
	return out
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
