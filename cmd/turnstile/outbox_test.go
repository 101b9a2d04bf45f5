package main

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
	"github.com/turnstile-go/turnstile/internal/sqltest"
)

// outbox list shows the intents of committed turns (filtered by status and conversation, as
// a table and as JSON), outbox redrive makes a dead one pending, and inbox steps lists a
// request's journal; on SQLite and PostgreSQL.
func TestOutboxCommands(t *testing.T) {
	t.Parallel()
	for _, d := range databases(t) {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := d.open(t)
			prefix := sqltest.Prefix(t, db, d.dialect == sqlinbox.PostgreSQL)
			ok(t, "migrate", "--db="+d.dsn, "--table-prefix="+prefix)
			ib, err := sqlinbox.New(db, d.dialect, sqlinbox.Options{TablePrefix: prefix, Concurrency: -1})
			require.NoError(t, err)
			const key, conv = "app/u-1/c-1/req-1", "c-1"
			_, err = ib.Begin(ctx, inbox.Delivery{Key: key, Conversation: conv, Topic: "requests"})
			require.NoError(t, err)
			for i, s := range []inbox.Step{{Name: "model", Output: []byte(`{"text":"hi"}`)},
				{Name: "tool:refund", Output: []byte(`{"tool":"refund","args":{},"key":"k1"}`), Deferred: true},
				{Name: "tool:email", Output: []byte(`{"tool":"email","args":{},"key":"k2"}`), Deferred: true}} {
				s.Ordinal = i + 1
				_, err := ib.RecordStep(ctx, key, s)
				require.NoError(t, err)
			}
			n, err := ib.Promote(ctx, key, 0)
			require.NoError(t, err)
			require.Equal(t, 2, n)
			dead := inbox.IntentID(key, 2)
			require.NoError(t, ib.Bury(ctx, dead, 0, "400: bad\naccount"))
			dbf := []string{"--db=" + d.dsn, "--table-prefix=" + prefix}

			out := ok(t, append([]string{"outbox", "list"}, dbf...)...)
			require.Contains(t, out, "ID  ")
			require.Contains(t, out, dead)
			require.Contains(t, out, "400: bad account", "a reason on one line")
			require.Contains(t, out, inbox.IntentID(key, 3))

			var its []map[string]any
			out = ok(t, append([]string{"outbox", "list", "--status=dead", "--json"}, dbf...)...)
			require.NoError(t, json.Unmarshal([]byte(out), &its))
			require.Len(t, its, 1)
			require.Equal(t, dead, its[0]["id"])
			require.Equal(t, "dead", its[0]["status"])
			require.Equal(t, conv, its[0]["conversation"])
			require.Contains(t, its[0], "next_at")
			out = ok(t, append([]string{"outbox", "list", "--conversation=other", "--json"}, dbf...)...)
			require.JSONEq(t, "[]", out)
			out = ok(t, append([]string{"outbox", "list", "--limit=1", "--json"}, dbf...)...)
			require.NoError(t, json.Unmarshal([]byte(out), &its))
			require.Len(t, its, 1)

			code, _, errOut := cli(t, append([]string{"outbox", "list", "--status=done"}, dbf...)...)
			require.Equal(t, exitUsage, code, errOut)
			code, _, errOut = cli(t, append([]string{"outbox", "redrive", inbox.IntentID(key, 3)}, dbf...)...)
			require.Equal(t, exitFailed, code, errOut)
			require.Contains(t, errOut, "is pending, not dead")
			code, _, errOut = cli(t, append([]string{"outbox", "redrive", "nope#1"}, dbf...)...)
			require.Equal(t, exitNotFound, code, errOut)
			code, _, errOut = cli(t, append([]string{"outbox", "redrive"}, dbf...)...)
			require.Equal(t, exitUsage, code, errOut)

			out = ok(t, append([]string{"outbox", "redrive", dead, "--note=fixed (INC-1)"}, dbf...)...)
			require.Contains(t, out, "re-drove intent "+dead)
			its2, err := ib.Intents(ctx, inbox.IntentFilter{Status: inbox.IntentPending})
			require.NoError(t, err)
			require.Len(t, its2, 2)

			out = ok(t, append([]string{"inbox", "steps", key}, dbf...)...)
			require.Contains(t, out, "ORDINAL")
			require.Contains(t, out, "tool:refund")
			var steps []map[string]any
			out = ok(t, append([]string{"inbox", "steps", "--key=" + key, "--json"}, dbf...)...)
			require.NoError(t, json.Unmarshal([]byte(out), &steps))
			require.Len(t, steps, 3)
			require.Equal(t, "model", steps[0]["name"])
			require.Equal(t, true, steps[1]["deferred"])
			require.EqualValues(t, len(`{"text":"hi"}`), steps[0]["bytes"])
			code, _, errOut = cli(t, append([]string{"inbox", "steps", "no-such-key"}, dbf...)...)
			require.Equal(t, exitNotFound, code, errOut)

			requireJSONCovered(t)
		})
	}
}
