package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/turn"
)

// txnTimeout is the transaction timeout of these tests: below kfake's 1 s group session timeout.
const txnTimeout = 500 * time.Millisecond

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
