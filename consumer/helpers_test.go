package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"golang.org/x/net/proxy"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turntest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, turntest.LeakOptions()...) }

// wait bounds how long a test waits for the cluster to converge; it is a deadline for a
// stuck test, never an assertion about speed.
const wait = 60 * time.Second

// env is one test's cluster, topics and shared stores: what several members of one
// service would share in production.
type env struct {
	t                      *testing.T
	cluster                *turntest.Cluster
	requests, results, dlq string
	group                  string
	sessions               *session.MemoryStore
	inbox                  *inbox.MemoryInbox
	calls                  sync.Map // request id -> *atomic.Int64, model calls across members
	ordering               consumer.Ordering
}

// testOrdering is the ordering every member of these tests runs with: by key unless
// TURNSTILE_TEST_ORDERING=by-partition (test.sh runs the package once in each).
var testOrdering = func() consumer.Ordering {
	if os.Getenv("TURNSTILE_TEST_ORDERING") == consumer.OrderByPartition.String() {
		return consumer.OrderByPartition
	}
	return consumer.OrderByKey
}()

func setup(t *testing.T, requestPartitions, resultPartitions int32) *env {
	t.Helper()
	// turntest's 3 s group session on kfake: crash tests wait this long for the dead member's
	// expulsion.
	c := turntest.NewCluster(t, turntest.Options{Brokers: 3})
	return &env{
		t: t, cluster: c, ordering: testOrdering,
		requests: c.CreateTopic(t, "requests", requestPartitions),
		results:  c.CreateTopic(t, "results", resultPartitions),
		dlq:      c.CreateTopic(t, "dlq", requestPartitions),
		group:    c.Unique("group"),
		sessions: session.NewMemoryStore(), inbox: inbox.NewMemoryInbox(),
	}
}

// countCall counts a model call for the request and returns its 1-based number.
func (e *env) countCall(id string) int64 {
	v, _ := e.calls.LoadOrStore(id, new(atomic.Int64))
	return v.(*atomic.Int64).Add(1)
}

func (e *env) callsOf(id string) int64 {
	v, ok := e.calls.Load(id)
	if !ok {
		return 0
	}
	return v.(*atomic.Int64).Load()
}

func (e *env) totalCalls() (n int64) {
	e.calls.Range(func(_, v any) bool { n += v.(*atomic.Int64).Load(); return true })
	return n
}

// echo is the default fake model: it quotes the request and the history length.
func echo(in turn.Input) (turn.Output, error) {
	return turn.Output{Events: []session.Event{{Text: fmt.Sprintf("reply to %q after %d events", in.Request.Text, in.Session.EventCount)}}}, nil
}

// member is one running consumer of the group.
type member struct {
	c      *consumer.Consumer
	cancel context.CancelFunc
	done   chan error
	dialer *cutDialer
}

type memberOpts struct {
	model   func(ctx context.Context, in turn.Input) (turn.Output, error) // default echo
	tune    func(cfg *consumer.Config)
	runner  func(r *turn.Runner)
	handler consumer.Handler // instead of a Runner over the env's stores
	wrap    func(consumer.Handler) consumer.Handler
	before  func(c *consumer.Consumer) // after New, before Run
}

// start runs a member of the group over the env's stores until the test ends or stop.
func (e *env) start(o memberOpts) *member {
	t := e.t
	t.Helper()
	model := o.model
	if model == nil {
		model = func(_ context.Context, in turn.Input) (turn.Output, error) { return echo(in) }
	}
	counted := turn.ModelFunc(func(ctx context.Context, in turn.Input) (turn.Output, error) {
		e.countCall(in.Request.ID)
		return model(ctx, in)
	})
	// The echoing test models would make a summary that grows with every compaction: the
	// hot and backlog conversations compact with a scripted summarizer instead.
	r := &turn.Runner{Model: counted, Sessions: e.sessions, Inbox: e.inbox, TurnTimeout: 30 * time.Second, Logger: testLogger(t),
		Summarizer: &turntest.FactSummarizer{}}
	if o.runner != nil {
		o.runner(r)
	}
	d := &cutDialer{}
	// A crashed member's process is gone: its stores go silent with its network, so nothing it
	// had in flight writes anything (no refund, no late append).
	r.Sessions, r.Inbox = deadSessions{Store: r.Sessions, d: d}, withDeath(r.Inbox, d)
	sc := e.cluster.Config()
	sc.Net.Proxy.Enable = true
	sc.Net.Proxy.Dialer = d
	cfg := consumer.Config{
		Brokers: e.cluster.Brokers(), GroupID: e.group,
		RequestsTopic: e.requests, ResultsTopic: e.results, DeadLetterTopic: e.dlq,
		RevokeGrace: time.Second, ShutdownTimeout: 5 * time.Second, CommitInterval: 100 * time.Millisecond,
		RetryBackoff: 20 * time.Millisecond, MaxRetryBackoff: 200 * time.Millisecond,
		Sarama: sc, Logger: testLogger(t), Ordering: e.ordering,
	}
	if o.tune != nil {
		o.tune(&cfg)
	}
	h := consumer.RunnerHandler(r)
	if o.handler != nil {
		h = o.handler
	}
	if o.wrap != nil {
		h = o.wrap(h)
	}
	c, err := consumer.New(cfg, h)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	if o.before != nil {
		o.before(c)
	}
	m := &member{c: c, cancel: cancel, done: make(chan error, 1), dialer: d}
	go func() { m.done <- c.Run(ctx) }()
	t.Cleanup(func() { m.stop(t) })
	return m
}

