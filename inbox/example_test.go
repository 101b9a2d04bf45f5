package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/turnstile-go/turnstile/inbox"
)

// The life of a request in the inbox: two deliveries counted as attempts, a failure that was
// not the request's fault given back, a dead letter, and an operator's re-drive that keeps the
// reason in the audit.
func ExampleMemoryInbox() {
	ctx := context.Background()
	ib := inbox.NewMemoryInbox()
	d := inbox.Delivery{Key: "req-1", Conversation: "c-7", Topic: "agent.requests", Partition: 3, Offset: 41}

	for range 2 {
		e, err := ib.Begin(ctx, d)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(e.Status, e.Attempts)
	}
	if err := ib.Fail(ctx, "req-1", inbox.Failure{Reason: "model answered 503", Refund: true}); err != nil {
		log.Fatal(err)
	}
	if err := ib.MarkDead(ctx, "req-1", "bug 42: the refund tool is misconfigured"); err != nil {
		log.Fatal(err)
	}
	e, err := ib.Get(ctx, "req-1")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(e.Status, e.Attempts, e.Reason)

	e, err = ib.Redrive(ctx, "req-1", "alice: bug 42 fixed")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(e.Status, e.Attempts, e.Redrives[0].Reason, "/", e.Redrives[0].Note)
	_, err = ib.Redrive(ctx, "req-1", "bob: again")
	fmt.Println(errors.Is(err, inbox.ErrNotDead)) // one re-drive wins
	// Output:
	// new 1
	// in_progress 2
	// dead 1 bug 42: the refund tool is misconfigured
	// in_progress 0 bug 42: the refund tool is misconfigured / alice: bug 42 fixed
	// true
}

// RunPurge deletes done and dead entries older than the horizon, now and then on a schedule,
// until its context ends. Here its clock runs two days ahead, so that the entries made a
// moment ago count as old, and the first run stops it.
func ExampleRunPurge() {
	ctx, cancel := context.WithCancel(context.Background())
	ib := inbox.NewMemoryInbox()
	for _, key := range []string{"req-1", "req-2", "req-3"} {
		if _, err := ib.Begin(ctx, inbox.Delivery{Key: key, Conversation: "c-7"}); err != nil {
			log.Fatal(err)
		}
	}
	if err := ib.Complete(ctx, "req-1", []byte(`{"text":"done"}`)); err != nil {
		log.Fatal(err)
	}
	if err := ib.MarkDead(ctx, "req-2", "poison"); err != nil {
		log.Fatal(err)
	}

	err := inbox.RunPurge(ctx, ib, inbox.PurgeSchedule{
		Horizon: 24 * time.Hour, // keep it longer than the requests topic's retention.ms
		Logger:  slog.New(slog.DiscardHandler),
		NowFunc: func() time.Time { return time.Now().Add(48 * time.Hour) },
		PurgedFunc: func(deleted int64, err error) {
			fmt.Println("purged", deleted, err)
			cancel()
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	_, err = ib.Get(context.Background(), "req-3")
	fmt.Println("in progress kept:", err == nil)
	// Output:
	// purged 2 <nil>
	// in progress kept: true
}
