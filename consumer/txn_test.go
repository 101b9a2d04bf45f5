package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turntest"
)

// txnTimeout is the transaction timeout of these tests: below the suite's 3 s group session
// timeout (setup), and long enough that a loaded machine does not hold a transaction open
// past it (the coordinator would then abort it and fence the member: a failure the test did
// not ask for).
const txnTimeout = 2 * time.Second

// transactional turns a member's transactional mode on with the given instance id ("" for a
// random one).
func (e *env) transactional(instance string, tune func(*consumer.Transactional)) func(*consumer.Config) {
	return func(cfg *consumer.Config) {
		cfg.Transactional = &consumer.Transactional{IDPrefix: e.group, InstanceID: instance, Timeout: txnTimeout}
		if tune != nil {
			tune(cfg.Transactional)
		}
	}
}

// readCommitted reads topic from the start with franz-go as a read_committed reader until it
// holds results of n distinct request ids and one more poll finds nothing new, and returns how
// many result records each request id has.
func (e *env) readCommitted(topic string, n int) map[string]int {
	t := e.t
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.cluster.Brokers()...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	got := map[string]int{}
	deadline := time.Now().Add(wait)
	quiet := 0
	for quiet < 2 {
		require.True(t, time.Now().Before(deadline), "read_committed reader saw %d of %d request ids within %v", len(got), n, wait)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		for _, fe := range fs.Errors() {
			if !errors.Is(fe.Err, context.DeadlineExceeded) {
				require.NoError(t, fe.Err)
			}
		}
		recs := fs.Records()
		for _, r := range recs {
			for _, h := range r.Headers {
				if h.Key == consumer.HeaderRequestID {
					got[string(h.Value)]++
				}
			}
		}
		if len(got) >= n && len(recs) == 0 {
			quiet++
		}
	}
	return got
}

// requireOnce requires exactly one result record for each request.
func requireOnce(t *testing.T, got map[string]int, reqs []turn.Request) {
	t.Helper()
	require.Len(t, got, len(reqs), "distinct request ids with a result")
	for _, r := range reqs {
		require.Equal(t, 1, got[r.ID], "result records of request %s", r.ID)
	}
}

func requests(n, convs int) []turn.Request {
	reqs := make([]turn.Request, n)
	for i := range reqs {
		reqs[i] = request(fmt.Sprintf("c%d", i%convs), fmt.Sprintf("hello %d", i))
	}
	return reqs
}

func (e *env) committed(partitions int32) (sum int64) {
	for p := range partitions {
		if o := e.cluster.CommittedOffset(e.t, e.group, e.requests, p); o > 0 {
			sum += o
		}
	}
	return sum
}

// Fifty transactions of one turn each, back to back on one member: all commit, each request
// has exactly one result for a read_committed reader, every offset is committed with its
// transaction, and the producer is not left in an error state (a request after them is
// served too).
func TestTxnBackToBack(t *testing.T) {
	t.Parallel()
	e := setup(t, 2, 2)
	m := e.start(memberOpts{tune: e.transactional("", func(tx *consumer.Transactional) { tx.MaxRecords = 1 })})
	reqs := requests(50, 10)
	e.produce(reqs...)
	requireOnce(t, e.readCommitted(e.results, 50), reqs)
	eventually(t, func() bool { return e.committed(2) == 50 }, "offsets committed with the transactions")

	last := request("c-last", "after fifty")
	e.produce(last)
	requireOnce(t, e.readCommitted(e.results, 51), append(reqs, last))
	eventually(t, func() bool { return e.committed(2) == 51 })
	require.EqualValues(t, 51, m.c.Stats().Results)
	require.EqualValues(t, 51, e.totalCalls(), "one model call per request")
}

// crashedStopWait bounds how long a killed member (its network cut) takes to return from Run:
// in transactional mode its abort retries until sarama runs out of brokers to try, which
// under -race on a loaded machine took more than a minute once (CI, TestTxnKillsLeaveNoDuplicates).
const crashedStopWait = 3 * wait

// finish waits for a killed member's Run to return (after cancelling it) and hands its error
// over, so that the env's cleanup does not require a nil error from it.
func (m *member) finish(t *testing.T) error {
	t.Helper()
	m.cancel()
	select {
	case err := <-m.done:
		close(m.done)
		return err
	case <-time.After(crashedStopWait):
		t.Fatalf("member did not stop within %v", crashedStopWait)
		return nil
	}
}

