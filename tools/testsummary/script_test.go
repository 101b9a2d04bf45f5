package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// runTestScript runs the repository's ./test.sh with args, on the packages of the go list
// patterns in packages, on a PATH without kcat (every other program of PATH is linked into a
// directory of its own), with CI unset so that a missing kcat skips, and returns its combined
// output and exit code.
func runTestScript(t *testing.T, packages string, args ...string) (string, int) {
	t.Helper()
	farm := t.TempDir()
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue // PATH may name a directory that is not there
		}
		for _, e := range entries {
			link := filepath.Join(farm, e.Name())
			if e.Name() == "kcat" || e.IsDir() {
				continue
			}
			if _, err := os.Lstat(link); err == nil {
				continue // the first directory on PATH wins, as it does for a lookup
			}
			require.NoError(t, os.Symlink(filepath.Join(dir, e.Name()), link))
		}
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	cmd := exec.Command(filepath.Join(root, "test.sh"), args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "PATH="+farm, "CI=", "TURNSTILE_TEST_PACKAGES="+packages)
	if os.Getenv("TURNSTILE_TEMPORAL_CLI") == "" {
		// No Temporal test runs here: an install of the CLI is not wanted.
		cmd.Env = append(cmd.Env, "TURNSTILE_TEMPORAL_CLI="+filepath.Join(farm, "no-temporal-cli"))
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return out.String(), exit.ExitCode()
	}
	require.NoError(t, err, out.String())
	return out.String(), 0
}

// Issue 23: on a machine without kcat, ./test.sh ends by listing the kcat tests it skipped,
// with the reason, pass by pass, and exits 0; the consumer's second pass is labelled. (The
// script tests run one after the other: each runs go test itself.)
func TestScriptListsSkippedKcatTests(t *testing.T) {
	out, code := runTestScript(t, "./turntest ./consumer", "-run", "^TestKcat")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "== pass 1 of 3: every package but the chaos matrix\n")
	require.Contains(t, out, "ok  \tgithub.com/turnstile-go/turnstile/turntest")
	require.Contains(t, out, "\n== pass 3 of 3: the consumer by partition (TURNSTILE_TEST_ORDERING=by-partition)\nok  \tgithub.com/turnstile-go/turnstile/consumer")
	require.NotContains(t, out, "pass 2 of 3", "no chaos package among the packages")
	_, summary, found := strings.Cut(out, "\n== skipped tests: 4\n")
	require.True(t, found, out)
	pass1, pass3, found := strings.Cut(summary, "pass 3 (the consumer by partition (TURNSTILE_TEST_ORDERING=by-partition)): 1 skipped\n")
	require.True(t, found, summary)
	require.Contains(t, pass1, "pass 1 (every package but the chaos matrix): 3 skipped\n")
	for _, name := range []string{"TestKcatMurmur2Agrees", "TestKcatRoundTrip"} {
		require.Contains(t, pass1, "  github.com/turnstile-go/turnstile/turntest "+name+"\n      kcat_test.go:")
	}
	require.Contains(t, pass1, "  github.com/turnstile-go/turnstile/consumer TestKcatInterop\n      interop_test.go:")
	require.Contains(t, pass3, "  github.com/turnstile-go/turnstile/consumer TestKcatInterop\n      interop_test.go:")
	require.Equal(t, 4, strings.Count(summary, "turntest: kcat not found on PATH (apt-get install kcat)"), summary)
}

// A failed test still fails ./test.sh, and the summary of what skipped comes after the
// failure; the consumer's by-partition pass is labelled.
func TestScriptFailsWhenATestFails(t *testing.T) {
	out, code := runTestScript(t, "./tools/testsummary/testdata/failing ./consumer", "-run", "^(TestSkipsWithAReason|TestFails)$")
	require.NotEqual(t, 0, code, out)
	require.Contains(t, out, "testsummary: a failure on purpose")
	require.Contains(t, out, "FAIL\tgithub.com/turnstile-go/turnstile/tools/testsummary/testdata/failing")
	_, summary, found := strings.Cut(out, "\n== skipped tests: 1\n")
	require.True(t, found, out)
	require.Contains(t, summary, "failing TestSkipsWithAReason\n      failing_test.go:7: testsummary: the reason of a skip\n")
	require.NotContains(t, out, "pass 3 of 3", "the script stops at the failed pass")
}
