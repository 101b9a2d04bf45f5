package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
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

// Tests of the holes of issue 10 that the consumer closes: each failed before its fix.

// Hole 1: a rate limit spends no attempt and pauses every partition; a request that always
// gets HTTP 429 was probed again after every pause, never dead-lettered, and held the member
// (others got 2 of 150 requests through). Now it is dead-lettered after MaxRateLimits.
func TestAlwaysRateLimitedRequestIsDeadLettered(t *testing.T) {
	t.Parallel()
	e := setup(t, 2, 2)
	const limit = 4
	m := e.start(memberOpts{
		model: func(_ context.Context, in turn.Input) (turn.Output, error) {
			if in.Request.Text == "always refused" {
				return turn.Output{}, turn.RetryAfter(20*time.Millisecond, errors.New("HTTP 429 Too Many Requests"))
			}
			return echo(in)
		},
		tune: func(cfg *consumer.Config) { cfg.MaxRateLimits, cfg.MaxPause = limit, 200*time.Millisecond },
	})
	refused := request("c-429", "always refused")
	next := request("c-429", "the next email") // behind it: same key, same partition
	var others []turn.Request
	for i := range 6 {
		others = append(others, request(fmt.Sprintf("c-other-%d", i), "hello"))
	}
	e.produce(append([]turn.Request{refused, next}, others...)...)

	e.waitDone(t, append([]turn.Request{next}, others...)...)
	dead := e.cluster.ReadAll(t, e.dlq, 1, wait)
	require.Len(t, dead, 1)
	h := turntest.HeaderMap(dead[0])
	require.Equal(t, refused.ID, h[consumer.HeaderRequestID])
	require.Contains(t, h[consumer.HeaderReason], fmt.Sprintf("rate limited %d times", limit))
	require.Contains(t, h[consumer.HeaderReason], "HTTP 429")
	require.EqualValues(t, limit, e.callsOf(refused.ID))
	require.GreaterOrEqual(t, m.c.Stats().RateLimited, int64(limit))
}

// Hole 2: a crash counted an attempt for every request in flight on the member, so a valid
// slow request beside a record that kills its member was dead-lettered with "3 attempts
// exhausted" although its model never failed. Now a request whose attempt crashed beside
// others runs alone, and only crashes while alone count: the killer is dead-lettered, the
// slow request beside it is served.
func TestCrashLoopSparesTheRequestsBesideIt(t *testing.T) {
	t.Parallel()
	e := setup(t, 2, 2)
	killer := request("c-killer", "the record that kills its member")
	slow := request("c-slow", "a valid slow request")
	entered := make(chan string, 64)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) }) // before the members' cleanups stop them
	// The killer never returns: its member dies first. The slow request takes a while; when
	// the killer runs beside it, the member dies before it is done. On the first member it
	// waits for the killer, so that both are in flight when the member dies.
	model := func(member int) func(context.Context, turn.Input) (turn.Output, error) {
		var killerIn atomic.Bool
		return func(_ context.Context, in turn.Input) (turn.Output, error) {
			switch in.Request.ID {
			case killer.ID:
				killerIn.Store(true)
				entered <- in.Request.ID
				<-release
			case slow.ID:
				if member == 0 {
					entered <- in.Request.ID
				}
				done := time.After(300 * time.Millisecond)
				for !killerIn.Load() {
					select {
					case <-done:
						if member > 0 {
							return echo(in)
						}
					case <-time.After(10 * time.Millisecond):
					}
				}
				<-release
			}
			return echo(in)
		}
	}
	// On different partitions, so that both can be in flight at once in either ordering.
	for i, r := range []turn.Request{killer, slow} {
		data, err := r.Encode()
		require.NoError(t, err)
		e.cluster.ProduceTo(t, e.requests, int32(i), r.ConversationID, data, nil)
	}
	first := e.start(memberOpts{model: model(0)})
	for range 2 {
		select {
		case <-entered:
		case <-time.After(wait):
			t.Fatalf("both requests did not reach the model within %v", wait)
		}
	}
	first.crash()
	// Members die whenever the killer reaches the model, until it is dead-lettered.
	crashes, alone := 1, int64(0)
	for dead := false; !dead; {
		require.LessOrEqual(t, crashes, turn.DefaultMaxAttempts+1, "the killer was not dead-lettered in time")
		m := e.start(memberOpts{model: model(crashes)})
		tick := time.NewTicker(100 * time.Millisecond)
		deadline := time.After(wait)
	member:
		for {
			select {
			case <-entered:
				alone += m.c.Stats().Alone
				m.crash()
				crashes++
				break member
			case <-tick.C:
				if dead = e.cluster.RecordCount(t, e.dlq) > 0; dead {
					break member
				}
			case <-deadline:
				t.Fatalf("member %d: neither ran the killer nor dead-lettered it within %v", crashes, wait)
			}
		}
		tick.Stop()
	}
	require.Equal(t, turn.DefaultMaxAttempts+1, crashes, "one crash beside the slow request, then one per attempt alone")
	require.Positive(t, alone, "the members ran the killer alone")

	e.waitDone(t, slow)
	dead := e.cluster.ReadAll(t, e.dlq, 1, wait)
	require.Len(t, dead, 1, "the killer only")
	h := turntest.HeaderMap(dead[0])
	require.Equal(t, killer.ID, h[consumer.HeaderRequestID])
	require.Contains(t, h[consumer.HeaderReason], "3 attempts exhausted; the last ran alone and ended with its process")
	require.Equal(t, strconv.Itoa(turn.DefaultMaxAttempts), h[consumer.HeaderAttempts])
	results := e.resultsByID(1)
	require.Len(t, results[slow.ID], 1, "the slow request is served")
}

