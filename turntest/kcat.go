package turntest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// KcatTimeout bounds one kcat run.
const KcatTimeout = 30 * time.Second

// NeedKcat skips the test (fails it under CI=true) when kcat is not on PATH. Call it before
// starting anything that a skip would cut off mid-connect.
func NeedKcat(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("kcat"); err != nil {
		missing(t, "turntest: kcat not found on PATH (apt-get install kcat): %v", err)
	}
}

// Kcat runs the kcat binary (Debian package kcat) with args and no input,
// and returns its standard output. Pass the brokers yourself:
// "-b", c.BrokerList(). When kcat is not on PATH the test is
// skipped, or failed under CI=true; a non-zero exit or a run longer than
// [KcatTimeout] fails the test with kcat's standard error.
func Kcat(t testing.TB, args ...string) string {
	t.Helper()
	return KcatInput(t, nil, args...)
}

// KcatInput is [Kcat] with stdin as kcat's standard input, which is what
// kcat -P reads records from (one per line by default).
func KcatInput(t testing.TB, stdin []byte, args ...string) string {
	t.Helper()
	path, err := exec.LookPath("kcat")
	if err != nil {
		missing(t, "turntest: kcat not found on PATH (apt-get install kcat): %v", err)
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), KcatTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	err = cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("turntest: kcat %s: no exit within %v; stderr: %s", strings.Join(args, " "), KcatTimeout, stderr.String())
	}
	if err != nil {
		t.Fatalf("turntest: kcat %s: %v; stderr: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

// BrokerList returns [Cluster.Brokers] joined by commas, the form kcat's -b
// and most command line clients take.
func (c *Cluster) BrokerList() string { return strings.Join(c.brokers, ",") }

// EnvPython names the environment variable that overrides [PythonPath].
const EnvPython = "TURNSTILE_PYTHON"

// PythonPath returns the Python whose confluent_kafka (librdkafka; Debian's
// python3-confluent-kafka) interop tests use: $TURNSTILE_PYTHON, or /usr/bin/python3, Debian's,
// which the Debian package installs for (a python3 earlier on PATH, a virtualenv's say, may
// lack it).
func PythonPath() string {
	if p := os.Getenv(EnvPython); p != "" {
		return p
	}
	return "/usr/bin/python3"
}

// NeedPythonKafka skips the test (fails it under CI=true) when [PythonPath] cannot import
// confluent_kafka. Call it before starting anything that a skip would cut off mid-connect.
func NeedPythonKafka(t testing.TB) {
	t.Helper()
	if out, err := exec.Command(PythonPath(), "-c", "import confluent_kafka").CombinedOutput(); err != nil {
		missing(t, "turntest: Python's Kafka client not found: %s cannot import confluent_kafka (apt-get install python3-confluent-kafka): %v %s",
			PythonPath(), err, bytes.TrimSpace(out))
	}
}
