package turntest_test

import (
	"context"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/turntest"
)

// Bad input fails the test with a message; it never panics.
func TestBadInputFails(t *testing.T) {
	t.Parallel()
	c := turntest.NewCluster(t, turntest.Options{Brokers: 1})

	for _, tc := range []struct {
		name string
		fn   func(tb testing.TB)
		want string
	}{
		{"empty topic name", func(tb testing.TB) { c.CreateTopic(tb, "", 1) }, "a name is"},
		{"bad topic name", func(tb testing.TB) { c.CreateTopic(tb, "a/b", 1) }, "a name is"},
		{"no partitions", func(tb testing.TB) { c.CreateTopic(tb, "t", 0) }, "partitions must be"},
		{"read unknown topic", func(tb testing.TB) { c.ReadAll(tb, "nope", 1, time.Second) }, "partitions"},
		{"read negative", func(tb testing.TB) { c.ReadAll(tb, "nope", -1, time.Second) }, "wantAtLeast"},
		{"read no timeout", func(tb testing.TB) { c.ReadAll(tb, "nope", 1, 0) }, "timeout"},
		{"produce unknown topic", func(tb testing.TB) { c.Produce(tb, "nope", "k", nil, nil) }, "produce"},
	} {
		ft := &fakeT{TB: t}
		ft.run(func() { tc.fn(ft) })
		require.True(t, ft.failed, tc.name)
		require.Contains(t, ft.msg, tc.want, tc.name)
	}

	ft := &fakeT{TB: t}
	ft.run(func() { turntest.NewCluster(ft, turntest.Options{Brokers: 9}) })
	require.True(t, ft.failed)
	require.Contains(t, ft.msg, "1 to 5")

	require.Regexp(t, `^invalid-[0-9a-f]{8}$`, c.Unique("no spaces allowed"))
	require.Regexp(t, `^ok\.name_1-[0-9a-f]{8}$`, c.Unique("ok.name_1"))
	require.NotEqual(t, c.Unique("x"), c.Unique("x"))
}

// ReadAll reports what it got when too few records come in time, and
// CommittedOffset says -1 for a group that committed nothing.
func TestReadAllTimeoutAndNoCommit(t *testing.T) {
	t.Parallel()
	c := turntest.NewCluster(t, turntest.Options{Brokers: 2})
	topic := c.CreateTopic(t, "short", 2)
	c.ProduceTo(t, topic, 1, "k", []byte("only"), nil)

	ft := &fakeT{TB: t}
	ft.run(func() { c.ReadAll(ft, topic, 2, 300*time.Millisecond) })
	require.True(t, ft.failed)
	require.Contains(t, ft.msg, "1 of at least 2 records before the context ended (context deadline exceeded); per partition: p0=0 p1=1")
	require.Contains(t, ft.msg, "(the timeout was 300ms)")

	require.Len(t, c.ReadAll(t, topic, 0, time.Second), 0)
	require.Equal(t, int64(-1), c.CommittedOffset(t, c.Unique("nobody"), topic, 0))
}

