package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turntest"
)

// sadWait bounds the review tests: every outcome they wait for takes well under a second
// when the code is right.
const sadWait = 20 * time.Second

func (e *env) waitDone(t *testing.T, reqs ...turn.Request) {
	t.Helper()
	status := func() (string, bool) {
		var out []string
		all := true
		for _, r := range reqs {
			id := r.ID
			entry, err := e.inbox.Get(context.Background(), turn.InboxKey(turn.DefaultApp, r))
			switch {
			case err != nil:
				out, all = append(out, id[:8]+": never begun"), false
			case entry.Status != inbox.StatusDone:
				out, all = append(out, fmt.Sprintf("%s: %s", id[:8], entry.Status)), false
			default:
				out = append(out, id[:8]+": done")
			}
		}
		return strings.Join(out, ", "), all
	}
	deadline := time.Now().Add(sadWait)
	for time.Now().Before(deadline) {
		if _, ok := status(); ok {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	s, _ := status()
	t.Fatalf("requests not done within %v: %s", sadWait, s)
}

// A model error that matches context.DeadlineExceeded while the turn's context is live (an
// http.Client Timeout, a per-call context.WithTimeout inside the host's model) is a failed
// attempt. It once classified as abandoned: the lane gave up while its claim stayed open, and
// the partition stalled (G5).
func TestModelTimeoutErrorIsAnAttemptNotAStall(t *testing.T) {
	t.Parallel()
	e := setup(t, 1, 1)
	m := e.start(memberOpts{model: func(_ context.Context, in turn.Input) (turn.Output, error) {
		if in.Request.Text == "model call times out" {
			return turn.Output{}, fmt.Errorf("POST /v1/chat: %w (Client.Timeout exceeded)", context.DeadlineExceeded)
		}
		return echo(in)
	}})
	slow := request("c-timeout", "model call times out")
	next := request("c-timeout", "the next email")
	e.produce(slow, next)

	e.waitDone(t, next)
	require.Zero(t, m.c.Stats().Abandoned, "no revoke or shutdown happened")
}

// A record whose value is near the broker's limit cannot be dead-lettered as it came: the
// dead letter is the same value plus turnstile's headers, over Producer.MaxMessageBytes
// (1 MiB). It once was retried forever, stalling the partition (G5); now it is dead-lettered
// without its value, with a header saying so.
func TestOversizedDeadLetterDoesNotStall(t *testing.T) {
	t.Parallel()
	e := setup(t, 1, 1)
	e.start(memberOpts{})
	big := []byte(strings.Repeat("x", 1<<20-100)) // not JSON; fits a 1 MiB producer (and the broker) with a short key
	e.cluster.ProduceTo(t, e.requests, 0, "c-big", big, nil)
	next := request("c-big", "the next email")
	data, err := next.Encode()
	require.NoError(t, err)
	e.cluster.ProduceTo(t, e.requests, 0, next.ConversationID, data, nil)

	e.waitDone(t, next)
	dead := e.cluster.ReadAll(t, e.dlq, 1, wait)
	require.Len(t, dead, 1)
	require.Empty(t, dead[0].Value)
	h := turntest.HeaderMap(dead[0])
	require.Contains(t, h[consumer.HeaderValueDropped], fmt.Sprintf("%d bytes", len(big)))
	require.Contains(t, h[consumer.HeaderReason], "not JSON")
	require.Equal(t, "0", h[consumer.HeaderSourceOffset])
}

// inflateNovel wraps a Handler so that the Result of "write me a novel" grows to 1.2 MB after
// the Runner stored it: a Handler's Result the results topic refuses (the Runner's own check of
// turn.ResultLimit never sees it), which exercises the refusal path after the publish.
func inflateNovel(h consumer.Handler) consumer.Handler {
	return consumer.HandlerFunc(func(ctx context.Context, req turn.Request) (*turn.Result, error) {
		res, err := h.Handle(ctx, req)
		if err == nil && res != nil && req.Text == "write me a novel" {
			res.Text = strings.Repeat("words ", 200_000)
		}
		return res, err
	})
}

// A result the results topic refuses (too large) is dead-lettered with the reason, instead of
// being retried forever.
func TestRefusedResultIsDeadLettered(t *testing.T) {
	t.Parallel()
	e := setup(t, 1, 1)
	m := e.start(memberOpts{wrap: inflateNovel})
	novel, next := request("c-novel", "write me a novel"), request("c-novel", "a haiku then")
	e.produce(novel, next)
	e.waitDone(t, next)
	dead := e.cluster.ReadAll(t, e.dlq, 1, wait)
	require.Len(t, dead, 1)
	h := turntest.HeaderMap(dead[0])
	require.Equal(t, novel.ID, h[consumer.HeaderRequestID])
	require.Contains(t, h[consumer.HeaderReason], "refused by the results topic")
	eventually(t, func() bool { return m.c.Stats().Records == 2 })
}

// G2: a record whose result cannot be published yet is not marked, so its offset is not
// committed; once the results topic can take it, it is published and committed.
func TestNoCommitBeforeResultIsDurable(t *testing.T) {
	t.Parallel()
	e := setup(t, 1, 1)
	// The results topic exists (Run checks that before it joins) but is deleted once the
	// member runs, and made again later.
	m := e.start(memberOpts{})
	eventually(t, func() bool { return m.c.Stats().Claims == 1 })
	admin, err := sarama.NewClusterAdmin(e.cluster.Brokers(), e.cluster.Config())
	require.NoError(t, err)
	defer admin.Close()
	require.NoError(t, admin.DeleteTopic(e.results))
	req := request("c-g2", "hello")
	e.produce(req)
	e.waitDone(t, req) // the turn is done and stored in the inbox...
	commits := m.c.Stats().Commits
	eventually(t, func() bool { return m.c.Stats().Commits >= commits+3 }, "several commits pass")
	require.Zero(t, m.c.Stats().Records, "not marked while its result is not published")
	require.EqualValues(t, -1, e.cluster.CommittedOffset(t, e.group, e.requests, 0))

	require.NoError(t, admin.CreateTopic(e.results, &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: -1}, false))
	results := e.resultsByID(1)
	require.Len(t, results[req.ID], 1)
	eventually(t, func() bool { return e.cluster.CommittedOffset(t, e.group, e.requests, 0) == 1 })
}

// sarama (v1.61.1 consumer.go, "paused retains pause state while a partition is
// reassigned") keeps a partition's Pause across a revoke and re-pauses its next
// partitionConsumer. A lane paused for backpressure (MaxBuffered) and then revoked must resume
// the partition, or when it comes back to this member (a cooperative move back, or a new
// session after a session error) it stays paused for good (G5).
func TestBackpressurePauseDoesNotSurviveReassignment(t *testing.T) {
	t.Parallel()
	e := setup(t, 2, 2)
	gate := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(open)
	entered := make(chan string, 64)
	a := e.start(memberOpts{
		model: func(ctx context.Context, in turn.Input) (turn.Output, error) {
			entered <- in.Request.ID
			select {
			case <-gate:
			case <-ctx.Done():
				return turn.Output{}, ctx.Err()
			}
			return echo(in)
		},
		tune: func(cfg *consumer.Config) { cfg.MaxBuffered = 2 },
	})
	for p := range int32(2) {
		for i := range 6 {
			r := request(fmt.Sprintf("p%d", p), fmt.Sprintf("backlog %d", i))
			data, err := r.Encode()
			require.NoError(t, err)
			e.cluster.ProduceTo(t, e.requests, p, r.ConversationID, data, nil)
		}
	}
	for range 2 { // a turn hangs on each partition; the lanes' queues fill and pause them
		select {
		case <-entered:
		case <-time.After(sadWait):
			t.Fatal("no turn started")
		}
	}
	eventually(t, func() bool { return a.c.Stats().PeakBuffered >= 2 }, "a window fills (MaxBuffered 2) and pauses its partition")

	b := e.start(memberOpts{}) // one partition moves to b, which clears its backlog
	eventually(t, func() bool { return b.c.Stats().Records == 6 }, "b processed the moved partition")
	b.stop(t) // the partition moves back to a
	open()

	var fresh []turn.Request
	for p := range int32(2) {
		r := request(fmt.Sprintf("p%d", p), "after the partition came back")
		data, err := r.Encode()
		require.NoError(t, err)
		e.cluster.ProduceTo(t, e.requests, p, r.ConversationID, data, nil)
		fresh = append(fresh, r)
	}
	e.waitDone(t, fresh...)
	_ = a
}

// Config.TurnTimeout fails the attempt in the inbox, so the request is marked dead when it is
// dead-lettered, and a redelivery of the dead-lettered record (a crash between the DLQ publish
// and the commit) stays dead instead of being answered too.
func TestConsumerTurnTimeoutSpendsAttempts(t *testing.T) {
	t.Parallel()
	e := setup(t, 1, 1)
	e.start(memberOpts{
		model: func(ctx context.Context, _ turn.Input) (turn.Output, error) {
			<-ctx.Done()
			return turn.Output{}, ctx.Err()
		},
		tune: func(cfg *consumer.Config) { cfg.TurnTimeout = 100 * time.Millisecond },
		// A Handler of the host's around the Runner: the consumer's own TurnTimeout bounds it
		// (RunnerHandler itself would refuse a TurnTimeout other than the Runner's).
		wrap: func(h consumer.Handler) consumer.Handler { return consumer.HandlerFunc(h.Handle) },
	})
	req := request("c-consumer-timeout", "slow every time")
	e.produce(req)
	dead := e.cluster.ReadAll(t, e.dlq, 1, sadWait)
	require.Len(t, dead, 1)

	entry, err := e.inbox.Get(context.Background(), turn.InboxKey(turn.DefaultApp, req))
	require.NoError(t, err)
	require.Equal(t, inbox.StatusDead.String(), entry.Status.String(),
		"dead-lettered, but the inbox holds %d attempts and reason %q", entry.Attempts, entry.Reason)

	// The redelivery a crash before the commit would cause.
	again := req
	again.Source = turn.Source{Topic: e.requests, Partition: 0, Offset: 0}
	r := &turn.Runner{Model: turn.ModelFunc(func(_ context.Context, in turn.Input) (turn.Output, error) { return echo(in) }),
		Sessions: e.sessions, Inbox: e.inbox, Logger: testLogger(t)}
	_, err = r.Run(context.Background(), again)
	var dle *turn.DeadLetterError
	require.ErrorAs(t, err, &dle, "a dead-lettered request must stay dead")
}

// silentBroker accepts TCP connections and never answers, like a broker that hangs or a
// network path that drops replies.
func silentBroker(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(io.Discard, c) })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// Run honours its context while it connects, although sarama.NewClient and NewSyncProducer
// take none: against a broker that never answers, a cancelled Run returns long before
// sarama's read timeout (60 s here) could have ended the attempt.
func TestRunHonoursCancelWhileConnecting(t *testing.T) {
	t.Parallel()
	sc := sarama.NewConfig()
	sc.Version = sarama.V3_6_0_0
	sc.Net.ReadTimeout = 2 * time.Minute // longer than the rebalance timeout, as New requires
	sc.Metadata.Retry.Max = 1
	sc.Metadata.Retry.Backoff = 10 * time.Millisecond
	c, err := consumer.New(consumer.Config{
		Brokers: []string{silentBroker(t)}, GroupID: "g", RequestsTopic: "r", ResultsTopic: "res", DeadLetterTopic: "d",
		Sarama: sc, Logger: testLogger(t),
	}, consumer.HandlerFunc(func(context.Context, turn.Request) (*turn.Result, error) { return nil, nil }))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = c.Run(ctx)
	took := time.Since(start)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, took, sc.Net.ReadTimeout, "Run returned %v after its context ended (err %v)", took-200*time.Millisecond, err)
}