// Two members given the same transactional id: the newer one's InitProducerId fences the
// older, whose Run ends with ErrFenced (its producer closed, its open transaction never
// committed); the newer serves every request, and a read_committed reader finds one result
// per request id.
func TestTxnSameIDFencesTheOlder(t *testing.T) {
	t.Parallel()
	e := setup(t, 4, 4)
	older := e.start(memberOpts{tune: e.transactional("pod-0", nil)})
	first := requests(40, 20)
	e.produce(first...)
	requireOnce(t, e.readCommitted(e.results, len(first)), first)

	newer := e.start(memberOpts{tune: e.transactional("pod-0", nil)})
	eventually(t, func() bool { return newer.c.Stats().Claims > 0 }, "the newer member owns partitions")
	second := requests(80, 20) // on every partition, the older member's too
	e.produce(second...)

	var err error
	select {
	case err = <-older.done:
		close(older.done)
	case <-time.After(wait):
		t.Fatalf("the older member was not fenced within %v", wait)
	}
	require.ErrorIs(t, err, consumer.ErrFenced)
	all := append(first, second...)
	requireOnce(t, e.readCommitted(e.results, len(all)), all)
	eventually(t, func() bool { return e.committed(4) == int64(len(all)) }, "every offset committed")
}

// A member killed (network and stores cut) after producing results but before CommitTxn:
// its transaction stays open until the coordinator aborts it after the transaction timeout
// (a read_committed reader then reads past it, and sees none of its results), and the next
// owner serves the records once: one result per request for a read_committed reader.
func TestTxnKilledBeforeCommit(t *testing.T) {
	t.Parallel()
	e := setup(t, 2, 2)
	reached, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	txnTune := e.transactional("", nil)
	tune := func(cfg *consumer.Config) {
		txnTune(cfg)
		// Once killed, its commit and abort fail fast instead of retrying sarama's 50 times.
		cfg.Sarama.Producer.Transaction.Retry.Max = 2
	}
	dead := e.start(memberOpts{tune: tune, before: func(c *consumer.Consumer) {
		consumer.SetTxnHook(c, func() {
			once.Do(func() { close(reached) })
			<-release
		})
	}})
	t.Cleanup(func() {
		close(release)
		err := dead.finish(t) // a killed member's commit fails: any error is its own
		t.Logf("killed member's Run returned: %v", err)
	})
	reqs := requests(40, 10)
	e.produce(reqs...)
	recv(t, reached, "a commit")
	dead.crash()
	e.cluster.ReadAllUncommitted(t, e.results, 1, wait) // the open transaction holds results

	// Nobody aborts the dead member's transaction but its timeout: a record written after it
	// becomes visible to a read_committed reader once it is aborted, and none of it is.
	for p := range int32(2) {
		e.cluster.ProduceTo(t, e.results, p, "marker", []byte("marker"),
			map[string]string{consumer.HeaderRequestID: fmt.Sprintf("marker-%d", p)})
	}
	start := time.Now()
	got := e.readCommitted(e.results, 2)
	t.Logf("read_committed reader passed the dead member's transaction after %v (transaction timeout %v)", time.Since(start), txnTimeout)
	require.Equal(t, map[string]int{"marker-0": 1, "marker-1": 1}, got, "only the markers: the dead member's results were aborted")

	e.start(memberOpts{tune: e.transactional("", nil)})
	got = e.readCommitted(e.results, len(reqs)+2)
	delete(got, "marker-0")
	delete(got, "marker-1")
	requireOnce(t, got, reqs)
	eventually(t, func() bool { return e.committed(2) == int64(len(reqs)) }, "every offset committed")
}

// A run of 5,000 requests over 200 conversations during which 10 members are killed (network
// and stores cut, no goodbye), in the transactional mode: a read_committed reader in another
// client (librdkafka) counts exactly 5,000 distinct results and no duplicate result record.
// The same run in the default mode logs how many duplicates a reader that does not dedup
// would have seen.
func TestTxnKillsLeaveNoDuplicates(t *testing.T) {
	if testing.Short() {
		t.Skip("a long run: 5,000 requests and 10 kills")
	}
	t.Parallel()
	needPython(t)
	for _, mode := range []string{"transactional", "default"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			dups := killRun(t, mode == "transactional")
			if mode == "transactional" {
				require.Zero(t, dups, "duplicate result records for a read_committed reader")
			} else {
				t.Logf("default mode: %d duplicate result records across 10 kills", dups)
			}
		})
	}
}