// The context forms return errors where the testing.TB forms fail the test: bad input, an
// unknown topic, a context that ended; a program uses them.
func TestContextFormsReturnErrors(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := turntest.NewClusterContext(ctx, turntest.Options{Brokers: 2})
	require.NoError(t, err)
	defer c.Close()
	require.NotNil(t, c.Fake())

	topic, err := c.CreateTopicContext(ctx, "ctx", 2)
	require.NoError(t, err)
	_, err = c.CreateTopicContext(ctx, "a/b", 1)
	require.ErrorContains(t, err, "a name is 1 to 200")
	_, err = c.CreateTopicContext(ctx, "t", 0)
	require.ErrorContains(t, err, "partitions must be 1 to 10000")

	req := turntest.NewRequest("c-1", "u-1", "hello")
	p, o, err := c.ProduceRequestContext(ctx, topic, req)
	require.NoError(t, err)
	o2, err := c.ProduceToContext(ctx, topic, 1-p, "k", []byte("not a result"), nil)
	require.NoError(t, err)
	require.Equal(t, int64(0), o)
	require.Equal(t, int64(0), o2)
	_, err = c.ProduceToContext(ctx, topic, 7, "k", nil, nil)
	require.ErrorContains(t, err, "partition 7 out of range")
	n, err := c.RecordCountContext(ctx, topic)
	require.NoError(t, err)
	require.Equal(t, int64(2), n)
	msgs, err := c.ReadAllContext(ctx, topic, 2)
	require.NoError(t, err)
	require.Len(t, msgs, 2)
	_, err = c.ReadResultsContext(ctx, topic, 2)
	require.ErrorContains(t, err, "is not a result")
	letters, err := c.ReadDeadLettersContext(ctx, topic, 2)
	require.NoError(t, err)
	require.Len(t, letters, 2)
	_, err = c.ReadAllContext(ctx, "nope", 1)
	require.ErrorContains(t, err, "partitions")
	_, err = c.ReadAllContext(ctx, topic, -1)
	require.ErrorContains(t, err, "wantAtLeast -1 must be >= 0")
	off, err := c.CommittedOffsetContext(ctx, c.Unique("nobody"), topic, 0)
	require.NoError(t, err)
	require.Equal(t, int64(-1), off)

	short, stop := context.WithTimeout(ctx, 200*time.Millisecond)
	defer stop()
	_, err = c.ReadAllUncommittedContext(short, topic, 3)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "2 of at least 3 records")

	done, end := context.WithCancel(ctx)
	end()
	_, _, err = c.ProduceContext(done, topic, "k", nil, nil)
	require.ErrorIs(t, err, context.Canceled)
	_, err = c.RecordCountContext(done, topic)
	require.ErrorIs(t, err, context.Canceled)
	_, err = c.CommittedOffsetContext(done, "g", topic, 0)
	require.ErrorIs(t, err, context.Canceled)
	_, err = turntest.NewClusterContext(done, turntest.Options{})
	require.ErrorIs(t, err, context.Canceled)
	_, err = turntest.NewClusterContext(ctx, turntest.Options{Brokers: 9})
	require.ErrorContains(t, err, "1 to 5")
}

// With TURNSTILE_KAFKA_BROKERS set, Start uses those brokers (here a kfake
// cluster standing in for a real one), and deletes the topics it created
// when the test ends.
func TestRealClusterMode(t *testing.T) {
	outer := turntest.NewCluster(t, turntest.Options{Brokers: 1})
	t.Setenv(turntest.EnvBrokers, outer.BrokerList())

	var topic string
	t.Run("inner", func(t *testing.T) {
		c := turntest.NewCluster(t, turntest.Options{})
		require.Nil(t, c.Fake())
		require.Equal(t, outer.Brokers(), c.Brokers())
		require.Equal(t, 10*time.Second, c.SessionTimeout())
		topic = c.CreateTopic(t, "real", 2)
		c.Produce(t, topic, "k", []byte("v"), nil)
		require.Len(t, c.ReadAll(t, topic, 1, 30*time.Second), 1)
	})

	admin, err := sarama.NewClusterAdmin(outer.Brokers(), outer.Config())
	require.NoError(t, err)
	defer admin.Close()
	topics, err := admin.ListTopics()
	require.NoError(t, err)
	require.NotContains(t, topics, topic, "the inner test's topic was deleted")
}

// An unreachable TURNSTILE_KAFKA_BROKERS skips the test, or fails it under
// CI=true.
func TestUnreachableBrokers(t *testing.T) {
	t.Setenv(turntest.EnvBrokers, "127.0.0.1:1")
	for _, ci := range []string{"", "true"} {
		t.Setenv("CI", ci)
		ft := &fakeT{TB: t}
		ft.run(func() { turntest.NewCluster(ft, turntest.Options{}) })
		require.Equal(t, ci == "true", ft.failed, "CI=%q", ci)
		require.Equal(t, ci != "true", ft.skipped, "CI=%q", ci)
		require.Contains(t, ft.msg, "cannot reach TURNSTILE_KAFKA_BROKERS=127.0.0.1:1")
	}
	_, err := turntest.NewClusterContext(context.Background(), turntest.Options{})
	require.ErrorIs(t, err, turntest.ErrUnreachable)
}