// The acceptance line "the old member's late completion is neither committed nor published"
// is only proven through the Runner: the late turn fails on its cancelled context or on the
// session version, so with lane.send's `abandoned` check disabled
// TestSlowTurnOutlivesRevokeGrace still passes. Here the old member's late turn wins the
// append (its stores ignore cancellation, the new owner is slower), so it reaches lane.send;
// this test fails when that check goes.
func TestLateCompletionIsDropped(t *testing.T) {
	t.Parallel()
	e := setup(t, 1, 1)
	slow := request("slow-0", "slow")
	entered, release, finished := make(chan struct{}), make(chan struct{}), make(chan struct{})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	// a's handler ignores cancellation and answers late: a host handler (or a store) that
	// does not watch its context. The Runner cuts its own model at the deadline; the lane's
	// abandon check is what keeps any other late handler from publishing or committing.
	a := e.start(memberOpts{handler: consumer.HandlerFunc(func(_ context.Context, req turn.Request) (*turn.Result, error) {
		close(entered)
		<-release
		defer close(finished)
		return &turn.Result{Schema: turn.SchemaVersion, RequestID: req.ID, ConversationID: req.ConversationID,
			UserID: req.UserID, Text: "late answer", Attempt: 1}, nil
	})})
	e.produce(slow)
	recv(t, entered, "a's handler call")
	// a second member whose turns wait at the session store until the test lets them go
	releaseB := make(chan struct{})
	e.start(memberOpts{runner: func(r *turn.Runner) { r.Sessions = gatedSessions{Store: r.Sessions, gate: releaseB} }})
	a.cancel() // a leaves while its turn hangs; the partition moves to the second member
	// a's partition is released after ShutdownTimeout (5 s) and abandonWait (1 s)
	eventually(t, func() bool { return a.c.Stats().Released == 1 }, "a released its partition")
	close(release)
	select {
	case <-finished: // a's late handler returned its result...
	case <-time.After(sadWait):
		t.Fatal("a's handler did not return")
	}
	require.Eventually(t, func() bool { return a.c.Stats().LateDropped == 1 }, sadWait, 20*time.Millisecond,
		"a's late completion was not dropped")
	// ...and nothing of it is visible: no result, no commit, while the new owner still works.
	require.Zero(t, e.cluster.RecordCount(t, e.results), "a's late completion was published")
	require.EqualValues(t, -1, e.cluster.CommittedOffset(t, e.group, e.requests, 0), "a's late completion was committed")
	close(releaseB)
	results := e.resultsByID(1)
	require.Len(t, results[slow.ID], 1)
	res, err := turn.DecodeResult(results[slow.ID][0].Value)
	require.NoError(t, err)
	require.NotEqual(t, "late answer", res.Text)
	eventually(t, func() bool { return e.cluster.CommittedOffset(t, e.group, e.requests, 0) == 1 })
}

