package console

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
	"github.com/turnstile-go/turnstile/internal/record"
	"github.com/turnstile-go/turnstile/internal/sqltest"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turntest"
)

// The shape of BenchmarkPages' stores: benchConversations conversations of benchTurns turns
// each (100,000 turns), benchUsers owners, a deferred intent every tenth turn (10,000; one in
// a hundred of them dead), and benchDeadLetters dead letters on the topic.
const (
	benchConversations = 2000
	benchTurns         = 50
	benchUsers         = 200
	benchDeadLetters   = 1000
	benchApp           = "bench"
)

func benchConv(i int) string { return fmt.Sprintf("c-%05d", i) }
func benchUser(i int) string { return fmt.Sprintf("u-%04d", i%benchUsers) }

// seedBench fills st with the benchmark's turns through the stores' own calls, several
// conversations at once (the stores batch concurrent calls).
func seedBench(b *testing.B, st stores, convs0, workers int) {
	ctx := context.Background()
	convs := make(chan int)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range convs {
				if err := seedConversation(ctx, st, c); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for c := range convs0 {
		convs <- c
	}
	close(convs)
	wg.Wait()
	close(errs)
	require.NoError(b, <-errs)
	// One intent in a hundred dies.
	ob, settled := st.inbox, 0
	for {
		claimed, err := ob.Claim(ctx, 100, time.Hour)
		require.NoError(b, err)
		if len(claimed) == 0 {
			break
		}
		for _, in := range claimed {
			settled++
			if settled%100 == 0 {
				require.NoError(b, ob.Bury(ctx, in.ID, in.Attempts, "smtp: 550 mailbox unavailable"))
			} else {
				require.NoError(b, ob.Delivered(ctx, in.ID, in.Attempts))
			}
		}
	}
}

func seedConversation(ctx context.Context, st stores, c int) error {
	key := session.Key{App: benchApp, User: benchUser(c), Conversation: benchConv(c)}
	if _, err := st.sessions.Create(ctx, key, nil); err != nil {
		return err
	}
	t0 := time.Now().Add(-time.Hour)
	for n := range benchTurns {
		req := turn.Request{ID: uuid.NewString(), UserID: key.User, ConversationID: key.Conversation, Text: fmt.Sprintf("question %d of %s", n, key.Conversation)}
		at := t0.Add(time.Duration(n) * time.Second)
		if _, err := st.sessions.Append(ctx, key, int64(n), session.Turn{RequestID: req.ID, Events: []session.Event{
			{Author: "user", Text: req.Text, Time: at}, {Author: "assistant", Text: "answer " + req.Text, Time: at}}}); err != nil {
			return err
		}
		ik := turn.InboxKey(benchApp, req)
		if _, err := st.inbox.Begin(ctx, inbox.Delivery{Key: ik, Conversation: key.Conversation, Topic: "requests", Offset: int64(n)}); err != nil {
			return err
		}
		if _, err := st.inbox.RecordStep(ctx, ik, inbox.Step{Ordinal: 1, Name: "model", Output: []byte(`{"text":"answer"}`)}); err != nil {
			return err
		}
		if n%10 == 9 {
			if _, err := st.inbox.RecordStep(ctx, ik, inbox.Step{Ordinal: 2, Name: "tool:email", Deferred: true, Output: []byte(`{"tool":"email"}`)}); err != nil {
				return err
			}
		}
		if err := st.inbox.Complete(ctx, ik, []byte(`{"text":"answer"}`)); err != nil {
			return err
		}
		if n%10 == 9 {
			if _, err := st.inbox.Promote(ctx, ik, 0); err != nil {
				return err
			}
		}
	}
	return nil
}

// BenchmarkPages measures the console's pages on stores holding 100,000 turns (2,000
// conversations of 50 turns, 200 users, 10,000 intents) and 1,000 dead letters: one
// sub-benchmark per page, on SQLite, and on PostgreSQL when TURNSTILE_POSTGRES_DSN is set.
// deadletters is the page from the handler's snapshot of the topic (what a page gets within
// Config.DeadLetterTTL, and after it while a read runs in the background), deadletters-fresh
// the page that reads the topic again (?refresh=1). Seeding takes minutes:
//
//	go test -run '^$' -bench BenchmarkPages -benchtime 100x -timeout 60m ./console/
func BenchmarkPages(b *testing.B) {
	type database struct {
		name    string
		workers int // seeding goroutines: SQLite's writes take one lock, and contention sleeps
		open    func(b *testing.B) stores
	}
	dbs := []database{{"sqlite", 1, func(b *testing.B) stores {
		return openStores(b, sqltest.SQLiteFileSyncNormal(b), sqlinbox.SQLite, "")
	}}}
	if os.Getenv("TURNSTILE_POSTGRES_DSN") != "" {
		dbs = append(dbs, database{"postgres", 16, func(b *testing.B) stores {
			db := sqltest.OpenPostgres(b)
			return openStores(b, db, sqlinbox.PostgreSQL, sqltest.Prefix(b, db, true))
		}})
	}
	kc := turntest.NewCluster(b, turntest.Options{})
	dlq := kc.CreateTopic(b, "dlq", 3)
	for i := range benchDeadLetters {
		c := i % benchConversations
		kc.Produce(b, dlq, benchConv(c), []byte(`{}`), map[string]string{
			record.HeaderRequestID: uuid.NewString(), record.HeaderConversationID: benchConv(c),
			record.HeaderReason:   []string{"model: permanent", "decode: bad json", "attachment missing"}[i%3],
			record.HeaderAttempts: "3", record.HeaderSourceTopic: "requests", record.HeaderSourcePartition: "0",
			record.HeaderSourceOffset: fmt.Sprint(i)})
	}
	client, err := sarama.NewClient(kc.Brokers(), kc.Config())
	require.NoError(b, err)
	b.Cleanup(func() { _ = client.Close() })
	for _, d := range dbs {
		b.Run(d.name, func(b *testing.B) {
			st := d.open(b)
			start := time.Now()
			seedBench(b, st, benchConversations, d.workers)
			b.Logf("seeded %d turns in %s", benchConversations*benchTurns, time.Since(start).Round(time.Millisecond))
			h, err := New(Config{App: benchApp, Sessions: st.sessions, Inbox: st.inbox, Kafka: client, DeadLetterTopic: dlq,
				DeadLetterTTL: time.Hour})
			require.NoError(b, err)
			pages := []struct{ name, url string }{
				{"search-by-id", "/conversations?q=" + benchConv(1234)},
				{"search-by-user", "/conversations?by=user&q=" + benchUser(77)},
				{"timeline", "/conversations/" + benchConv(1234)},
				{"deadletters", "/deadletters"},
				{"deadletters-fresh", "/deadletters?refresh=1"},
				{"outbox-dead", "/outbox?state=dead"},
				{"outbox-pending", "/outbox?state=pending"},
				{"outbox-delivered", "/outbox?state=delivered"},
			}
			for _, p := range pages {
				b.Run(p.name, func(b *testing.B) {
					for b.Loop() {
						rec := httptest.NewRecorder()
						h.ServeHTTP(rec, httptest.NewRequest("GET", p.url, nil))
						if rec.Code != http.StatusOK {
							b.Fatalf("%s: %d: %s", p.url, rec.Code, rec.Body)
						}
					}
				})
			}
		})
	}
}
