package consumer_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
	"github.com/turnstile-go/turnstile/internal/sqltest"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/session/sqlsession"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turn/turnotel"
	"github.com/turnstile-go/turnstile/turntest"
)

// pgStores returns a session store and an inbox on PostgreSQL, with tables of their own
// (prefix), on db.
func pgStores(t *testing.T, db *sql.DB, prefix string) (*sqlsession.Store, *sqlinbox.Inbox) {
	t.Helper()
	ss, err := sqlsession.New(db, sqlsession.PostgreSQL, sqlsession.Options{TablePrefix: prefix, Concurrency: -1})
	require.NoError(t, err)
	require.NoError(t, ss.Migrate(context.Background()))
	ib, err := sqlinbox.New(db, sqlinbox.PostgreSQL, sqlinbox.Options{TablePrefix: prefix, Concurrency: -1})
	require.NoError(t, err)
	require.NoError(t, ib.Migrate(context.Background()))
	return ss, ib
}

// storeState is what production's tables hold: counts and the latest update.
type storeState struct {
	inboxRows, sessionRows, eventRows, versions int64
	inboxUpdated, sessionUpdated                string
}

func readStoreState(t *testing.T, db *sql.DB, prefix string) storeState {
	t.Helper()
	var s storeState
	row := db.QueryRow(fmt.Sprintf(`SELECT (SELECT count(*) FROM %[1]sinbox), (SELECT count(*) FROM %[1]ssessions),
		(SELECT count(*) FROM %[1]sevents), (SELECT coalesce(sum(version), 0) FROM %[1]ssessions),
		(SELECT coalesce(CAST(max(updated_at) AS TEXT), '') FROM %[1]sinbox),
		(SELECT coalesce(CAST(max(updated_at) AS TEXT), '') FROM %[1]ssessions)`, prefix))
	require.NoError(t, row.Scan(&s.inboxRows, &s.sessionRows, &s.eventRows, &s.versions, &s.inboxUpdated, &s.sessionUpdated))
	return s
}

// runUntil runs c until it returns, or fails the test after wait.
func runUntil(t *testing.T, c *consumer.Consumer, ctx context.Context) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(2 * wait):
		t.Fatal("the replay did not stop at the end offsets")
	}
}