// Hole 5: with a requests topic allowing 16 MiB, a record whose key or headers alone exceed
// the producer's limit (1 MiB) could not be dead-lettered even without its value: it was
// committed with no result and no dead letter (Stats.Skipped). Now the dead letter drops the
// producer's headers, then the key.
func TestOversizedKeyOrHeadersAreDeadLettered(t *testing.T) {
	t.Parallel()
	e := setup(t, 1, 1)
	allowLargeRecords(t, e.cluster, e.requests)
	m := e.start(memberOpts{})
	big := strings.Repeat("k", 2<<20)
	valid := request("c-big", "a valid request under 2 MB of headers")
	validData, err := valid.Encode()
	require.NoError(t, err)
	next := request("c-big", "the next email")
	nextData, err := next.Encode()
	require.NoError(t, err)
	produceLarge(t, e.cluster, e.requests, []*sarama.ProducerMessage{
		{Key: sarama.StringEncoder(big), Value: sarama.StringEncoder("not JSON")}, // offset 0: key
		{Key: sarama.StringEncoder("c-big"), Value: sarama.StringEncoder("not JSON"), // offset 1: headers
			Headers: []sarama.RecordHeader{{Key: []byte("pasted-log"), Value: []byte(big)}, {Key: []byte("trace"), Value: []byte("t-1")}}},
		{Key: sarama.StringEncoder(big), Value: sarama.StringEncoder("not JSON"), // offset 2: both
			Headers: []sarama.RecordHeader{{Key: []byte("pasted-log"), Value: []byte(big)}}},
		{Key: sarama.StringEncoder("c-big"), Value: sarama.ByteEncoder(validData), // offset 3: valid
			Headers: []sarama.RecordHeader{{Key: []byte("pasted-log"), Value: []byte(big)}}},
		{Key: sarama.StringEncoder("c-big"), Value: sarama.ByteEncoder(nextData)}, // offset 4
	})

	e.waitDone(t, valid, next)
	dead := e.cluster.ReadAll(t, e.dlq, 3, wait)
	require.Len(t, dead, 3)
	byOffset := map[string]map[string]string{}
	for _, d := range dead {
		h := turntest.HeaderMap(d)
		byOffset[h[consumer.HeaderSourceOffset]] = h
		require.Empty(t, d.Value)
		require.Contains(t, h[consumer.HeaderReason], "not JSON")
		require.Contains(t, h[consumer.HeaderValueDropped], "8 bytes")
		require.NotContains(t, h, "pasted-log")
	}
	require.Contains(t, byOffset["0"][consumer.HeaderKeyDropped], fmt.Sprintf("%d bytes", len(big)))
	require.Contains(t, byOffset["1"][consumer.HeaderHeadersDropped], "2 headers")
	require.NotContains(t, byOffset["1"], consumer.HeaderKeyDropped, "a small key is kept")
	require.Contains(t, byOffset["2"][consumer.HeaderKeyDropped], fmt.Sprintf("%d bytes", len(big)))
	results := e.resultsByID(2)
	require.Len(t, results[valid.ID], 1, "valid, so served: the result carries turnstile's headers only")
	eventually(t, func() bool { return m.c.Stats().Records == 5 })
	require.Zero(t, m.c.Stats().Skipped)
}

// allowLargeRecords raises topic's max.message.bytes to 16 MiB.
func allowLargeRecords(t *testing.T, c *turntest.Cluster, topic string) {
	t.Helper()
	admin, err := sarama.NewClusterAdmin(c.Brokers(), c.Config())
	require.NoError(t, err)
	defer admin.Close()
	v := strconv.Itoa(16 << 20)
	require.NoError(t, admin.AlterConfig(sarama.TopicResource, topic, map[string]*string{"max.message.bytes": &v}, false))
}

// produceLarge writes msgs to partition 0 of topic, in order, with a producer allowing 16 MiB.
func produceLarge(t *testing.T, c *turntest.Cluster, topic string, msgs []*sarama.ProducerMessage) {
	t.Helper()
	cfg := c.ProducerConfig()
	cfg.Producer.MaxMessageBytes = 16 << 20
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	p, err := sarama.NewSyncProducer(c.Brokers(), cfg)
	require.NoError(t, err)
	defer p.Close()
	for _, m := range msgs {
		m.Topic, m.Partition = topic, 0
		_, _, err := p.SendMessage(m)
		require.NoError(t, err)
	}
}

