package sqlsession_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"

	_ "modernc.org/sqlite"

	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/session/sqlsession"
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
