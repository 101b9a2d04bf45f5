package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/attachment"
	"github.com/turnstile-go/turnstile/attachment/sqlattachment"
	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
	"github.com/turnstile-go/turnstile/internal/sqltest"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/session/sqlsession"
	"github.com/turnstile-go/turnstile/turn"
)

// markerModel is a scripted agent whose every output carries the request's text (which holds
// its user's marker): a journaled model step, a tool's output (a step too), a deferred tool's
// arguments (an outbox payload), the session state and the answer; a request whose text
// starts with "poison" fails permanently with its text in the reason (a dead inbox entry).
var markerModel = turn.ModelFunc(func(ctx context.Context, in turn.Input) (turn.Output, error) {
	text := in.Request.Text
	if strings.HasPrefix(text, "poison") {
		return turn.Output{}, turn.Permanent(errors.New("refused: " + text))
	}
	if _, err := in.Step(ctx, "model", func(context.Context, string) ([]byte, error) { return json.Marshal("thinking about " + text) }); err != nil {
		return turn.Output{}, err
	}
	if _, err := in.Step(ctx, "tool:lookup", func(context.Context, string) ([]byte, error) { return json.Marshal("order of " + text) }); err != nil {
		return turn.Output{}, err
	}
	j := in.Journal()
	if _, err := j.Defer(ctx, j.Next("tool:send_email"), "send_email", map[string]string{"subject": "re: " + text, "body": text}); err != nil {
		return turn.Output{}, err
	}
	state, err := json.Marshal(map[string]string{"last": text})
	if err != nil {
		return turn.Output{}, err
	}
	return turn.Output{Events: []session.Event{{Text: "answer to " + text}}, State: state}, nil
})

// The acceptance line of issue 40 in direct mode, on SQLite and PostgreSQL: a marker text of
// user A planted through every path (requests, answers, model and tool steps, a deferred
// tool's outbox payload, the session state, a dead request's reason, an attachment) is found
// in no column of any table after session delete --user A, while user B's rows are untouched;
// the dry run's counts are those the deletion then reports. --vacuum leaves no free page in
// the SQLite file, and no marker of A in its bytes.
func TestSessionDeleteErasesEveryCopy(t *testing.T) {
	t.Parallel()
	for _, d := range databases(t) {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := d.open(t)
			pg := d.dialect == sqlinbox.PostgreSQL
			prefix := sqltest.Prefix(t, db, pg)
			flags := []string{"--db=" + d.dsn, "--table-prefix=" + prefix}
			ok(t, append([]string{"migrate"}, flags...)...)
			sessions, err := sqlsession.New(db, sqlsession.Dialect(d.dialect), sqlsession.Options{TablePrefix: prefix})
			require.NoError(t, err)
			ib, err := sqlinbox.New(db, d.dialect, sqlinbox.Options{TablePrefix: prefix})
			require.NoError(t, err)
			files, err := sqlattachment.New(db, d.dialect, sqlattachment.Options{TablePrefix: prefix})
			require.NoError(t, err)
			r := &turn.Runner{Model: markerModel, Sessions: sessions, Inbox: ib, Attachments: files, TurnTimeout: 30 * time.Second}

			id := sqltest.ID(t)[:8]
			userA, userB := "a-"+id, "b-"+id
			markA, markB := "MARKER-A-"+uuid.NewString(), "MARKER-B-"+uuid.NewString()
			run := func(user, conv, text string) {
				_, err := r.Run(ctx, turn.Request{Schema: turn.SchemaVersion, ID: uuid.NewString(), ConversationID: conv, UserID: user, Text: text})
				if strings.HasPrefix(text, "poison") {
					require.Error(t, err)
				} else {
					require.NoError(t, err)
				}
			}
			run(userA, "a1-"+id, "where is my order? "+markA)
			run(userA, "a1-"+id, "and my refund? "+markA)
			run(userA, "a2-"+id, "hello "+markA)
			run(userA, "a2-"+id, "poison "+markA)
			run(userB, "b1-"+id, "hi "+markB)
			for _, u := range []struct{ user, mark string }{{userA, markA}, {userB, markB}} {
				_, err := attachment.PutBytes(ctx, files, attachment.Owner{App: turn.DefaultApp, User: u.user}, "log.txt", "text/plain", []byte("a log of "+u.mark))
				require.NoError(t, err)
			}
			before := sqltest.FindText(t, db, pg, prefix, markA)
			for _, col := range []string{"sessions.state", "events.body", "inbox.result", "inbox.reason", "inbox_steps.output", "outbox.payload", "attachment_chunks.data"} {
				require.Positive(t, before[prefix+col], "A's marker planted in %s: %v", col, before)
			}
			beforeB := sqltest.FindText(t, db, pg, prefix, markB)

			var dry, done turn.Erasure
			require.NoError(t, json.Unmarshal([]byte(ok(t, append([]string{"session", "delete", "--user=" + userA, "--dry-run", "--json"}, flags...)...)), &dry))
			require.True(t, dry.DryRun)
			require.Equal(t, []string{"a1-" + id, "a2-" + id}, dry.Conversations)
			require.Equal(t, before, sqltest.FindText(t, db, pg, prefix, markA), "a dry run deletes nothing")
			for name, want := range map[string]int64{turn.ErasedSessions: 2, turn.ErasedEvents: 6, turn.ErasedInboxEntries: 4,
				turn.ErasedJournalSteps: 9, turn.ErasedOutboxIntents: 3, turn.ErasedAttachments: 1} {
				require.Equal(t, want, dry.Count(name), name)
			}
			table := ok(t, append([]string{"session", "delete", "--user=" + userA, "--dry-run"}, flags...)...)
			require.Regexp(t, `journal steps +inbox +9\n`, table)

			require.NoError(t, json.Unmarshal([]byte(ok(t, append([]string{"session", "delete", "--user=" + userA, "--json"}, flags...)...)), &done))
			require.False(t, done.DryRun)
			require.Equal(t, dry.Kinds, done.Kinds, "the dry run counted what the deletion deleted")
			require.Empty(t, sqltest.FindText(t, db, pg, prefix, markA), "no copy of A's marker in any table")
			require.Equal(t, beforeB, sqltest.FindText(t, db, pg, prefix, markB), "B's rows untouched")

			out := ok(t, append([]string{"session", "delete", "--user=" + userA, "--vacuum"}, flags...)...)
			require.Regexp(t, `sessions +session store +0\n`, out, "nothing left to delete")
			if !pg {
				require.Contains(t, out, "vacuumed the SQLite database")
				var free int
				require.NoError(t, db.QueryRowContext(ctx, `PRAGMA freelist_count`).Scan(&free))
				require.Zero(t, free, "no free page keeps a deleted row")
				path := strings.TrimPrefix(d.dsn, "sqlite:")
				for _, f := range []string{path, path + "-wal"} {
					data, err := os.ReadFile(f)
					if errors.Is(err, os.ErrNotExist) {
						continue
					}
					require.NoError(t, err)
					require.NotContains(t, string(data), markA, "A's marker in the bytes of %s", filepath.Base(f))
				}
			} else {
				require.Contains(t, out, "ran VACUUM on")
				require.Contains(t, out, prefix+"inbox_steps")
			}
			require.Equal(t, beforeB, sqltest.FindText(t, db, pg, prefix, markB), "B's rows untouched by the vacuum")
			code, _, errOut := cli(t, append([]string{"session", "delete", "--user=" + userA, "--vacuum", "--dry-run"}, flags...)...)
			require.Equal(t, exitUsage, code, errOut)
		})
	}
}
