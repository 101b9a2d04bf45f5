package main

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/attachment"
	"github.com/turnstile-go/turnstile/attachment/fsattachment"
	"github.com/turnstile-go/turnstile/attachment/sqlattachment"
	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
	"github.com/turnstile-go/turnstile/internal/sqltest"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/session/sqlsession"
	"github.com/turnstile-go/turnstile/turn"
)

// A user's deletion deletes the user's attachments from the database's attachment store and
// from --attachments-dir, and no other user's, nor the user's in another app; --idle-for
// deletes those last put before its horizon; a database without attachment tables says so
// and deletes the rest.
func TestSessionDeleteDeletesAttachments(t *testing.T) {
	t.Parallel()
	for _, d := range databases(t) {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := d.open(t)
			prefix := sqltest.Prefix(t, db, d.dialect == sqlinbox.PostgreSQL)
			flags := []string{"--db=" + d.dsn, "--table-prefix=" + prefix}
			require.Contains(t, ok(t, append([]string{"migrate"}, flags...)...), "sessions, inbox and attachment tables")
			inDB, err := sqlattachment.New(db, d.dialect, sqlattachment.Options{TablePrefix: prefix})
			require.NoError(t, err)
			dir := t.TempDir()
			inDir, err := fsattachment.New(dir, fsattachment.Options{})
			require.NoError(t, err)
			sessions, err := sqlsession.New(db, d.dialect, sqlsession.Options{TablePrefix: prefix, Concurrency: -1})
			require.NoError(t, err)
			_, err = sessions.Create(ctx, session.Key{App: turn.DefaultApp, User: "u-1", Conversation: "c-1"}, nil)
			require.NoError(t, err)

			u1, u2 := attachment.Owner{App: turn.DefaultApp, User: "u-1"}, attachment.Owner{App: turn.DefaultApp, User: "u-2"}
			elsewhere := attachment.Owner{App: "other-app", User: "u-1"}
			stores := []attachment.Retention{inDB, inDir}
			var ref attachment.Ref
			for _, s := range stores {
				for _, o := range []attachment.Owner{u1, u2, elsewhere} {
					ref, err = s.Put(ctx, o, "server.log", "text/plain", strings.NewReader("a pasted log"))
					require.NoError(t, err)
				}
			}
			present := func(s attachment.Store, o attachment.Owner) bool {
				_, err := s.Stat(ctx, o, ref.ID)
				if err != nil {
					require.ErrorIs(t, err, attachment.ErrNotFound)
				}
				return err == nil
			}

			out := ok(t, append([]string{"session", "delete", "--user=u-1", "--attachments-dir=" + dir}, flags...)...)
			require.Contains(t, out, "user u-1 in app turnstile: 1 conversations (c-1)")
			require.Regexp(t, `sessions +session store +1\n`, out)
			require.Regexp(t, `inbox entries +inbox +0\n`, out)
			require.Regexp(t, `attachments +attachment store +2\n`, out, "one in the database, one in the directory")
			for _, s := range stores {
				require.False(t, present(s, u1), "u-1's attachment is gone from %T", s)
				require.True(t, present(s, u2), "u-2's stays in %T", s)
				require.True(t, present(s, elsewhere), "u-1's in another app stays in %T", s)
			}
			out = ok(t, append([]string{"session", "delete", "--user=u-1"}, flags...)...)
			require.Regexp(t, `attachments +attachment store +0\n`, out)

			out = ok(t, append([]string{"session", "delete", "--idle-for=1ns", "--attachments-dir=" + dir}, flags...)...)
			require.Contains(t, out, "deleted 1 attachments of app turnstile last put before")
			require.Equal(t, 2, strings.Count(out, "deleted 1 attachments of app turnstile"), out)
			for _, s := range stores {
				require.False(t, present(s, u2), "u-2's attachment was idle in %T", s)
				require.True(t, present(s, elsewhere), "another app's stays in %T", s)
			}

			// A database whose service keeps no attachments there: said, and the rest done.
			bare := sqltest.Prefix(t, db, d.dialect == sqlinbox.PostgreSQL)
			s, err := sqlsession.New(db, d.dialect, sqlsession.Options{TablePrefix: bare, Concurrency: -1})
			require.NoError(t, err)
			require.NoError(t, s.Migrate(ctx))
			code, out, errOut := cli(t, "session", "delete", "--user=u-1", "--db="+d.dsn, "--table-prefix="+bare)
			require.Equal(t, exitOK, code, "stdout: %s\nstderr: %s", out, errOut)
			require.Regexp(t, `sessions +session store +0\n`, out)
			require.Contains(t, errOut, `no attachment tables under the table prefix "`+bare+`" in the database`)

			code, _, errOut = cli(t, append([]string{"session", "delete", "--user=u-1", "--conversation=c-1", "--attachments-dir=" + dir}, flags...)...)
			require.Equal(t, exitUsage, code)
			require.Contains(t, errOut, "attachments belong to a user, not a conversation")
		})
	}
}