// A replay of 1,000 recorded requests into a sandbox: it runs every request with the model
// told it is a replay, publishes only to its own results topic and no dead letter, and leaves
// production's results topic, dead-letter topic, inbox and sessions as they were. A replay
// pointed at production's group, topics or stores is refused.
func TestReplayIntoSandboxLeavesProductionUntouched(t *testing.T) {
	t.Parallel()
	db := sqltest.OpenPostgres(t)
	kc := turntest.NewCluster(t, turntest.Options{})
	requests, results, dlq := kc.CreateTopic(t, "requests", 4), kc.CreateTopic(t, "results", 4), kc.CreateTopic(t, "dlq", 4)
	sandboxResults := kc.CreateTopic(t, "sandbox-results", 4)
	prodGroup := kc.Unique("prod")
	prefix := sqltest.Prefix(t, db, true)
	prodSessions, prodInbox := pgStores(t, db, prefix)

	// replays counts the distinct requests the model saw as a replay (a redelivery after a
	// rebalance may call it again for one), live the calls that were not a replay.
	model := func(replays, live *atomic.Int64) turn.ModelFunc {
		var seen sync.Map
		return func(_ context.Context, in turn.Input) (turn.Output, error) {
			if in.Replay {
				if _, again := seen.LoadOrStore(in.Request.ID, true); !again {
					replays.Add(1)
				}
			} else {
				live.Add(1)
			}
			if strings.HasPrefix(in.Request.Text, "poison") {
				return turn.Output{}, turn.Permanent(errors.New("the model refuses this request"))
			}
			return echo(in)
		}
	}
	const total, poison = 1000, 8
	for i := range total {
		text := fmt.Sprintf("message %d", i)
		if i%(total/poison) == 0 {
			text = "poison " + text
		}
		kc.ProduceRequest(t, requests, request(fmt.Sprintf("conv-%d", i%50), text))
	}

	// Production serves them.
	var prodReplays, prodLive atomic.Int64
	prodCfg := consumer.Config{Brokers: kc.Brokers(), GroupID: prodGroup, RequestsTopic: requests, ResultsTopic: results,
		DeadLetterTopic: dlq, Sarama: kc.Config(), CommitInterval: 100 * time.Millisecond, Logger: testLogger(t)}
	prodRunner := &turn.Runner{Model: model(&prodReplays, &prodLive), Sessions: prodSessions, Inbox: prodInbox, Logger: testLogger(t)}
	prod, err := consumer.New(prodCfg, consumer.RunnerHandler(prodRunner))
	require.NoError(t, err)
	pctx, pcancel := context.WithCancel(context.Background())
	pdone := make(chan error, 1)
	go func() { pdone <- prod.Run(pctx) }()
	kc.ReadAll(t, results, total-poison, 2*wait)
	kc.ReadAll(t, dlq, poison, wait)
	require.Eventually(t, func() bool { return prod.Stats().Records == total }, wait, 10*time.Millisecond)
	pcancel()
	require.NoError(t, <-pdone)
	require.Zero(t, prodReplays.Load(), "production is not a replay")

	before := readStoreState(t, db, prefix)
	require.EqualValues(t, total, before.inboxRows)
	resultsBefore, dlqBefore := kc.RecordCount(t, results), kc.RecordCount(t, dlq)
	require.EqualValues(t, total-poison, resultsBefore)
	require.EqualValues(t, poison, dlqBefore)

	replay := func(tune func(*consumer.Config, *turn.Runner)) (*consumer.Consumer, *atomic.Int64, *atomic.Int64, error) {
		var replays, live atomic.Int64
		r := &turn.Runner{Model: model(&replays, &live), Sessions: session.NewMemoryStore(), Inbox: inbox.NewMemoryInbox(), Logger: testLogger(t)}
		cfg := consumer.Config{Brokers: kc.Brokers(), GroupID: kc.Unique("sandbox"), RequestsTopic: requests,
			ResultsTopic: sandboxResults, Sarama: kc.Config(), CommitInterval: 100 * time.Millisecond, Logger: testLogger(t),
			Replay: &consumer.Replay{ProductionGroupID: prodGroup, ProductionResultsTopic: results,
				ProductionDeadLetterTopic: dlq, ProductionStores: []any{prodSessions, prodInbox}, StopAtEnd: true}}
		if tune != nil {
			tune(&cfg, r)
		}
		c, err := consumer.New(cfg, consumer.RunnerHandler(r))
		return c, &replays, &live, err
	}

	// Refused: production's group, topics, or stores.
	for name, tc := range map[string]struct {
		tune func(*consumer.Config, *turn.Runner)
		want string
	}{
		"production group":         {func(c *consumer.Config, _ *turn.Runner) { c.GroupID = prodGroup }, "production's group"},
		"production results topic": {func(c *consumer.Config, _ *turn.Runner) { c.ResultsTopic = results }, "production's results topic"},
		"production dead letters":  {func(c *consumer.Config, _ *turn.Runner) { c.DeadLetterTopic = dlq }, "production's dead-letter topic"},
		"results to the requests":  {func(c *consumer.Config, _ *turn.Runner) { c.ResultsTopic = requests }, "must differ"},
		"production unnamed":       {func(c *consumer.Config, _ *turn.Runner) { c.Replay.ProductionGroupID = "" }, "Replay.ProductionGroupID: empty"},
	} {
		_, _, _, err := replay(tc.tune)
		require.ErrorContains(t, err, tc.want, name)
	}
	other := sqltest.OpenPostgres(t) // another pool on the same database: the same tables
	sameTables, sameInbox := pgStores(t, other, prefix)
	for name, tune := range map[string]func(*consumer.Config, *turn.Runner){
		"same inbox value":          func(_ *consumer.Config, r *turn.Runner) { r.Inbox = prodInbox },
		"same session store value":  func(_ *consumer.Config, r *turn.Runner) { r.Sessions = prodSessions },
		"same tables, another pool": func(_ *consumer.Config, r *turn.Runner) { r.Sessions, r.Inbox = sameTables, sameInbox },
	} {
		c, _, live, err := replay(tune)
		require.NoError(t, err, name)
		err = c.Run(context.Background())
		require.ErrorIs(t, err, consumer.ErrProductionStore, name)
		require.ErrorContains(t, err, "give the replay stores of its own", name)
		require.Zero(t, live.Load(), name)
	}
	otherPrefix := sqltest.Prefix(t, other, true)
	sandboxSessions, sandboxInbox := pgStores(t, other, otherPrefix)

	// The replay, on stores of its own in the same database, stops at the recorded end.
	c, replays, live, err := replay(func(_ *consumer.Config, r *turn.Runner) { r.Sessions, r.Inbox = sandboxSessions, sandboxInbox })
	require.NoError(t, err)
	runUntil(t, c, context.Background())
	require.EqualValues(t, total, replays.Load(), "the model saw every request as a replay")
	require.Zero(t, live.Load())
	require.EqualValues(t, total-poison, kc.RecordCount(t, sandboxResults))
	require.EqualValues(t, total, c.Stats().Records)
	require.Zero(t, c.Stats().DeadLetters, "no dead letter published anywhere")
	require.EqualValues(t, total, readStoreState(t, other, otherPrefix).inboxRows, "the replay's own inbox")

	require.Equal(t, resultsBefore, kc.RecordCount(t, results), "production results topic untouched")
	require.Equal(t, dlqBefore, kc.RecordCount(t, dlq), "production dead-letter topic untouched")
	require.Equal(t, before, readStoreState(t, db, prefix), "production inbox and sessions untouched")
}

