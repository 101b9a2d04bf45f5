package main

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/examples/internal/demo/demotest"
)

func TestMain(m *testing.M) { demotest.Main(m) }

// Issue 23: a program, not a test, starts the test kit's cluster, produces requests and reads
// their results. The test builds the command and runs it as a user would.
func TestProgramProducesAndReadsResults(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "devloop")
	build := exec.Command("go", "build", "-o", bin, ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)

	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, "where is my refund?", "and my invoice?", "thanks")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "stderr: %s", stderr.String())
	require.Equal(t, `result 1 of 3: conversation c-dev, 2 events: you said "where is my refund?" (message 1 of the conversation)
result 2 of 3: conversation c-dev, 2 events: you said "and my invoice?" (message 2 of the conversation)
result 3 of 3: conversation c-dev, 2 events: you said "thanks" (message 3 of the conversation)
`, stdout.String())
}

// Bad flags exit 2; a context that ends first is an error, exit 1.
func TestRunExitCodes(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	require.Equal(t, 2, run(context.Background(), []string{"-nope"}, &stdout, &stderr))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	stderr.Reset()
	require.Equal(t, 1, run(ctx, nil, &stdout, &stderr))
	require.True(t, strings.HasPrefix(stderr.String(), "devloop: "), stderr.String())
	require.Contains(t, stderr.String(), "context canceled")
	require.Empty(t, stdout.String())
}
