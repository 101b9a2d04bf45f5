package sessiontest_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	_ "modernc.org/sqlite"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/session/sessiontest"
	"github.com/turnstile-go/turnstile/session/sqlsession"
)

// openSQLite opens a SQLite database of t's own, closed when t ends.
func openSQLite(t *testing.T) *sql.DB {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "turnstile.db")+
		"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// A store's test runs the conformance suite against it; here session/sqlsession's Store on
// SQLite, a database per subtest. In the store's _test.go file the function below is
// func TestSQLiteStore(t *testing.T); it needs a *testing.T, so the example is not run.
func ExampleRun() {
	testSQLiteStore := func(t *testing.T) {
		sessiontest.Run(t, func(t *testing.T) session.Store {
			store, err := sqlsession.New(openSQLite(t), sqlsession.SQLite, sqlsession.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if err := store.Migrate(context.Background()); err != nil {
				t.Fatal(err)
			}
			return store
		})
	}
	_ = testSQLiteStore
}

// A store that joins the inbox's completion to its append (a session.TxAppender with an
// inbox.TxCompleter on the same *sql.DB) runs RunJoint too: func TestJoint(t *testing.T).
func ExampleRunJoint() {
	testJoint := func(t *testing.T) {
		sessiontest.RunJoint(t, func(t *testing.T) (session.TxAppender, inbox.TxCompleter) {
			db := openSQLite(t)
			store, err := sqlsession.New(db, sqlsession.SQLite, sqlsession.Options{})
			if err != nil {
				t.Fatal(err)
			}
			dedup, err := sqlinbox.New(db, sqlinbox.SQLite, sqlinbox.Options{})
			if err != nil {
				t.Fatal(err)
			}
			for _, migrate := range []func(context.Context) error{store.Migrate, dedup.Migrate} {
				if err := migrate(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			return store, dedup
		})
	}
	_ = testJoint
}