// Hole 7: configuration mistakes surfaced late.
func TestConfigMistakesAreRefusedAtStart(t *testing.T) {
	t.Parallel()
	ok := consumer.Config{Brokers: []string{"127.0.0.1:1"}, GroupID: "g", RequestsTopic: "r", ResultsTopic: "res", DeadLetterTopic: "d"}
	model := turn.ModelFunc(func(_ context.Context, in turn.Input) (turn.Output, error) { return echo(in) })

	// A Runner missing its Inbox passed New and dead-lettered every request.
	_, err := consumer.New(ok, consumer.RunnerHandler(&turn.Runner{Model: model, Sessions: session.NewMemoryStore()}))
	require.ErrorContains(t, err, "consumer: invalid Handler: turn: Runner.Inbox is nil")
	_, err = consumer.New(ok, consumer.RunnerHandler(nil))
	require.ErrorContains(t, err, "nil Runner")
	_, err = consumer.New(ok, consumer.RunnerHandler(&turn.Runner{Model: model, Sessions: session.NewMemoryStore(), Inbox: inbox.NewMemoryInbox()}))
	require.NoError(t, err)

	// RevokeGrace was checked against the rebalance timeout only when Config.Sarama was set;
	// without it the timeout is sarama's default, 60 s.
	bad := ok
	bad.RevokeGrace = 2 * time.Minute
	_, err = consumer.New(bad, consumer.RunnerHandler(&turn.Runner{Model: model, Sessions: session.NewMemoryStore(), Inbox: inbox.NewMemoryInbox()}))
	require.ErrorContains(t, err, "RevokeGrace: 2m0s (plus 1s to abandon the turn) is not shorter than Sarama.Consumer.Group.Rebalance.Timeout (1m0s)")
	bad = ok
	bad.MaxRateLimits = -1
	_, err = consumer.New(bad, consumer.HandlerFunc(func(context.Context, turn.Request) (*turn.Result, error) { return nil, nil }))
	require.ErrorContains(t, err, "MaxRateLimits: negative")
}

// Hole 7: a missing results or dead-letter topic was not checked at start: Run joined the
// group, looked healthy, and its partitions retried publishing forever.
func TestRunRefusesMissingTopicsBeforeJoining(t *testing.T) {
	t.Parallel()
	for _, field := range []string{"ResultsTopic", "DeadLetterTopic"} {
		t.Run(field, func(t *testing.T) {
			t.Parallel()
			e := setup(t, 1, 1)
			missing := e.cluster.Unique("missing")
			var handled atomic.Bool
			cfg := consumer.Config{Brokers: e.cluster.Brokers(), GroupID: e.group, RequestsTopic: e.requests,
				ResultsTopic: e.results, DeadLetterTopic: e.dlq, Sarama: e.cluster.Config(), Logger: testLogger(t)}
			if field == "ResultsTopic" {
				cfg.ResultsTopic = missing
			} else {
				cfg.DeadLetterTopic = missing
			}
			e.produce(request("c-1", "hello"))
			c, err := consumer.New(cfg, consumer.HandlerFunc(func(context.Context, turn.Request) (*turn.Result, error) {
				handled.Store(true)
				return nil, nil
			}))
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			err = c.Run(ctx)
			require.ErrorContains(t, err, fmt.Sprintf("consumer: Config.%s %q", field, missing))
			require.ErrorIs(t, err, sarama.ErrUnknownTopicOrPartition)
			require.False(t, handled.Load(), "no record was served")
			require.Zero(t, c.Stats().Claims, "it never joined the group")
		})
	}
}

// Hole 7: Run returned nil when its final commit timed out, so a host could not tell a clean
// stop from one whose work will be redone.
func TestRunReportsFailedFinalCommit(t *testing.T) {
	t.Parallel()
	e := setup(t, 1, 1)
	d := &freezeDialer{dialTO: time.Second}
	m := e.start(memberOpts{tune: func(cfg *consumer.Config) {
		cfg.CommitInterval = time.Hour // the mark waits for the final commit
		cfg.Sarama.Net.Proxy.Dialer = d
		cfg.Sarama.Net.ReadTimeout = 10 * time.Second
		cfg.Sarama.Net.WriteTimeout = time.Second
		cfg.Sarama.Net.DialTimeout = time.Second
		cfg.Sarama.Metadata.Retry.Max = 2
	}})
	req := request("c-final", "hello")
	e.produce(req)
	e.waitDone(t, req)
	eventually(t, func() bool { return m.c.Stats().Records == 1 }, "marked")

	d.freeze()
	m.cancel()
	var err error
	select {
	case err = <-m.done:
		close(m.done)
	case <-time.After(5 * time.Minute):
		t.Fatal("Run did not return within 5 minutes")
	}
	require.ErrorIs(t, err, consumer.ErrFinalCommit)
	require.ErrorContains(t, err, "did not finish within 5s")
}
