package main

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/internal/temporaldev"
)

func TestMain(m *testing.M) {
	if os.Getenv(envWorker) != "" { // the example re-executes its binary as the killed worker
		os.Exit(workerProcess())
	}
	os.Exit(m.Run())
}

// The example runs end to end (a small workload) and every check passes: exit code 0.
func TestExample(t *testing.T) {
	if _, err := temporaldev.CLIPath(); errors.Is(err, temporaldev.ErrNoCLI) {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	var out, errOut bytes.Buffer
	code := command().Main([]string{"-requests", "120", "-conversations", "12"}, &out, &errOut)
	t.Log(out.String(), errOut.String())
	require.Equal(t, 0, code)
	require.Equal(t, 8, strings.Count(out.String(), "PASS "), "eight checks passed")
	require.NotContains(t, out.String(), "FAIL")
}

// Bad flags exit 2.
func TestBadFlags(t *testing.T) {
	var out, errOut bytes.Buffer
	require.Equal(t, 2, command().Main([]string{"-nope"}, &out, &errOut))
	require.Equal(t, 1, command().Main([]string{"-requests", "1", "-conversations", "5"}, &out, &errOut), "more conversations than requests")
}
