package turn_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
)

// BenchmarkRunnerMemory runs turns of 1,000 conversations on the memory stores with an instant
// model: the Runner's own cost per turn, the number the consumer's overhead benchmark
// (tools/consumerbench -scenario overhead) spends most of its CPU on.
func BenchmarkRunnerMemory(b *testing.B) {
	model := turn.ModelFunc(func(_ context.Context, in turn.Input) (turn.Output, error) {
		return turn.Output{Events: []session.Event{{Text: "ok"}}}, nil
	})
	r := &turn.Runner{Model: model, Sessions: session.NewMemoryStore(), Inbox: inbox.NewMemoryInbox()}
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		req := turn.Request{Schema: turn.SchemaVersion, ID: fmt.Sprintf("00000000-0000-4000-8000-%012d", i),
			ConversationID: fmt.Sprintf("conv-%d", i%1000), UserID: "user", Text: "hello"}
		if _, err := r.Run(ctx, req); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
