package turntest_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/turntest"
)

// Issue 10, hole 7: on a machine without kcat, NeedKcat skips with the reason (and fails under
// CI=true), before a test starts anything that a skip would cut off. Not parallel: it changes
// PATH and CI for the process.
func TestNeedKcatWithoutKcat(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // an empty directory: no kcat on PATH
	requireSkipsThenFailsUnderCI(t, turntest.NeedKcat, "kcat not found on PATH (apt-get install kcat)")
}

// The same for Python's Kafka client: TURNSTILE_PYTHON names a Python that does not exist here,
// as a machine without python3-confluent-kafka would have none that imports it.
func TestNeedPythonKafkaWithoutIt(t *testing.T) {
	t.Setenv(turntest.EnvPython, filepath.Join(t.TempDir(), "python3"))
	requireSkipsThenFailsUnderCI(t, turntest.NeedPythonKafka, "cannot import confluent_kafka (apt-get install python3-confluent-kafka)")
}

// requireSkipsThenFailsUnderCI checks that need, on a machine without its tool, skips with
// reason outside CI and fails the test under CI=true.
func requireSkipsThenFailsUnderCI(t *testing.T, need func(testing.TB), reason string) {
	t.Helper()
	t.Setenv("CI", "")
	f := &fakeT{TB: t}
	f.run(func() { need(f) })
	require.True(t, f.skipped, "skipped")
	require.False(t, f.failed)
	require.Contains(t, f.msg, reason)

	t.Setenv("CI", "true")
	f = &fakeT{TB: t}
	f.run(func() { need(f) })
	require.True(t, f.failed, "under CI a missing tool fails the test")
	require.Contains(t, f.msg, "CI=true")
}
