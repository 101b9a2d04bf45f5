package turn_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
)

// A turn run twice, as Kafka may deliver a request twice: the second run answers from the
// inbox without calling the model, and the session holds the turn once.
func ExampleRunner_Run() {
	calls := 0
	model := turn.ModelFunc(func(ctx context.Context, in turn.Input) (turn.Output, error) {
		calls++
		answer := fmt.Sprintf("You said %q; %d earlier events.", in.Request.Text, in.Session.EventCount)
		return turn.Output{Events: []session.Event{{Text: answer}}}, nil
	})
	sessions := session.NewMemoryStore()
	runner := &turn.Runner{Model: model, Sessions: sessions, Inbox: inbox.NewMemoryInbox(),
		Logger: slog.New(slog.DiscardHandler)}

	req := turn.Request{Schema: turn.SchemaVersion, ID: "6f1b7c1e-2d8f-4a53-9c1e-0f6f3a3c2b10",
		ConversationID: "c-7731", UserID: "u-12", Text: "where is my refund?"}
	ctx := context.Background()
	for range 2 {
		res, err := runner.Run(ctx, req)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("attempt %d, replayed %t: %s\n", res.Attempt, res.Replayed, res.Text)
	}
	sess, err := sessions.Get(ctx, runner.Key(req), 10)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("model calls %d, session events %d\n", calls, sess.EventCount)
	// Output:
	// attempt 1, replayed false: You said "where is my refund?"; 0 earlier events.
	// attempt 1, replayed true: You said "where is my refund?"; 0 earlier events.
	// model calls 1, session events 2
}

// A side effect takes the tool key as its idempotency key: the same on every attempt and every
// worker, different per request and per call.
func ExampleToolKey_everyAttempt() {
	const requestID = "6f1b7c1e-2d8f-4a53-9c1e-0f6f3a3c2b10"
	refund := turn.ToolKey(requestID, "refund#1")
	fmt.Println(refund)
	fmt.Println(turn.ToolKey(requestID, "refund#1") == refund) // the next attempt, on any worker
	fmt.Println(turn.ToolKey(requestID, "email#1") == refund)  // another side effect of the turn
	// Output:
	// bc42ec26-a581-5931-9f33-d7ef38bf6370
	// true
	// false
}

// Inside a ModelClient, Input.ToolKey gives the same key for the turn's request.
func ExampleInput_ToolKey() {
	in := turn.Input{Request: turn.Request{ID: "6f1b7c1e-2d8f-4a53-9c1e-0f6f3a3c2b10", UserID: "u-12", ConversationID: "c-7731"}}
	fmt.Println(in.ToolKey("refund#1"))
	// Output: 4cc243b6-47f6-5ad8-952d-7138dd3989ac
}

// The error kinds a model returns, and what Classify makes of them: what the consumer then
// does is in the package doc.
func ExampleClassify() {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, err := range []error{
		nil,
		errors.New("model answered 500"),
		turn.Permanent(errors.New("prompt rejected by the policy")),
		turn.RetryAfter(2*time.Second, errors.New("HTTP 429")),
		turn.Unavailable(errors.New("connection refused")),
		fmt.Errorf("%w: %w", turn.ErrAbandoned, context.Cause(ctx)),
		fmt.Errorf("model: %w", turn.ErrTurnTimeout),
	} {
		kind := turn.Classify(err)
		if d, ok := turn.RetryDelay(err); ok {
			fmt.Printf("%-12s after %s\n", kind, d)
			continue
		}
		fmt.Println(kind)
	}
	// Output:
	// none
	// attempt
	// permanent
	// rate_limited after 2s
	// unavailable
	// abandoned
	// attempt
}