// killRun serves 5,000 requests of 200 conversations with two members at a time; after each
// tenth of the requests is produced and half of it served, it kills one member and starts
// another; it returns the result records beyond
// one per request that librdkafka's read_committed reader counts, after requiring one result
// at least for every request.
func killRun(t *testing.T, transactional bool) int {
	const total, convs, kills = 5000, 200, 10
	// Under -race on a loaded machine a transaction can stay open past the other tests' 500 ms
	// (the coordinator then aborts it and fences the member): a 3 s session and a 2 s timeout.
	c := turntest.NewCluster(t, turntest.Options{Brokers: 3, SessionTimeout: 3 * time.Second})
	e := &env{
		t: t, cluster: c, ordering: testOrdering,
		requests: c.CreateTopic(t, "requests", 4), results: c.CreateTopic(t, "results", 4),
		dlq: c.CreateTopic(t, "dlq", 4), group: c.Unique("group"),
		sessions: session.NewMemoryStore(), inbox: inbox.NewMemoryInbox(),
	}
	opts := func() memberOpts {
		if transactional {
			return memberOpts{tune: e.transactional("", func(tx *consumer.Transactional) { tx.Timeout = 2 * time.Second })}
		}
		return memberOpts{}
	}
	live := []*member{e.start(opts()), e.start(opts())}
	reqs := requests(total, convs)
	chunk := total / kills
	for k := range kills { // a chunk of requests, then a kill once half of it is served
		e.produce(reqs[k*chunk : (k+1)*chunk]...)
		eventually(t, func() bool { return e.totalCalls() >= int64(k*chunk+chunk/2) }, "progress before kill %d", k+1)
		victim := live[0]
		live = append(live[1:], e.start(opts()))
		victim.crash()
		t.Cleanup(func() { _ = victim.finish(t) }) // a killed member's last commit fails: its error is its own
	}
	got := python(t, "", "count", e.cluster.BrokerList(), e.results, fmt.Sprint(total))
	require.Len(t, got, 1)
	dups := 0
	for _, r := range reqs {
		n, ok := got[0][r.ID].(float64)
		require.True(t, ok, "no result for request %s", r.ID)
		dups += int(n) - 1
	}
	require.Len(t, got[0], total, "results of unknown request ids")
	if dups > 0 && transactional {
		e.diagDups(t, e.results)
	}
	return dups
}

// An abortable error aborts the transaction and sends its outcomes again in a new one, without
// a second model call: a result the results topic refuses (too large) fails its publish, the
// transaction is aborted, and the next one carries the dead letter that replaces it and the
// other outcomes.
func TestTxnAbortResendsWithoutModelCall(t *testing.T) {
	t.Parallel()
	e := setup(t, 1, 1)
	m := e.start(memberOpts{tune: e.transactional("", nil), wrap: inflateNovel})
	novel, next := request("c-novel", "write me a novel"), request("c-novel", "a haiku then")
	e.produce(novel, next)
	dead := e.cluster.ReadAll(t, e.dlq, 1, wait) // read_committed
	require.Len(t, dead, 1)
	h := turntest.HeaderMap(dead[0])
	require.Equal(t, novel.ID, h[consumer.HeaderRequestID])
	require.Contains(t, h[consumer.HeaderReason], "refused by the results topic")
	requireOnce(t, e.readCommitted(e.results, 1), []turn.Request{next})
	eventually(t, func() bool { return m.c.Stats().Records == 2 && e.committed(1) == 2 })
	require.EqualValues(t, 1, e.callsOf(novel.ID), "the retried transaction did not call the model again")
	require.EqualValues(t, 1, e.callsOf(next.ID))
}

