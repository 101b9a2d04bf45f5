package sqlinbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"

	_ "modernc.org/sqlite"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
)

// An inbox on an in-memory SQLite database: a request delivered twice, then completed, then
// delivered again after a crash.
func Example() {
	ctx := context.Background()
	db, err := sql.Open("sqlite", "file:example-inbox?mode=memory&cache=shared&_pragma=busy_timeout(5000)")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	ib, err := sqlinbox.New(db, sqlinbox.SQLite, sqlinbox.Options{})
	if err != nil {
		log.Fatal(err)
	}
	if err := ib.Migrate(ctx); err != nil {
		log.Fatal(err)
	}

	d := inbox.Delivery{Key: "req-1", Conversation: "c-7", Topic: "requests", Partition: 0, Offset: 41}
	for range 2 {
		e, err := ib.Begin(ctx, d)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(e.Status, "attempt", e.Attempts)
	}
	if err := ib.Complete(ctx, "req-1", []byte(`{"text":"done"}`)); err != nil {
		log.Fatal(err)
	}
	e, err := ib.Begin(ctx, d)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(e.Status, "attempt", e.Attempts, string(e.Result))
	// Output:
	// new attempt 1
	// in_progress attempt 2
	// done attempt 2 {"text":"done"}
}

// New sizes the pool for the turns that run at once (Options.Concurrency, the consumer's
// MaxInFlight), and refuses a pool whose MaxOpenConns cannot serve them.
func ExampleNew_concurrency() {
	db, err := sql.Open("sqlite", "file:example-pool?mode=memory&cache=shared&_pragma=busy_timeout(5000)")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(8)

	_, err = sqlinbox.New(db, sqlinbox.SQLite, sqlinbox.Options{Concurrency: 16})
	fmt.Println(errors.Is(err, sqlinbox.ErrPoolTooSmall))
	fmt.Println(err)

	ib, err := sqlinbox.New(db, sqlinbox.SQLite, sqlinbox.Options{Concurrency: 8})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ib.CheckConcurrency(8), ib.CheckConcurrency(64) != nil)
	// Output:
	// true
	// sqlinbox: the *sql.DB's connection pool is smaller than the concurrency: MaxOpenConns is 8, the concurrency 16 (raise it with db.SetMaxOpenConns, or lower the concurrency)
	// <nil> true
}
