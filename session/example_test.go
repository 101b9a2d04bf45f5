package session_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/turnstile-go/turnstile/session"
)

// The Store contract on the in-memory store: an append at the version read, a stale writer
// fenced by ErrConflict, a turn stored once per request id, and a conversation kept from
// another user.
func ExampleMemoryStore() {
	ctx := context.Background()
	store := session.NewMemoryStore()
	key := session.Key{App: "support", User: "u-12", Conversation: "c-7731"}

	sess, err := store.Create(ctx, key, nil)
	if err != nil {
		log.Fatal(err)
	}
	turn := session.Turn{RequestID: "req-1", Events: []session.Event{
		{ID: "req-1/0", Author: "user", Text: "where is my refund?"},
		{ID: "req-1/1", Author: "assistant", Text: "It was issued today."},
	}}
	a, err := store.Append(ctx, key, sess.Version, turn)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("version", a.Version, "events", len(a.Events))

	// A zombie worker that read version 0 before the append cannot write.
	_, err = store.Append(ctx, key, 0, session.Turn{RequestID: "req-2", Events: []session.Event{{ID: "req-2/0", Text: "late"}}})
	fmt.Println(errors.Is(err, session.ErrConflict))

	// The same request appended again at the current version writes nothing.
	a, err = store.Append(ctx, key, a.Version, turn)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("version", a.Version, "duplicate", a.Duplicate)

	// Another user naming the conversation gets nothing of it (G7).
	_, err = store.Get(ctx, session.Key{App: "support", User: "u-99", Conversation: "c-7731"}, 10)
	fmt.Println(errors.Is(err, session.ErrOwnerMismatch))
	// Output:
	// version 1 events 2
	// true
	// version 1 duplicate true
	// true
}

// Retention on the in-memory store (session/sqlsession's Store has it too): a user's data
// deletion request, and a nightly job that deletes sessions idle for 30 days.
func ExampleMemoryStore_DeleteUser() {
	ctx := context.Background()
	store := session.NewMemoryStore()
	for _, k := range []session.Key{
		{App: "support", User: "u-1", Conversation: "c-1"},
		{App: "support", User: "u-1", Conversation: "c-2"},
		{App: "support", User: "u-2", Conversation: "c-3"},
	} {
		if _, err := store.Create(ctx, k, nil); err != nil {
			log.Fatal(err)
		}
	}
	var r session.Retention = store

	n, err := r.DeleteUser(ctx, "support", "u-1")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("deleted for u-1:", n)

	n, err = r.DeleteIdle(ctx, "support", time.Now().Add(-30*24*time.Hour))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("deleted idle:", n)

	_, err = store.Get(ctx, session.Key{App: "support", User: "u-1", Conversation: "c-1"}, 10)
	fmt.Println(errors.Is(err, session.ErrNotFound)) // the user's next request starts afresh
	// Output:
	// deleted for u-1: 2
	// deleted idle: 0
	// true
}
