package sqlsession_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
	"github.com/turnstile-go/turnstile/internal/sqltest"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/session/sqlsession"
	"github.com/turnstile-go/turnstile/turn"
)

// benchDBs are the databases the benchmarks compare: SQLite in a file with the default
// synchronous=FULL (every commit waits for the disk) and with synchronous=NORMAL (SQLite's
// advice for WAL), and PostgreSQL. The in-memory SQLite is left out, as no one runs
// turnstile's durable stores on it.
var benchDBs = []sqltest.DB{sqltest.SQLiteFileDB, sqltest.SQLiteFileSyncNormalDB, sqltest.PostgresDB}

// BenchmarkTurn measures a full turn's store work, as turn.Runner does it: inbox Begin,
// session Get (recent 20), a pause for the model (modelTime), Append (a user message and an
// answer), inbox Complete. Each of `conversations` goroutines works on a conversation of its
// own. Four variants run side by side, each on a *sql.DB and tables of its own with
// MaxOpenConns = conversations, in rounds that alternate between them (so that the machine's
// load falls on all four alike), b.N turns each:
//   - default-separate: the idle limit left at database/sql's 2 (Options.Concurrency -1), and
//     Begin, Append and Complete in three transactions (three commits per turn);
//   - default-joint: the same pool, Complete joined to Append's transaction with AppendTx
//     (two commits per turn);
//   - sized-separate and sized-joint: the same with Options.Concurrency = conversations.
//
// Metrics: turns/s of each variant; the ratios sized/default (separate path), joint/separate
// (sized pool) and sized-joint/default-separate (the two together); and closed-conns/turn, the
// connections the default pool closed on release (each one reopened by a later call).
// ns/op covers the four variants' turns.
func BenchmarkTurn(b *testing.B) {
	for _, db := range benchDBs {
		for _, conversations := range []int{1, 12} {
			b.Run(fmt.Sprintf("%s/conversations=%d", db.Name, conversations), func(b *testing.B) {
				benchTurn(b, db, conversations)
			})
		}
	}
}

// openBenchDB opens a *sql.DB of its own on db, whose pool settings no other benchmark shares.
func openBenchDB(b *testing.B, db sqltest.DB) *sql.DB {
	if db.Postgres {
		return sqltest.PostgresPool(b)
	}
	return db.Open(b)
}

// turnVariant is one way of running BenchmarkTurn's turns, with stores of its own.
type turnVariant struct {
	name  string
	joint bool
	db    *sql.DB
	store *sqlsession.Store
	ib    *sqlinbox.Inbox
	keys  []session.Key
	reqs  atomic.Int64
}

func newTurnVariant(b *testing.B, db sqltest.DB, conversations int, sized, joint bool) *turnVariant {
	ctx := context.Background()
	v := &turnVariant{name: map[bool]string{false: "default", true: "sized"}[sized] + "-" +
		map[bool]string{false: "separate", true: "joint"}[joint], joint: joint, db: openBenchDB(b, db)}
	v.db.SetMaxOpenConns(conversations) // one connection per conversation at most
	concurrency := -1                   // leave the idle limit at database/sql's 2
	if sized {
		concurrency = conversations
	}
	v.store, v.ib = newPairOn(b, db, v.db, concurrency)
	v.keys = make([]session.Key, conversations)
	for i := range v.keys {
		v.keys[i] = newKey(b)
		_, err := v.store.Create(ctx, v.keys[i], []byte(`{"turns":0}`))
		require.NoError(b, err)
		for n := range int64(10) { // some history, so Get returns 20 events
			_, err := v.store.Append(ctx, v.keys[i], n, chatTurn(fmt.Sprintf("warm-%d", n)))
			require.NoError(b, err)
		}
	}
	return v
}

