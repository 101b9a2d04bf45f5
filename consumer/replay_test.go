package consumer_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
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

	model := func(replays, live *atomic.Int64) turn.ModelFunc {
		return func(_ context.Context, in turn.Input) (turn.Output, error) {
			if in.Replay {
				replays.Add(1)
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

// A replay from a time starts each partition at its first record at or after it.
func TestReplayFromTime(t *testing.T) {
	t.Parallel()
	kc := turntest.NewCluster(t, turntest.Options{})
	requests, sandbox := kc.CreateTopic(t, "requests", 2), kc.CreateTopic(t, "sandbox", 2)
	for i := range 10 {
		kc.ProduceRequest(t, requests, request(fmt.Sprintf("c%d", i%3), "before"))
	}
	time.Sleep(5 * time.Millisecond) // record timestamps are in milliseconds: keep the batches apart
	from := time.Now()
	time.Sleep(5 * time.Millisecond)
	later := map[string]bool{}
	for i := range 10 {
		req := request(fmt.Sprintf("c%d", i%3), "after")
		kc.ProduceRequest(t, requests, req)
		later[req.ID] = true
	}
	r := &turn.Runner{Model: turn.ModelFunc(func(_ context.Context, in turn.Input) (turn.Output, error) { return echo(in) }),
		Sessions: session.NewMemoryStore(), Inbox: inbox.NewMemoryInbox(), Logger: testLogger(t)}
	c, err := consumer.New(consumer.Config{Brokers: kc.Brokers(), GroupID: kc.Unique("sandbox"), RequestsTopic: requests,
		ResultsTopic: sandbox, Sarama: kc.Config(), CommitInterval: 100 * time.Millisecond, Logger: testLogger(t),
		Replay: &consumer.Replay{ProductionGroupID: "prod", ProductionResultsTopic: "results", ProductionDeadLetterTopic: "dlq",
			StartTime: from, StopAtEnd: true}}, consumer.RunnerHandler(r))
	require.NoError(t, err)
	runUntil(t, c, context.Background())
	got := kc.ReadResults(t, sandbox, len(later), wait)
	require.Len(t, got, len(later))
	for _, res := range got {
		require.True(t, later[res.RequestID], "a request from before the start time was replayed")
	}
	require.EqualValues(t, len(later), kc.RecordCount(t, sandbox))
}
