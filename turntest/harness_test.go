package turntest_test

import (
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
	require.Contains(t, ft.msg, "1 of at least 2 records within 300ms; per partition: p0=0 p1=1")

	require.Len(t, c.ReadAll(t, topic, 0, time.Second), 0)
	require.Equal(t, int64(-1), c.CommittedOffset(t, c.Unique("nobody"), topic, 0))
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
}