func TestTxnConfigValidate(t *testing.T) {
	t.Parallel()
	h := consumer.HandlerFunc(func(context.Context, turn.Request) (*turn.Result, error) { return nil, nil })
	ok := consumer.Config{Brokers: []string{"127.0.0.1:1"}, GroupID: "g", RequestsTopic: "r", ResultsTopic: "res", DeadLetterTopic: "d",
		Transactional: &consumer.Transactional{IDPrefix: "svc"}}
	_, err := consumer.New(ok, h)
	require.NoError(t, err, "defaults: Timeout is half of sarama's 10 s session timeout")

	bad := ok
	bad.Transactional = &consumer.Transactional{}
	_, err = consumer.New(bad, h)
	require.ErrorContains(t, err, "Transactional.IDPrefix: empty")

	bad.Transactional = &consumer.Transactional{IDPrefix: "svc", Timeout: 10 * time.Second}
	_, err = consumer.New(bad, h)
	require.ErrorContains(t, err, "Transactional.Timeout: 10s is not below the group's session timeout (10s)")

	bad.Transactional = &consumer.Transactional{IDPrefix: "svc", Timeout: 50 * time.Millisecond}
	_, err = consumer.New(bad, h)
	require.ErrorContains(t, err, "is not above Interval (100ms)")

	bad.Transactional = &consumer.Transactional{IDPrefix: "svc"}
	bad.Replay = &consumer.Replay{}
	_, err = consumer.New(bad, h)
	require.ErrorContains(t, err, "Transactional: cannot be combined with Replay")
}

// A claim that starts at a committed offset, whose first record is still running while a
// later record of another conversation has finished: the later result is held back (a
// transaction holds only outcomes below the offset it commits, or the next owner would serve
// the record and commit its result again), the committed offset stays where it was (never
// below: a fresh claim's watermark is its head's offset), and both commit once the first is
// done.
func TestTxnWatermarkOnFreshClaim(t *testing.T) {
	t.Parallel()
	if testOrdering != consumer.OrderByKey {
		t.Skip("a later record finishing first needs key-level concurrency")
	}
	e := setup(t, 1, 1)
	first := requests(5, 5)
	e.produce(first...)
	m := e.start(memberOpts{tune: e.transactional("", nil)})
	requireOnce(t, e.readCommitted(e.results, 5), first)
	eventually(t, func() bool { return e.committed(1) == 5 })
	m.stop(t)

	release := make(chan struct{})
	slow, fast := request("c-slow", "take your time"), request("c-fast", "quick")
	e.produce(slow, fast)
	e.start(memberOpts{tune: e.transactional("", nil), model: func(ctx context.Context, in turn.Input) (turn.Output, error) {
		if in.Request.ID == slow.ID {
			select {
			case <-release:
			case <-ctx.Done():
				return turn.Output{}, ctx.Err()
			}
		}
		return echo(in)
	}})
	eventually(t, func() bool { return e.callsOf(fast.ID) == 1 }, "the later record's turn ran")
	requireOnce(t, e.readCommitted(e.results, 5), first) // fast's result is not visible yet
	require.EqualValues(t, 5, e.committed(1), "the offset stays at the running record's")
	close(release)
	eventually(t, func() bool { return e.committed(1) == 7 })
	requireOnce(t, e.readCommitted(e.results, 7), append(first, fast, slow))
}

// The bound on how long a read_committed reader waits behind a dead member's transaction is the
// transaction timeout the producer registers with the coordinator (InitProducerId), after which
// the coordinator aborts the transaction (KIP-98): the configured one, or half the group's
// session timeout, so that a dead member's open transaction is aborted before its partitions'
// next owner reads on. TestTxnKilledBeforeCommit shows the reader passing once it is aborted.
func TestTxnProducerCarriesTheTimeout(t *testing.T) {
	t.Parallel()
	sc := sarama.NewConfig()
	sc.Consumer.Group.Session.Timeout = 6 * time.Second
	cfg := consumer.Config{Brokers: []string{"127.0.0.1:1"}, GroupID: "g", RequestsTopic: "a", ResultsTopic: "b", DeadLetterTopic: "c", Sarama: sc,
		Transactional: &consumer.Transactional{IDPrefix: "svc", InstanceID: "m1", Timeout: 700 * time.Millisecond}}
	require.Equal(t, 700*time.Millisecond, consumer.TxnProducerTimeout(cfg))
	cfg.Transactional = &consumer.Transactional{IDPrefix: "svc", InstanceID: "m1"}
	require.Equal(t, 3*time.Second, consumer.TxnProducerTimeout(cfg), "half the session timeout by default")
}