// stop shuts the member down gracefully and waits for Run to return.
func (m *member) stop(t *testing.T) {
	t.Helper()
	m.cancel()
	select {
	case err, ok := <-m.done:
		if ok {
			// A member stopped before it connected (a test that skipped right after starting
			// it, say) reports the cancellation; any other error is a failure.
			if !errors.Is(err, context.Canceled) {
				require.NoError(t, err)
			}
			close(m.done)
		}
	case <-time.After(wait):
		t.Fatalf("member did not stop within %v", wait)
	}
}

// crash cuts every connection of the member and refuses new ones, as if its process had
// died: it commits nothing more, and the group expels it when its session times out.
func (m *member) crash() { m.dialer.cut() }

// cutDialer is a sarama proxy dialer whose connections a test can cut at once.
type cutDialer struct {
	mu    sync.Mutex
	dead  bool
	conns []net.Conn
}

var _ proxy.Dialer = (*cutDialer)(nil)

func (d *cutDialer) Dial(network, addr string) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.dead {
		return nil, errors.New("crashed member: no network")
	}
	conn, err := net.DialTimeout(network, addr, 5*time.Second)
	if err == nil {
		d.conns = append(d.conns, conn)
	}
	return conn, err
}

func (d *cutDialer) isDead() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.dead
}

var errCrashed = errors.New("crashed member: no store")

// deadSessions and deadInbox fail every call once their member crashed.
type deadSessions struct {
	session.Store
	d *cutDialer
}

func (s deadSessions) Get(ctx context.Context, k session.Key, n int) (session.Session, error) {
	if s.d.isDead() {
		return session.Session{}, errCrashed
	}
	return s.Store.Get(ctx, k, n)
}

func (s deadSessions) Create(ctx context.Context, k session.Key, st json.RawMessage) (session.Session, error) {
	if s.d.isDead() {
		return session.Session{}, errCrashed
	}
	return s.Store.Create(ctx, k, st)
}

func (s deadSessions) Append(ctx context.Context, k session.Key, v int64, t session.Turn) (session.Appended, error) {
	if s.d.isDead() {
		return session.Appended{}, errCrashed
	}
	return s.Store.Append(ctx, k, v, t)
}

func (s deadSessions) FindTurn(ctx context.Context, k session.Key, id string) ([]session.Event, error) {
	if s.d.isDead() {
		return nil, errCrashed
	}
	return s.Store.FindTurn(ctx, k, id)
}

type deadInbox struct {
	inbox.Inbox
	d *cutDialer
}

func (b deadInbox) Begin(ctx context.Context, d inbox.Delivery) (inbox.Entry, error) {
	if b.d.isDead() {
		return inbox.Entry{}, errCrashed
	}
	return b.Inbox.Begin(ctx, d)
}

func (b deadInbox) Complete(ctx context.Context, id string, res []byte) error {
	if b.d.isDead() {
		return errCrashed
	}
	return b.Inbox.Complete(ctx, id, res)
}

func (b deadInbox) Fail(ctx context.Context, id string, f inbox.Failure) error {
	if b.d.isDead() {
		return errCrashed
	}
	return b.Inbox.Fail(ctx, id, f)
}

func (b deadInbox) MarkDead(ctx context.Context, id, reason string) error {
	if b.d.isDead() {
		return errCrashed
	}
	return b.Inbox.MarkDead(ctx, id, reason)
}

// withDeath wraps ib so that it goes silent when d is cut; an inbox.Outbox stays one, so the
// member's turns keep their step journal and outbox.
func withDeath(ib inbox.Inbox, d *cutDialer) inbox.Inbox {
	if ob, ok := ib.(inbox.Outbox); ok {
		return deadOutbox{deadInbox: deadInbox{Inbox: ib, d: d}, ob: ob}
	}
	return deadInbox{Inbox: ib, d: d}
}

// deadOutbox is deadInbox for an inbox.Outbox: the journal's and the commit's writes die with
// the member; the relay's calls pass through.
type deadOutbox struct {
	deadInbox
	ob inbox.Outbox
}

