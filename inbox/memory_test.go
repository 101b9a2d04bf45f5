package inbox_test

import (
	"testing"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/inbox/inboxtest"
)

func TestMemoryInbox(t *testing.T) {
	t.Parallel()
	inboxtest.Run(t, func(*testing.T) inbox.Inbox { return inbox.NewMemoryInbox() })
}

func TestMemoryRelay(t *testing.T) {
	t.Parallel()
	inboxtest.RunRelay(t, func(*testing.T) inbox.Outbox { return inbox.NewMemoryInbox() })
}
