package turn_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
	"github.com/turnstile-go/turnstile/internal/sqltest"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/session/sqlsession"
	"github.com/turnstile-go/turnstile/turn"
)

// benchInFlight is how many turns the journal benchmark keeps in flight.
const benchInFlight = 64

// BenchmarkJournal measures the step journal's cost: turns of an instant model with no step
// against turns of three recorded steps (model, tool, model, each with a 64-byte output),
// 64 turns in flight, each turn in a conversation of its own (two turns of one conversation at once would
// conflict), on the memory stores and on PostgreSQL (one
// database, the joint path). The cost per step is (ns/turn with steps - ns/turn without) / 3;
// BENCHMARKS.md has the command and the figures.
func BenchmarkJournal(b *testing.B) {
	output := []byte(fmt.Sprintf("%q", make([]byte, 62)))
	stepModel := func(steps int) turn.ModelClient {
		return turn.ModelFunc(func(ctx context.Context, in turn.Input) (turn.Output, error) {
			for i := range steps {
				name := "model"
				if i%2 == 1 {
					name = "tool:lookup"
				}
				if _, err := in.Step(ctx, name, func(context.Context, string) ([]byte, error) { return output, nil }); err != nil {
					return turn.Output{}, err
				}
			}
			return turn.Output{Events: []session.Event{{Text: "ok"}}}, nil
		})
	}
	stores := map[string]func(b *testing.B) (session.Store, inbox.Inbox){
		"memory": func(*testing.B) (session.Store, inbox.Inbox) {
			return session.NewMemoryStore(), inbox.NewMemoryInbox()
		},
		"postgres": func(b *testing.B) (session.Store, inbox.Inbox) {
			db := sqltest.PostgresPool(b)
			db.SetMaxOpenConns(benchInFlight + 8)
			db.SetMaxIdleConns(benchInFlight + 8)
			prefix := sqltest.Prefix(b, db, true)
			ctx := context.Background()
			s, err := sqlsession.New(db, sqlsession.PostgreSQL, sqlsession.Options{TablePrefix: prefix, Concurrency: benchInFlight})
			if err != nil {
				b.Fatal(err)
			}
			ib, err := sqlinbox.New(db, sqlinbox.PostgreSQL, sqlinbox.Options{TablePrefix: prefix, Concurrency: benchInFlight})
			if err != nil {
				b.Fatal(err)
			}
			if err := s.Migrate(ctx); err != nil {
				b.Fatal(err)
			}
			if err := ib.Migrate(ctx); err != nil {
				b.Fatal(err)
			}
			return s, ib
		},
	}
	for _, store := range []string{"memory", "postgres"} {
		for _, steps := range []int{0, 3} {
			b.Run(fmt.Sprintf("%s/steps=%d", store, steps), func(b *testing.B) {
				sessions, ib := stores[store](b)
				r := &turn.Runner{Model: stepModel(steps), Sessions: sessions, Inbox: ib, InlineModel: true}
				var seq atomic.Int64
				run := sqltest.ID(b)[:8]
				b.SetParallelism(max(1, benchInFlight/runtime.GOMAXPROCS(0)))
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					ctx := context.Background()
					for pb.Next() {
						i := seq.Add(1)
						req := turn.Request{Schema: turn.SchemaVersion, ID: fmt.Sprintf("%s-0000-4000-8000-%012d", run, i),
							ConversationID: fmt.Sprintf("conv-%s-%d", run, i), UserID: "user", Text: "hello"}
						if _, err := r.Run(ctx, req); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "turns/s")
			})
		}
	}
}
