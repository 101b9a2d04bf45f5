// Package journaltest holds what the model clients' tests share: the memory inbox as the step
// journal and outbox of a real turn.Runner, a tool set that counts its calls and keys, and a
// request builder.
package journaltest

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/turn"
)

// New returns an empty memory inbox: an inbox.Outbox, so a Runner over it records steps and
// promotes deferred ones.
func New() *inbox.MemoryInbox { return inbox.NewMemoryInbox() }

// Steps returns the steps the journal of ib holds for req's turn, run by a Runner of the
// default app.
func Steps(t *testing.T, ib inbox.Journal, req turn.Request) []inbox.Step {
	t.Helper()
	steps, err := ib.Steps(context.Background(), turn.InboxKey(turn.DefaultApp, req))
	require.NoError(t, err)
	return steps
}
