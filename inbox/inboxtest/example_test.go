package inboxtest_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	_ "modernc.org/sqlite"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/inbox/inboxtest"
	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
)

// An inbox's test runs the conformance suite against it; here inbox/sqlinbox's Inbox on
// SQLite. Purge acts on the whole inbox, so each subtest gets an inbox of its own: a database
// in its temporary directory. In the inbox's _test.go file the function below is
// func TestSQLiteInbox(t *testing.T); it needs a *testing.T, so the example is not run.
func ExampleRun() {
	testSQLiteInbox := func(t *testing.T) {
		inboxtest.Run(t, func(t *testing.T) inbox.Inbox {
			db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "inbox.db")+
				"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			ib, err := sqlinbox.New(db, sqlinbox.SQLite, sqlinbox.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if err := ib.Migrate(context.Background()); err != nil {
				t.Fatal(err)
			}
			return ib
		})
	}
	_ = testSQLiteInbox
}
