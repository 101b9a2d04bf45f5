// Package demotest holds what the examples' tests share.
package demotest

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/turnstile-go/turnstile/examples/internal/demo"
	"github.com/turnstile-go/turnstile/turntest"
)

// Main runs an example's tests and then fails if they left goroutines behind (goleak, with
// the allowances of the Kafka harness).
func Main(m *testing.M) { goleak.VerifyTestMain(m, turntest.LeakOptions()...) }

// RequireChecks fails t unless checks are exactly the named ones, in order, and each passed.
func RequireChecks(t testing.TB, checks demo.Checks, names ...string) {
	t.Helper()
	for _, c := range checks {
		require.True(t, c.OK, "check %q failed: %s", c.Name, c.Detail)
	}
	require.Equal(t, names, checks.Names())
	require.True(t, checks.OK())
}
