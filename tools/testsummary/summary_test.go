package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const failingPkg = "github.com/turnstile-go/turnstile/tools/testsummary/testdata/failing"

// testdata/failing.json is `go test -json` of testdata/failing: a test that skips, one that
// fails, and a parallel subtest that logs and then skips with a reason over two lines.
func TestSkippedFromRecordedOutput(t *testing.T) {
	t.Parallel()
	f, err := os.Open(filepath.Join("testdata", "failing.json"))
	require.NoError(t, err)
	defer f.Close()
	skipped, n, err := Skipped(f)
	require.NoError(t, err)
	require.Greater(t, n, 30)
	require.Equal(t, []Skip{
		{Package: failingPkg, Test: "TestSkipsWithAReason", Reason: []string{"failing_test.go:7: testsummary: the reason of a skip"}},
		{Package: failingPkg, Test: "TestSubtests/skips", Reason: []string{
			"failing_test.go:15: a line before the skip",
			"failing_test.go:16: testsummary: a subtest's reason,",
			"    over two lines",
		}},
	}, skipped)

	var out bytes.Buffer
	Print(&out, []Run{{Label: "pass 1 (the recorded one)", Skipped: skipped}, {Label: "pass 2 (another)"}})
	require.Equal(t, `
== skipped tests: 2
pass 1 (the recorded one): 2 skipped
  `+failingPkg+` TestSkipsWithAReason
      failing_test.go:7: testsummary: the reason of a skip
  `+failingPkg+` TestSubtests/skips
      failing_test.go:15: a line before the skip
      failing_test.go:16: testsummary: a subtest's reason,
          over two lines
pass 2 (another): no test skipped
`, out.String())
}

func TestRunArguments(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.json")
	require.NoError(t, os.WriteFile(empty, nil, 0o600))
	notJSON := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(notJSON, []byte("ok  \tsome/pkg\t0.1s\n"), 0o600))
	recorded := filepath.Join("testdata", "failing.json")

	var stdout, stderr bytes.Buffer
	code := run([]string{"pass 1", recorded, "pass 2 (did not run)", filepath.Join(dir, "missing.json"), "pass 3 (empty)", empty}, &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())
	require.Contains(t, stdout.String(), "pass 1: 2 skipped")
	require.NotContains(t, stdout.String(), "pass 2", "a run whose file is missing did not happen")
	require.NotContains(t, stdout.String(), "pass 3", "nor one whose file is empty")

	for _, args := range [][]string{nil, {"pass 1"}, {"pass 1", notJSON}} {
		stderr.Reset()
		require.Equal(t, 2, run(args, &stdout, &stderr), "%q", args)
		require.NotEmpty(t, strings.TrimSpace(stderr.String()))
	}
	require.Contains(t, stderr.String(), "line 1 is not a go test -json event")
}