// run runs n turns over the variant's conversations, one goroutine each.
func (v *turnVariant) run(ctx context.Context, n int) error {
	var (
		done   atomic.Int64
		wg     sync.WaitGroup
		failed atomic.Pointer[error]
	)
	for _, key := range v.keys {
		wg.Go(func() {
			for done.Add(1) <= int64(n) {
				req := fmt.Sprintf("req-%d", v.reqs.Add(1))
				if err := oneTurn(ctx, v.store, v.ib, key, req, v.joint); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		return fmt.Errorf("%s: %w", v.name, *err)
	}
	return nil
}

func benchTurn(b *testing.B, db sqltest.DB, conversations int) {
	ctx := context.Background()
	var variants []*turnVariant
	for _, sized := range []bool{false, true} {
		for _, joint := range []bool{false, true} {
			variants = append(variants, newTurnVariant(b, db, conversations, sized, joint))
		}
	}
	closedBefore := variants[0].db.Stats().MaxIdleClosed
	runs := make([]func(n int) error, len(variants))
	for i, v := range variants {
		runs[i] = func(n int) error { return v.run(ctx, n) }
	}
	b.ResetTimer()
	elapsed, err := interleave(b.N, 20*conversations, runs)
	b.StopTimer()
	require.NoError(b, err)

	rate := map[string]float64{}
	for i, v := range variants {
		rate[v.name] = float64(b.N) / elapsed[i].Seconds()
		b.ReportMetric(rate[v.name], v.name+"-turns/s")
	}
	b.ReportMetric(rate["sized-separate"]/rate["default-separate"], "sized/default")
	b.ReportMetric(rate["sized-joint"]/rate["sized-separate"], "joint/separate")
	b.ReportMetric(rate["sized-joint"]/rate["default-separate"], "sized-joint/default-separate")
	b.ReportMetric(float64(variants[0].db.Stats().MaxIdleClosed-closedBefore)/float64(b.N), "closed-conns/turn")
}

// interleave runs total units of work on each of runs, in rounds of at most round units that
// rotate which run goes first, and returns each run's wall time: runs compared side by side
// share the machine's changing load alike.
func interleave(total, round int, runs []func(n int) error) ([]time.Duration, error) {
	elapsed := make([]time.Duration, len(runs))
	for r, done := 0, 0; done < total; r, done = r+1, done+round {
		n := min(round, total-done)
		for i := range runs {
			j := (i + r) % len(runs)
			start := time.Now()
			if err := runs[j](n); err != nil {
				return nil, err
			}
			elapsed[j] += time.Since(start)
		}
	}
	return elapsed, nil
}

// modelTime stands for a fast model between the session Get and the Append: turn.Runner
// holds no connection then, so the pool sees calls come and go as in a consumer.
const modelTime = time.Millisecond

func oneTurn(ctx context.Context, store *sqlsession.Store, ib *sqlinbox.Inbox, key session.Key, req string, joint bool) error {
	e, err := ib.Begin(ctx, inbox.Delivery{Key: req, Conversation: key.Conversation, Topic: "requests", Offset: 1})
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
	time.Sleep(modelTime) // the model's call, with no connection held
	tr := chatTurn(req)
	tr.State = []byte(fmt.Sprintf(`{"turns":%d}`, sess.Version+1))
	result := []byte(`{"request_id":"` + req + `","text":"the answer"}`)
	if joint {
		_, err := store.AppendTx(ctx, key, sess.Version, tr, func(ctx context.Context, tx session.SQLTx, _ []session.Event) error {
			return ib.CompleteTx(ctx, tx, req, result)
		})
		return err
	}
	if _, err := store.Append(ctx, key, sess.Version, tr); err != nil {
		return err
	}
	return ib.Complete(ctx, req, result)
}

// BenchmarkRunner runs whole turns through turn.Runner with a model that takes 50 ms, 64 at
// once (the consumer's default MaxInFlight) over 960 conversations, side by side (rounds
// that alternate, as in BenchmarkTurn), b.N turns each after an untimed first turn in every
// conversation, on:
//   - memory: session.MemoryStore and inbox.MemoryInbox;
//   - default-separate: the SQL stores on a pool with MaxOpenConns runnerMaxOpen and the idle
//     limit left at database/sql's 2 (Options.Concurrency -1), the session append and the
//     inbox completion in two transactions;
//   - sized-joint: the same pool with Options.Concurrency runnerMaxOpen, one transaction for
//     the append and the completion.
//
// Metrics: turns/s of each, and each durable one's throughput over memory's. 64 turns of 50 ms
// bound them all at 1,280 turns/s.
func BenchmarkRunner(b *testing.B) {
	for _, db := range benchDBs {
		b.Run(db.Name, func(b *testing.B) {
			names := []string{"memory", "default-separate", "sized-joint"}
			defaultDB, sizedDB := openBenchDB(b, db), openBenchDB(b, db)
			defaultDB.SetMaxOpenConns(runnerMaxOpen)
			sizedDB.SetMaxOpenConns(runnerMaxOpen)
			defaultStore, defaultInbox := newPairOn(b, db, defaultDB, -1)
			sizedStore, sizedInbox := newPairOn(b, db, sizedDB, runnerMaxOpen)
			runners := []*turn.Runner{
				{Model: sleepyModel{}, Sessions: session.NewMemoryStore(), Inbox: inbox.NewMemoryInbox()},
				// The wrapper hides session.TxAppender: the Runner takes the separate path.
				{Model: sleepyModel{}, Sessions: struct{ session.Store }{defaultStore}, Inbox: defaultInbox},
				{Model: sleepyModel{}, Sessions: sizedStore, Inbox: sizedInbox},
			}
			runs := make([]func(n int) error, len(runners))
			for i, r := range runners {
				runs[i] = func(n int) error { return runTurns(r, n) }
				// A first turn per conversation, untimed: the timed turns are the steady
				// state's, not the creation of 960 sessions.
				require.NoError(b, runs[i](runnerConversations))
			}
			b.ResetTimer()
			elapsed, err := interleave(b.N, 10*runnerInFlight, runs)
			b.StopTimer()
			require.NoError(b, err)
			for i, name := range names {
				b.ReportMetric(float64(b.N)/elapsed[i].Seconds(), name+"-turns/s")
				if i > 0 {
					b.ReportMetric(elapsed[0].Seconds()/elapsed[i].Seconds(), name+"/memory")
				}
			}
		})
	}
}

const (
	// runnerMaxOpen caps each durable variant's connections: a turn holds one only for its
	// store calls, a few ms of its 50, and the PostgreSQL the tests share allows 100 clients.
	runnerMaxOpen       = 24
	runnerInFlight      = 64
	runnerConversations = 960 // 15 per worker
	runnerModelTime     = 50 * time.Millisecond
)

// sleepyModel answers after runnerModelTime.
type sleepyModel struct{}

func (sleepyModel) Respond(ctx context.Context, in turn.Input) (turn.Output, error) {
	select {
	case <-time.After(runnerModelTime):
	case <-ctx.Done():
		return turn.Output{}, ctx.Err()
	}
	return turn.Output{Events: []session.Event{{Text: "the answer to " + in.Request.Text}}}, nil
}

// runTurns runs n turns through r, runnerInFlight at once.
// Worker w takes the conversations w, w+runnerInFlight, w+2*runnerInFlight, ... in turn, so
// no two turns of one conversation ever overlap.
func runTurns(r *turn.Runner, n int) error {
	ctx := context.Background()
	var (
		done   atomic.Int64
		wg     sync.WaitGroup
		failed atomic.Pointer[error]
	)
	for w := range runnerInFlight {
		wg.Go(func() {
			for i := 0; done.Add(1) <= int64(n); i++ {
				conv := w + runnerInFlight*(i%(runnerConversations/runnerInFlight))
				req := turn.Request{Schema: turn.SchemaVersion, ID: uuid.NewString(),
					ConversationID: fmt.Sprintf("conv-%d", conv), UserID: "user", Text: "hello"}
				if _, err := r.Run(ctx, req); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		return *err
	}
	return nil
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
// metric, large over small, should stay near 1).
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