// gatedSessions holds every Get until gate closes.
type gatedSessions struct {
	session.Store
	gate chan struct{}
}

func (s gatedSessions) Get(ctx context.Context, k session.Key, n int) (session.Session, error) {
	select {
	case <-s.gate:
	case <-ctx.Done():
		return session.Session{}, ctx.Err()
	}
	return s.Store.Get(ctx, k, n)
}

// freezeDialer is a sarama proxy dialer whose connections a test can freeze: writes are
// swallowed, reads return nothing until their deadline, new dials time out. It is a broker
// that hangs, or a network path that drops packets, rather than one that refuses.
type freezeDialer struct {
	mu     sync.Mutex
	frozen bool
	dialTO time.Duration
}

func (d *freezeDialer) isFrozen() bool { d.mu.Lock(); defer d.mu.Unlock(); return d.frozen }
func (d *freezeDialer) freeze()        { d.mu.Lock(); d.frozen = true; d.mu.Unlock() }

func (d *freezeDialer) Dial(network, addr string) (net.Conn, error) {
	if d.isFrozen() {
		time.Sleep(d.dialTO)
		return nil, &net.OpError{Op: "dial", Net: network, Err: errors.New("i/o timeout (frozen)")}
	}
	c, err := net.DialTimeout(network, addr, d.dialTO)
	if err != nil {
		return nil, err
	}
	return &freezeConn{Conn: c, d: d}, nil
}