// produceTo writes a request of conversation c<p> to partition p of topic and returns it with
// its offset.
func produceTo(t *testing.T, kc *turntest.Cluster, topic string, p int32, text string) (turn.Request, int64) {
	t.Helper()
	req := request(fmt.Sprintf("c%d", p), text)
	v, err := req.Encode()
	require.NoError(t, err)
	return req, kc.ProduceTo(t, topic, p, req.ConversationID, v, nil)
}

// sandboxReplay runs an echo model's replay of requests into sandbox until it stops at the
// recorded end.
func sandboxReplay(t *testing.T, kc *turntest.Cluster, requests, sandbox string, replay consumer.Replay) {
	t.Helper()
	r := &turn.Runner{Model: turn.ModelFunc(func(_ context.Context, in turn.Input) (turn.Output, error) { return echo(in) }),
		Sessions: session.NewMemoryStore(), Inbox: inbox.NewMemoryInbox(), Logger: testLogger(t)}
	replay.ProductionGroupID, replay.ProductionResultsTopic, replay.ProductionDeadLetterTopic = "prod", "results", "dlq"
	replay.StopAtEnd = true
	c, err := consumer.New(consumer.Config{Brokers: kc.Brokers(), GroupID: kc.Unique("sandbox"), RequestsTopic: requests,
		ResultsTopic: sandbox, Sarama: kc.Config(), CommitInterval: 100 * time.Millisecond, Logger: testLogger(t),
		Replay: &replay}, consumer.RunnerHandler(r))
	require.NoError(t, err)
	runUntil(t, c, context.Background())
}

