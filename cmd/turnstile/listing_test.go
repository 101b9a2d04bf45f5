package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
	"github.com/turnstile-go/turnstile/turn"
)

// outbox list shows what needs attention first and says when --limit cuts it: with two
// delivered intents older than a dead one and --limit 2, it listed the two delivered ones and
// hid the dead one, silently. inbox steps finds the entry as inbox get does, by request id,
// user and conversation (it took only the raw key).
func TestOutboxListAttentionFirstAndInboxStepsByRequest(t *testing.T) {
	t.Parallel()
	d := databases(t)[1] // sqlite
	require.Equal(t, "sqlite", d.name)
	ctx := context.Background()
	db := d.open(t)
	ok(t, "migrate", "--db="+d.dsn)
	ib, err := sqlinbox.New(db, d.dialect, sqlinbox.Options{Concurrency: -1})
	require.NoError(t, err)
	key := turn.InboxKey(turn.DefaultApp, turn.Request{ID: "req-1", UserID: "u-1", ConversationID: "c-1"})
	_, err = ib.Begin(ctx, inbox.Delivery{Key: key, Conversation: "c-1", Topic: "requests"})
	require.NoError(t, err)
	for i := 1; i <= 4; i++ {
		_, err := ib.RecordStep(ctx, key, inbox.Step{Ordinal: i, Name: "tool:email", Output: []byte(`{"tool":"email","args":{},"key":"k"}`), Deferred: true})
		require.NoError(t, err)
	}
	_, err = ib.Promote(ctx, key, 0)
	require.NoError(t, err)
	claimed, err := ib.Claim(ctx, 4, time.Hour)
	require.NoError(t, err)
	require.Len(t, claimed, 4)
	byID := map[string]inbox.Intent{}
	for _, it := range claimed {
		byID[it.ID] = it
	}
	settle := func(ordinal int, dead bool) {
		it := byID[inbox.IntentID(key, ordinal)]
		if dead {
			require.NoError(t, ib.Bury(ctx, it.ID, it.Attempts, "400: bad address"))
			return
		}
		require.NoError(t, ib.Delivered(ctx, it.ID, it.Attempts))
	}
	settle(1, false)
	settle(2, false)
	settle(3, true) // 4 stays pending, claimed
	dead, pending := inbox.IntentID(key, 3), inbox.IntentID(key, 4)
	dbf := "--db=" + d.dsn

	code, out, errOut := cli(t, "outbox", "list", dbf, "--limit=2")
	require.Equal(t, exitOK, code, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3, out)
	require.Equal(t, dead, strings.Fields(lines[1])[0], "the dead intent first:\n%s", out)
	require.Equal(t, pending, strings.Fields(lines[2])[0], "then the pending one:\n%s", out)
	require.Contains(t, errOut, "showing 2 intents; more rows: raise --limit (now 2)")

	code, out, errOut = cli(t, "outbox", "list", dbf, "--json")
	require.Equal(t, exitOK, code, errOut)
	var all []intentJSON
	require.NoError(t, json.Unmarshal([]byte(out), &all))
	var statuses []string
	for _, it := range all {
		statuses = append(statuses, it.Status)
	}
	require.Equal(t, []string{"dead", "pending", "delivered", "delivered"}, statuses)
	require.Contains(t, errOut, "4 intents")
	require.NotContains(t, errOut, "more rows")

	code, _, errOut = cli(t, "outbox", "list", dbf, "--status=delivered", "--limit=1")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, errOut, "more rows")

	// inbox steps with inbox get's flags.
	code, out, errOut = cli(t, "inbox", "steps", dbf, "--request-id=req-1", "--user=u-1", "--conversation=c-1")
	require.Equal(t, exitOK, code, errOut)
	require.Equal(t, 4, strings.Count(out, "tool:email"), out)
	code, _, errOut = cli(t, "inbox", "steps", dbf, "--request-id=req-1", "--user=u-1", "--conversation=c-1", "--app=other")
	require.Equal(t, exitNotFound, code, "the key is scoped by --app: %s", errOut)
	code, _, errOut = cli(t, "inbox", "steps", dbf, "--request-id=req-1")
	require.Equal(t, exitUsage, code, errOut)
	require.Contains(t, errOut, "(or give --key)")
	code, _, errOut = cli(t, "inbox", "steps", dbf, "--key="+key)
	require.Equal(t, exitOK, code, errOut)
}
