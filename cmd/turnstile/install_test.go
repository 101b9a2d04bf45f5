package main

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// The README and the command's doc install the CLI from a checkout: "go install ...@latest"
// cannot work before a release.
func TestInstallFromACheckout(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"../../README.md", "main.go"} {
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		require.NotContains(t, string(b), "cmd/turnstile@latest", path)
		require.Contains(t, string(b), "go install ./cmd/turnstile", path)
	}
}