// A replay from a time starts each partition at its first record at or after it, and a
// partition with no record since then at its end.
func TestReplayFromTime(t *testing.T) {
	t.Parallel()
	kc := turntest.NewCluster(t, turntest.Options{})
	requests, sandbox := kc.CreateTopic(t, "requests", 3), kc.CreateTopic(t, "sandbox", 3)
	for i := range 9 {
		produceTo(t, kc, requests, int32(i%3), "before")
	}
	time.Sleep(5 * time.Millisecond) // record timestamps are in milliseconds: keep the batches apart
	from := time.Now()
	time.Sleep(5 * time.Millisecond)
	later := map[string]bool{}
	for i := range 10 { // none on partition 2
		req, _ := produceTo(t, kc, requests, int32(i%2), "after")
		later[req.ID] = true
	}
	sandboxReplay(t, kc, requests, sandbox, consumer.Replay{StartTime: from})
	got := kc.ReadResults(t, sandbox, len(later), wait)
	require.Len(t, got, len(later))
	for _, res := range got {
		require.True(t, later[res.RequestID], "a request from before the start time was replayed")
	}
	require.EqualValues(t, len(later), kc.RecordCount(t, sandbox))
}

// A replay from an offset starts each partition there, and a partition that holds less starts
// at its end.
func TestReplayFromOffset(t *testing.T) {
	t.Parallel()
	kc := turntest.NewCluster(t, turntest.Options{})
	requests, sandbox := kc.CreateTopic(t, "requests", 2), kc.CreateTopic(t, "sandbox", 2)
	const from = 3
	want := map[string]bool{}
	for p, n := range []int{6, 2} { // partition 1 holds less than from: it starts at its end
		for range n {
			if req, off := produceTo(t, kc, requests, int32(p), "hello"); off >= from {
				want[req.ID] = true
			}
		}
	}
	sandboxReplay(t, kc, requests, sandbox, consumer.Replay{StartOffset: from})
	require.Len(t, want, 3)
	require.EqualValues(t, len(want), kc.RecordCount(t, sandbox))
	for _, res := range kc.ReadResults(t, sandbox, len(want), wait) {
		require.True(t, want[res.RequestID], "a request before offset %d was replayed", from)
	}
}

// A replay with telemetry on, whose Runner's stores New wraps in spans, still refuses
// production's stores: the check looks at the stores the host gave.
func TestReplayWithTelemetryRefusesProductionStores(t *testing.T) {
	t.Parallel()
	kc := turntest.NewCluster(t, turntest.Options{})
	requests, sandbox := kc.CreateTopic(t, "requests", 1), kc.CreateTopic(t, "sandbox", 1)
	prodSessions, prodInbox := session.NewMemoryStore(), inbox.NewMemoryInbox()
	tp, _ := tracer(t)
	var live atomic.Int64
	for name, r := range map[string]*turn.Runner{
		"production inbox":    {Sessions: session.NewMemoryStore(), Inbox: prodInbox},
		"production sessions": {Sessions: prodSessions, Inbox: inbox.NewMemoryInbox()},
	} {
		r.Model = turn.ModelFunc(func(_ context.Context, in turn.Input) (turn.Output, error) { live.Add(1); return echo(in) })
		r.Logger = testLogger(t)
		c, err := consumer.New(consumer.Config{Brokers: kc.Brokers(), GroupID: kc.Unique("sandbox"), RequestsTopic: requests,
			ResultsTopic: sandbox, Sarama: kc.Config(), Logger: testLogger(t), Telemetry: turnotel.Options{TracerProvider: tp},
			Replay: &consumer.Replay{ProductionGroupID: "prod", ProductionResultsTopic: "results", ProductionDeadLetterTopic: "dlq",
				ProductionStores: []any{prodSessions, prodInbox}, StopAtEnd: true}}, consumer.RunnerHandler(r))
		require.NoError(t, err, name)
		require.ErrorIs(t, c.Run(context.Background()), consumer.ErrProductionStore, name)
	}
	require.Zero(t, live.Load())
}