type freezeConn struct {
	net.Conn
	d        *freezeDialer
	mu       sync.Mutex
	deadline time.Time
}

func (c *freezeConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return c.Conn.SetReadDeadline(t)
}

func (c *freezeConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

func (c *freezeConn) Read(p []byte) (int, error) {
	if !c.d.isFrozen() {
		n, err := c.Conn.Read(p)
		if !c.d.isFrozen() {
			return n, err
		}
	}
	c.mu.Lock()
	dl := c.deadline
	c.mu.Unlock()
	if dl.IsZero() {
		dl = time.Now().Add(time.Hour)
	}
	time.Sleep(time.Until(dl))
	return 0, os.ErrDeadlineExceeded
}

func (c *freezeConn) Write(p []byte) (int, error) {
	if c.d.isFrozen() {
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// After the brokers stop answering, a cancelled Run still returns: the final commits and
// leaving the group are bounded, so it does not wait out every one of sarama's timeouts in
// turn. The bound checked is loose (a deadline for a hung test, not a speed target).
func TestShutdownWithHungBrokers(t *testing.T) {
	t.Parallel()
	e := setup(t, 1, 1)
	d := &freezeDialer{dialTO: time.Second}
	m := e.start(memberOpts{tune: func(cfg *consumer.Config) {
		cfg.Sarama.Net.Proxy.Dialer = d
		cfg.Sarama.Net.ReadTimeout = 10 * time.Second
		cfg.Sarama.Net.WriteTimeout = time.Second
		cfg.Sarama.Net.DialTimeout = time.Second
		cfg.Sarama.Metadata.Retry.Max = 2
	}})
	req := request("c-hung", "hello")
	e.produce(req)
	e.waitDone(t, req)
	commits := m.c.Stats().Commits
	eventually(t, func() bool { return m.c.Stats().Commits >= commits+2 }, "the mark is committed")

	d.freeze()
	start := time.Now()
	m.cancel()
	select {
	case <-m.done:
		close(m.done)
	case <-time.After(5 * time.Minute):
		t.Fatal("Run did not return within 5 minutes")
	}
	took := time.Since(start)
	limit := time.Minute // sarama's timeouts in series would take longer than this
	t.Logf("Run returned %v after cancel", took)
	require.Less(t, took, limit, "a cancelled Run took %v with hung brokers (no turn in flight)", took)
}
