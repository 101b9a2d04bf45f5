package session_test

import (
	"testing"

	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/session/sessiontest"
)

func TestMemoryStore(t *testing.T) {
	t.Parallel()
	sessiontest.Run(t, func(*testing.T) session.Store { return session.NewMemoryStore() })
}

func TestMemoryStoreShared(t *testing.T) {
	t.Parallel()
	shared := session.NewMemoryStore()
	sessiontest.Run(t, func(*testing.T) session.Store { return shared })
}