func (b deadOutbox) Steps(ctx context.Context, key string) ([]inbox.Step, error) {
	if b.d.isDead() {
		return nil, errCrashed
	}
	return b.ob.Steps(ctx, key)
}

func (b deadOutbox) RecordStep(ctx context.Context, key string, s inbox.Step) (inbox.Step, error) {
	if b.d.isDead() {
		return inbox.Step{}, errCrashed
	}
	return b.ob.RecordStep(ctx, key, s)
}

func (b deadOutbox) Promote(ctx context.Context, key string, through int) (int, error) {
	if b.d.isDead() {
		return 0, errCrashed
	}
	return b.ob.Promote(ctx, key, through)
}

func (b deadOutbox) Claim(ctx context.Context, n int, lease time.Duration) ([]inbox.Intent, error) {
	return b.ob.Claim(ctx, n, lease)
}
func (b deadOutbox) Delivered(ctx context.Context, id string, attempt int) error {
	return b.ob.Delivered(ctx, id, attempt)
}
func (b deadOutbox) Retry(ctx context.Context, id string, attempt int, reason string, at time.Time) error {
	return b.ob.Retry(ctx, id, attempt, reason, at)
}
func (b deadOutbox) Bury(ctx context.Context, id string, attempt int, reason string) error {
	return b.ob.Bury(ctx, id, attempt, reason)
}
func (b deadOutbox) Intents(ctx context.Context, f inbox.IntentFilter) ([]inbox.Intent, error) {
	return b.ob.Intents(ctx, f)
}
func (b deadOutbox) RedriveIntent(ctx context.Context, id, note string) (inbox.Intent, error) {
	return b.ob.RedriveIntent(ctx, id, note)
}

func (d *cutDialer) cut() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dead = true
	for _, c := range d.conns {
		_ = c.Close()
	}
}

// testLogger discards logs unless TURNSTILE_TEST_LOG is set.
func testLogger(*testing.T) *slog.Logger {
	if os.Getenv("TURNSTILE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// request builds a valid request of a conversation owned by "u-<conversation>".
func request(conv, text string) turn.Request {
	return turn.Request{Schema: turn.SchemaVersion, ID: uuid.NewString(), ConversationID: conv, UserID: "u-" + conv, Text: text}
}

// produce publishes requests keyed by conversation, in order.
func (e *env) produce(reqs ...turn.Request) {
	e.t.Helper()
	for _, r := range reqs {
		data, err := r.Encode()
		require.NoError(e.t, err)
		e.cluster.Produce(e.t, e.requests, r.ConversationID, data, nil)
	}
}

// resultsByID reads the results topic until it holds at least n records and groups them by
// request id.
func (e *env) resultsByID(n int) map[string][]*sarama.ConsumerMessage {
	e.t.Helper()
	out := map[string][]*sarama.ConsumerMessage{}
	for _, m := range e.cluster.ReadAll(e.t, e.results, n, wait) {
		id := turntest.HeaderMap(m)[consumer.HeaderRequestID]
		out[id] = append(out[id], m)
	}
	return out
}

// distinctResults reads the results topic until it holds results of n distinct request ids
// (repeats of a replayed result make the record count higher), grouped by request id.
func (e *env) distinctResults(n int) map[string][]*sarama.ConsumerMessage {
	e.t.Helper()
	want := n
	for {
		msgs := e.cluster.ReadAll(e.t, e.results, want, wait) // fails the test after wait
		out := map[string][]*sarama.ConsumerMessage{}
		for _, m := range msgs {
			id := turntest.HeaderMap(m)[consumer.HeaderRequestID]
			out[id] = append(out[id], m)
		}
		if len(out) >= n {
			return out
		}
		want = len(msgs) + 1
	}
}

// recv waits for ch to yield or close; it fails the test after wait.
func recv[T any](t *testing.T, ch <-chan T, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(wait):
		t.Fatalf("%s did not happen within %v", what, wait)
	}
}

// eventually waits for cond, polling; it fails the test after wait.
func eventually(t *testing.T, cond func() bool, msgAndArgs ...any) {
	t.Helper()
	require.Eventually(t, cond, wait, 20*time.Millisecond, msgAndArgs...)
}

// history returns the texts of the user events of a conversation, in session order, and
// how many user events each request id has.
func (e *env) history(conv string) (texts []string, perRequest map[string]int) {
	e.t.Helper()
	sess, err := e.sessions.Get(context.Background(), session.Key{App: turn.DefaultApp, User: "u-" + conv, Conversation: conv}, 1<<20)
	require.NoError(e.t, err)
	perRequest = map[string]int{}
	for _, ev := range sess.Events {
		if ev.Author == "user" {
			texts = append(texts, ev.Text)
			perRequest[ev.RequestID]++
		}
	}
	return texts, perRequest
}
