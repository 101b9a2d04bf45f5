package sqlsession_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
	"github.com/turnstile-go/turnstile/internal/sqltest"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/session/sqlsession"
)

// benchDBs are the databases the benchmarks compare: the in-memory SQLite is left out, as no
// one runs turnstile's durable stores on it.
var benchDBs = []sqltest.DB{sqltest.SQLiteFileDB, sqltest.PostgresDB}

// BenchmarkTurn measures a full turn's store work, as turn.Runner does it: inbox Begin,
// session Get (recent 20), Append (a user message and an answer), inbox Complete. Each of
// `conversations` goroutines works on a conversation of its own; turns/s counts all of them.
func BenchmarkTurn(b *testing.B) {
	for _, db := range benchDBs {
		for _, conversations := range []int{1, 8, 32} {
			b.Run(fmt.Sprintf("%s/conversations=%d", db.Name, conversations), func(b *testing.B) {
				benchTurn(b, db, conversations)
			})
		}
	}
}

func benchTurn(b *testing.B, db sqltest.DB, conversations int) {
	ctx := context.Background()
	store, sqlDB := newStore(b, db)
	ib, err := sqlinbox.New(sqlDB, sqlinbox.Dialect(dialectOf(db)), sqlinbox.Options{TablePrefix: store.TablePrefix()})
	require.NoError(b, err)
	require.NoError(b, ib.Migrate(ctx))

	keys := make([]session.Key, conversations)
	for i := range keys {
		keys[i] = newKey(b)
		_, err := store.Create(ctx, keys[i], []byte(`{"turns":0}`))
		require.NoError(b, err)
		for v := range int64(10) { // some history, so Get returns 20 events
			_, err := store.Append(ctx, keys[i], v, chatTurn(fmt.Sprintf("warm-%d", v)))
			require.NoError(b, err)
		}
	}

	var (
		next   atomic.Int64
		wg     sync.WaitGroup
		failed atomic.Pointer[error]
	)
	b.ResetTimer()
	for c := range conversations {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := next.Add(1); n <= int64(b.N); n = next.Add(1) {
				if err := oneTurn(ctx, store, ib, keys[c], fmt.Sprintf("req-%d", n)); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "turns/s")
}

func oneTurn(ctx context.Context, store *sqlsession.Store, ib *sqlinbox.Inbox, key session.Key, req string) error {
	e, err := ib.Begin(ctx, inbox.Delivery{RequestID: req, Conversation: key.Conversation, Topic: "requests", Offset: 1})
	if err != nil {
		return err
	}
	if e.Status != inbox.StatusNew {
		return fmt.Errorf("begin %s: status %s", req, e.Status)
	}
	sess, err := store.Get(ctx, key, 20)
	if err != nil {
		return err
	}
	tr := chatTurn(req)
	tr.State = []byte(fmt.Sprintf(`{"turns":%d}`, sess.Version+1))
	if _, err := store.Append(ctx, key, sess.Version, tr); err != nil {
		return err
	}
	return ib.Complete(ctx, req, []byte(`{"request_id":"`+req+`","text":"the answer"}`))
}

func chatTurn(req string) session.Turn {
	now := time.Now()
	return session.Turn{RequestID: req, Events: []session.Event{
		{ID: req + "-0", Author: "user", Text: "What is the weather like in Lisbon tomorrow?", Time: now},
		{ID: req + "-1", Author: "assistant", Text: "Sunny, 24 °C, a light breeze from the north-west in the afternoon.", Time: now},
	}}
}

// BenchmarkLoad compares Get (recent 20) of a conversation of 10 events with one of 10,000
// events, in one run: the stores' loading cost must not grow with the history (the ratio
// metric, large over small, should stay near 1; the issue allows 2).
func BenchmarkLoad(b *testing.B) {
	for _, db := range benchDBs {
		b.Run(db.Name, func(b *testing.B) {
			ctx := context.Background()
			store, sqlDB := newStore(b, db)
			small, large := newKey(b), newKey(b)
			fill(b, store, small, 10)
			fill(b, store, large, 10_000)
			if db.Postgres {
				_, err := sqlDB.ExecContext(ctx, "ANALYZE "+store.TablePrefix()+"events")
				require.NoError(b, err)
			}
			var dSmall, dLarge time.Duration
			b.ResetTimer()
			for i := range b.N {
				// Alternate the order so neither side always runs on a warmer cache.
				order := []session.Key{small, large}
				if i%2 == 1 {
					order = []session.Key{large, small}
				}
				for _, key := range order {
					start := time.Now()
					sess, err := store.Get(ctx, key, 20)
					d := time.Since(start)
					if err != nil || len(sess.Events) != min(20, int(sess.EventCount)) {
						b.Fatalf("get: %d events, %v", len(sess.Events), err)
					}
					if key == small {
						dSmall += d
					} else {
						dLarge += d
					}
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(dSmall.Nanoseconds())/float64(b.N), "ns/get-10")
			b.ReportMetric(float64(dLarge.Nanoseconds())/float64(b.N), "ns/get-10000")
			b.ReportMetric(float64(dLarge)/float64(dSmall), "ratio")
		})
	}
}

// fill creates key's session with events events, 100 per turn.
func fill(b *testing.B, store *sqlsession.Store, key session.Key, events int) {
	ctx := context.Background()
	_, err := store.Create(ctx, key, []byte(`{}`))
	require.NoError(b, err)
	for v := int64(0); events > 0; v++ {
		n := min(events, 100)
		tr := session.Turn{RequestID: fmt.Sprintf("fill-%d", v)}
		for i := range n {
			tr.Events = append(tr.Events, session.Event{ID: fmt.Sprintf("fill-%d-%d", v, i), Author: "user", Text: "some text of a typical length for a chat message", Time: time.Now()})
		}
		_, err := store.Append(ctx, key, v, tr)
		require.NoError(b, err)
		events -= n
	}
}
