package sqlinbox_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
	"github.com/turnstile-go/turnstile/internal/sqltest"
)

// Fail and MarkDead take the reason from err.Error(), which may quote a model's or a server's
// bytes (NUL, invalid UTF-8). PostgreSQL's TEXT refuses them; the inbox stores them cleaned
// (NUL dropped, invalid bytes as U+FFFD) on every database, so the entry is still marked dead.
func TestReasonBytes(t *testing.T) {
	for _, db := range []sqltest.DB{sqltest.SQLiteFileDB, sqltest.PostgresDB} {
		t.Run(db.Name, func(t *testing.T) {
			b, _ := newInbox(t, db, sqlinbox.Options{})
			ctx := context.Background()
			_, err := b.Begin(ctx, inbox.Delivery{Key: "r1", Conversation: "c", Topic: "t"})
			require.NoError(t, err)
			require.NoError(t, b.MarkDead(ctx, "r1", "model said: \xff\xfe garbage \x00"))
			e, err := b.Get(ctx, "r1")
			require.NoError(t, err)
			require.Equal(t, inbox.StatusDead, e.Status)
			require.Equal(t, "model said: \uFFFD garbage ", e.Reason)
		})
	}
}
