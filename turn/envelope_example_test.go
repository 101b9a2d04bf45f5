package turn_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"strings"
	"time"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
)

// A producer encodes a request as the value of a record keyed by its conversation id; the
// consumer decodes and validates it.
func ExampleRequest_Encode() {
	req := turn.Request{
		ID:             "6f1b7c1e-2d8f-4a53-9c1e-0f6f3a3c2b10",
		ConversationID: "c-7731", // also the record key
		UserID:         "u-12",
		Sequence:       2,
		Text:           "where is my refund?",
		Metadata:       map[string]string{"tenant": "acme"},
		CreatedAt:      time.Date(2026, 11, 30, 5, 0, 0, 0, time.UTC),
	}
	value, err := req.Encode() // Schema 0 is written as SchemaVersion
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(value))

	got, err := turn.Decode(value)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(got.Schema, got.ConversationID, got.Sequence, got.Metadata["tenant"])
	// Output:
	// {"schema":1,"request_id":"6f1b7c1e-2d8f-4a53-9c1e-0f6f3a3c2b10","conversation_id":"c-7731","user_id":"u-12","sequence":2,"text":"where is my refund?","metadata":{"tenant":"acme"},"created_at":"2026-11-30T05:00:00Z"}
	// 1 c-7731 2 acme
}

// Decode refuses what a lenient reader might let through, naming the field at fault: every
// failure is a *turn.DecodeError, which the consumer dead-letters at once (KindPermanent).
func ExampleDecoder_Decode() {
	d := turn.Decoder{MaxTextBytes: 16}
	for _, value := range []string{
		`{"schema":1,"request_id":"6f1b7c1e-2d8f-4a53-9c1e-0f6f3a3c2b10","conversation_id":"c-1","user_id":"u-1","text":"hi"}`,
		`{"schema":2,"request_id":"6f1b7c1e-2d8f-4a53-9c1e-0f6f3a3c2b10","conversation_id":"c-1","user_id":"u-1","text":"hi"}`,
		`{"schema":1,"request_id":"6F1B7C1E-2D8F-4A53-9C1E-0F6F3A3C2B10","conversation_id":"c-1","user_id":"u-1","text":"hi"}`,
		`{"schema":1,"request_id":"6f1b7c1e-2d8f-4a53-9c1e-0f6f3a3c2b10","conversation_id":"c-1","user_id":"u-1","text":"a message over sixteen bytes"}`,
		`{"schema":1,"request_id":"6f1b7c1e-2d8f-4a53-9c1e-0f6f3a3c2b10","conversation_id":"c-1","user_id":"u-1","USER_ID":"u-2","text":"hi"}`,
	} {
		req, err := d.Decode([]byte(value))
		var de *turn.DecodeError
		switch {
		case errors.As(err, &de):
			fmt.Printf("field %q: %s (%s)\n", de.Field, de.Problem, turn.Classify(err))
		case err != nil:
			log.Fatal(err)
		default:
			fmt.Println("ok:", req.Text)
		}
	}
	// Output:
	// ok: hi
	// field "schema": unknown version 2, this reader knows 1 (permanent)
	// field "request_id": not in the canonical form (RFC 9562 section 4: lower-case hex, 8-4-4-4-12); write it as 6f1b7c1e-2d8f-4a53-9c1e-0f6f3a3c2b10 (permanent)
	// field "text": 28 bytes, over the limit of 16 (permanent)
	// field "USER_ID": differs from the envelope's "user_id" only in case (permanent)
}

// Kinds lists every error kind, for code that keeps something per kind; ParseKind reads a
// kind's name back, as package deadletter does with a dead letter's kind header.
func ExampleKinds() {
	for _, k := range turn.Kinds() {
		back, ok := turn.ParseKind(k.String())
		fmt.Println(int(k), k, back == k && ok)
	}
	_, ok := turn.ParseKind("fatal")
	fmt.Println("fatal:", ok)
	// Output:
	// 0 none true
	// 1 attempt true
	// 2 permanent true
	// 3 rate_limited true
	// 4 unavailable true
	// 5 abandoned true
	// 6 run_alone true
	// fatal: false
}

