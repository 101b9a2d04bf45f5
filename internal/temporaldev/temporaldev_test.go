package temporaldev

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/enums/v1"
)

// The dev server's arguments register each search attribute with the CLI's type name and
// allow sub-second timers.
func TestArgs(t *testing.T) {
	args := Args(map[string]enums.IndexedValueType{"A": enums.INDEXED_VALUE_TYPE_KEYWORD, "B": enums.INDEXED_VALUE_TYPE_INT})
	require.Contains(t, args, "A=Keyword")
	require.Contains(t, args, "B=Int")
	require.Contains(t, args, `history.timerProcessorMaxTimeShift="50ms"`)
}

// TURNSTILE_TEMPORAL_CLI wins, and a path that does not exist is an error that names it.
func TestCLIPathFromEnv(t *testing.T) {
	exe := filepath.Join(t.TempDir(), "temporal")
	require.NoError(t, os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755))
	t.Setenv(EnvCLI, exe)
	got, err := CLIPath()
	require.NoError(t, err)
	require.Equal(t, exe, got)
	t.Setenv(EnvCLI, exe+"-missing")
	_, err = CLIPath()
	require.ErrorContains(t, err, EnvCLI)
}
