package sqlattachment_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/turnstile-go/turnstile/attachment"
	"github.com/turnstile-go/turnstile/attachment/sqlattachment"
)

// A store on SQLite (on PostgreSQL, sql.Open("pgx", dsn) and sqlattachment.PostgreSQL): a
// Put, a range read, and a user's deletion.
func Example() {
	dir, err := os.MkdirTemp("", "sqlattachment-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "turnstile.db")+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	store, err := sqlattachment.New(db, sqlattachment.SQLite, sqlattachment.Options{})
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}

	owner := attachment.Owner{App: "support", User: "u-12"}
	ref, err := store.Put(ctx, owner, "server.log", "text/plain", strings.NewReader(strings.Repeat("ok\n", 100_000)+"FATAL\n"))
	if err != nil {
		log.Fatal(err)
	}
	tail, err := store.Read(ctx, owner, ref.ID, ref.Size-9, 100) // short: the range passes the end
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d bytes, ends %q\n", ref.Size, tail)
	n, err := store.DeleteUser(ctx, "support", "u-12")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("deleted", n)
	// Output:
	// 300006 bytes, ends "ok\nFATAL\n"
	// deleted 1
}
