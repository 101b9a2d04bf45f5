package sqlsession_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"

	_ "modernc.org/sqlite"

	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/session/sqlsession"
	"github.com/turnstile-go/turnstile/turn"
)

// A session store on an in-memory SQLite database: create a session, append a turn, load it.
func Example() {
	ctx := context.Background()
	db, err := sql.Open("sqlite", "file:example-sessions?mode=memory&cache=shared&_pragma=busy_timeout(5000)")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	store, err := sqlsession.New(db, sqlsession.SQLite, sqlsession.Options{})
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}

	key := session.Key{App: "support", User: "u-42", Conversation: "c-7"}
	sess, err := store.Create(ctx, key, nil)
	if err != nil {
		log.Fatal(err)
	}
	_, err = store.Append(ctx, key, sess.Version, session.Turn{
		RequestID: "req-1",
		Events: []session.Event{
			{ID: "req-1/0", Author: "user", Text: "Where is my parcel?"},
			{ID: "req-1/1", Author: "assistant", Text: "It leaves the depot today."},
		},
		State: []byte(`{"topic":"delivery"}`),
	})
	if err != nil {
		log.Fatal(err)
	}

	sess, err = store.Get(ctx, key, 20)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("version", sess.Version, "state", string(sess.State))
	for _, e := range sess.Events {
		fmt.Println(e.Seq, e.Author+":", e.Text)
	}
	// Output:
	// version 1 state {"topic":"delivery"}
	// 1 user: Where is my parcel?
	// 2 assistant: It leaves the depot today.
}

// A turn.Runner on the SQLite session store and inbox, both on one *sql.DB: the Runner then
// stores the turn and completes its request in one transaction. The same code serves
// PostgreSQL with sql.Open("pgx", dsn) and the PostgreSQL dialect.
func Example_runner() {
	ctx := context.Background()
	db, err := sql.Open("sqlite", "file:example-runner?mode=memory&cache=shared&_pragma=busy_timeout(5000)")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	store, err := sqlsession.New(db, sqlsession.SQLite, sqlsession.Options{})
	if err != nil {
		log.Fatal(err)
	}
	dedup, err := sqlinbox.New(db, sqlinbox.SQLite, sqlinbox.Options{})
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range []func(context.Context) error{store.Migrate, dedup.Migrate} {
		if err := m(ctx); err != nil {
			log.Fatal(err)
		}
	}

	model := turn.ModelFunc(func(_ context.Context, in turn.Input) (turn.Output, error) {
		return turn.Output{Events: []session.Event{{Text: fmt.Sprintf("reply %d", in.Session.Version+1)}}}, nil
	})
	runner := &turn.Runner{Model: model, Sessions: store, Inbox: dedup, App: "support"}
	if err := runner.CheckConcurrency(64); err != nil { // the consumer's default MaxInFlight
		log.Fatal(err)
	}
	for _, id := range []string{"6f1b7c1e-2d8f-4a53-9c1e-0f6f3a3c2b10", "0b9c4f4e-8a1d-4c55-9d7e-1f2a3b4c5d6e"} {
		req := turn.Request{Schema: turn.SchemaVersion, ID: id, ConversationID: "c-7", UserID: "u-42", Text: "hello"}
		res, err := runner.Run(ctx, req)
		if err != nil {
			log.Fatal(err)
		}
		e, err := dedup.Get(ctx, runner.InboxKey(req))
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(res.Text, "/ inbox:", e.Status)
	}
	sess, err := store.Get(ctx, session.Key{App: "support", User: "u-42", Conversation: "c-7"}, 10)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("version", sess.Version, "events", sess.EventCount)
	// Output:
	// reply 1 / inbox: done
	// reply 2 / inbox: done
	// version 2 events 4
}
