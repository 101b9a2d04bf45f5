package console

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/session/sqlsession"
	"github.com/turnstile-go/turnstile/turn"
)

// stores are a test's session store and inbox on one database.
type stores struct {
	db       *sql.DB
	sessions *sqlsession.Store
	inbox    *sqlinbox.Inbox
}

// openStores makes the stores on db (SQLite or PostgreSQL) under prefix and migrates them.
func openStores(t testing.TB, db *sql.DB, dialect sqlinbox.Dialect, prefix string) stores {
	t.Helper()
	ss, err := sqlsession.New(db, sqlsession.Dialect(dialect), sqlsession.Options{TablePrefix: prefix})
	require.NoError(t, err)
	ib, err := sqlinbox.New(db, dialect, sqlinbox.Options{TablePrefix: prefix})
	require.NoError(t, err)
	require.NoError(t, ss.Migrate(context.Background()))
	require.NoError(t, ib.Migrate(context.Background()))
	return stores{db: db, sessions: ss, inbox: ib}
}

// errModelDown is the failure of testModel while broken for a request.
var errModelDown = errors.New("the model refuses this request")

// testModel runs one journaled step (tool:lookup) and defers one side effect (tool:email)
// per turn, and fails permanently, while broken is set, for a request whose text holds
// "refund".
type testModel struct{ broken atomic.Bool }

func (m *testModel) Respond(ctx context.Context, in turn.Input) (turn.Output, error) {
	if m.broken.Load() && strings.Contains(in.Request.Text, "refund") {
		return turn.Output{}, turn.Permanent(errModelDown)
	}
	out, err := in.Step(ctx, "tool:lookup", func(context.Context, string) ([]byte, error) {
		return []byte(`{"order":"o-17","status":"shipped"}`), nil
	})
	if err != nil {
		return turn.Output{}, err
	}
	j := in.Journal()
	if _, err := j.Defer(ctx, j.Next("tool:email"), "email", map[string]string{"to": in.Request.UserID, "subject": "your order"}); err != nil {
		return turn.Output{}, err
	}
	return turn.Output{Events: []session.Event{{Author: "assistant", Text: "Order o-17: " + string(out)}}}, nil
}