// A model that returns turn.Permanent dead-letters its request at once: Run returns a
// *turn.DeadLetterError with the reason for the dead letter's headers, and a redelivery of the
// request is answered from the inbox without calling the model again (with KindNone: that run
// did not see the error, only the stored reason).
func ExamplePermanent() {
	calls := 0
	model := turn.ModelFunc(func(_ context.Context, in turn.Input) (turn.Output, error) {
		calls++
		return turn.Output{}, turn.Permanent(errors.New("prompt rejected by the content policy"))
	})
	runner := &turn.Runner{Model: model, Sessions: session.NewMemoryStore(), Inbox: inbox.NewMemoryInbox(),
		Logger: slog.New(slog.DiscardHandler)}
	req := turn.Request{Schema: turn.SchemaVersion, ID: "6f1b7c1e-2d8f-4a53-9c1e-0f6f3a3c2b10", ConversationID: "c-7731", UserID: "u-12", Text: "..."}

	for range 2 { // the first delivery, then a redelivery
		_, err := runner.Run(context.Background(), req)
		var dl *turn.DeadLetterError
		if !errors.As(err, &dl) {
			log.Fatalf("want a dead letter, got %v", err)
		}
		fmt.Printf("%s: kind %s, attempts %d, reason %q\n", turn.Classify(err), dl.Kind, dl.Attempts, dl.Reason)
	}
	fmt.Println("model calls:", calls)
	// Output:
	// permanent: kind permanent, attempts 1, reason "turn 6f1b7c1e-2d8f-4a53-9c1e-0f6f3a3c2b10 attempt 1: model: permanent: prompt rejected by the content policy"
	// permanent: kind none, attempts 1, reason "turn 6f1b7c1e-2d8f-4a53-9c1e-0f6f3a3c2b10 attempt 1: model: permanent: prompt rejected by the content policy"
	// model calls: 1
}

// A model that is rate limited returns turn.RetryAfter: the attempt is given back to the
// inbox, so the consumer pauses and tries again later without bringing the request closer to
// the dead-letter topic.
func ExampleRetryAfter() {
	limited := true
	model := turn.ModelFunc(func(_ context.Context, in turn.Input) (turn.Output, error) {
		if limited {
			return turn.Output{}, turn.RetryAfter(3*time.Second, errors.New("HTTP 429 Too Many Requests"))
		}
		return turn.Output{Events: []session.Event{{Text: fmt.Sprintf("answered on attempt %d", in.Attempt)}}}, nil
	})
	runner := &turn.Runner{Model: model, Sessions: session.NewMemoryStore(), Inbox: inbox.NewMemoryInbox(),
		Logger: slog.New(slog.DiscardHandler)}
	req := turn.Request{Schema: turn.SchemaVersion, ID: "6f1b7c1e-2d8f-4a53-9c1e-0f6f3a3c2b10", ConversationID: "c-7731", UserID: "u-12", Text: "hi"}

	_, err := runner.Run(context.Background(), req)
	d, _ := turn.RetryDelay(err)
	fmt.Println(turn.Classify(err), "retry after", d)

	limited = false
	res, err := runner.Run(context.Background(), req)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Text) // attempt 1 again: the rate-limited one was given back
	// Output:
	// rate_limited retry after 3s
	// answered on attempt 1
}

// The consumer puts its producer's limit in every turn's context; a Runner called by other
// code can do the same. An answer too large to publish is dead-lettered before it becomes
// part of the conversation's history.
func ExampleWithResultLimit() {
	model := turn.ModelFunc(func(_ context.Context, in turn.Input) (turn.Output, error) {
		return turn.Output{Events: []session.Event{{Text: strings.Repeat("very long answer ", 100)}}}, nil
	})
	sessions := session.NewMemoryStore()
	runner := &turn.Runner{Model: model, Sessions: sessions, Inbox: inbox.NewMemoryInbox(),
		Logger: slog.New(slog.DiscardHandler),
		// A fixed clock: the size includes completed_at, whose fraction is shorter when the
		// time's microseconds end in zeros.
		NowFunc: func() time.Time { return time.Date(2026, 11, 30, 5, 0, 0, 123456000, time.UTC) }}
	req := turn.Request{Schema: turn.SchemaVersion, ID: "6f1b7c1e-2d8f-4a53-9c1e-0f6f3a3c2b10", ConversationID: "c-7731", UserID: "u-12", Text: "tell me all"}

	ctx := turn.WithResultLimit(context.Background(), turn.ResultLimit{Bytes: 1000, Source: "the results topic's 1000 bytes"})
	_, err := runner.Run(ctx, req)
	var tooLarge *turn.ResultTooLargeError
	if !errors.As(err, &tooLarge) {
		log.Fatalf("want a result too large, got %v", err)
	}
	fmt.Println(turn.Classify(err), tooLarge.Size, ">", tooLarge.Limit)

	sess, err := sessions.Get(context.Background(), runner.Key(req), 10)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("events in the session:", sess.EventCount)
	// Output:
	// permanent 1874 > 1000
	// events in the session: 0
}

// In a replay into a sandbox (consumer.Config.Replay) the requests already had their effects
// in production: a tool stubs its side effect when the turn's context says so.
func ExampleIsReplay() {
	refund := func(ctx context.Context, key string) string {
		if turn.IsReplay(ctx) {
			return "refund stubbed (replay)"
		}
		return "refund issued under key " + key
	}
	ctx := context.Background()
	fmt.Println(refund(ctx, "4cc243b6"))
	fmt.Println(refund(turn.WithReplay(ctx), "4cc243b6"))
	// Output:
	// refund issued under key 4cc243b6
	// refund stubbed (replay)
}
