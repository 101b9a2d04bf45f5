package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	_ "modernc.org/sqlite"             // registers the "sqlite" database/sql driver

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
	"github.com/turnstile-go/turnstile/session/sqlsession"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turntest"
)

// durable opens the session store and the inbox on one database, sized for inFlight turns
// (pool capped at maxOpen), in tables of their own.
func durable(ctx context.Context, driver, dsn string, dialect sqlsession.Dialect, inFlight, maxOpen int) (member, func(), error) {
	return durableBatched(ctx, driver, dsn, dialect, inFlight, maxOpen, sqlsession.Batching{})
}

// durableBatched is durable with the stores' writes batched as batch says and, when batching
// is on, the session store's cache holding cacheSessions sessions (sqlsession.Options.Cache).
func durableBatched(ctx context.Context, driver, dsn string, dialect sqlsession.Dialect, inFlight, maxOpen int, batch sqlsession.Batching) (member, func(), error) {
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return member{}, nil, err
	}
	db.SetMaxOpenConns(maxOpen)
	prefix := fmt.Sprintf("bench_%d_", time.Now().UnixNano())
	conc := min(inFlight, maxOpen)
	opts := sqlsession.Options{TablePrefix: prefix, Concurrency: conc, Batch: batch}
	if batch.On() {
		opts.Cache = cacheSessions
	}
	sessions, err := sqlsession.New(db, dialect, opts)
	if err != nil {
		db.Close()
		return member{}, nil, err
	}
	ib, err := sqlinbox.New(db, sqlinbox.Dialect(dialect), sqlinbox.Options{TablePrefix: prefix, Concurrency: conc, Batch: batch})
	if err == nil {
		err = sessions.Migrate(ctx)
	}
	if err == nil {
		err = ib.Migrate(ctx)
	}
	if err != nil {
		db.Close()
		return member{}, nil, err
	}
	if dialect == sqlsession.PostgreSQL {
		// Every side starts on a fresh checkpoint, so that a checkpoint forced by the WAL the
		// sides before it wrote (max_wal_size) does not fall inside its run. Needs the
		// pg_checkpoint role or a superuser; without either the run goes on without it.
		_, _ = db.ExecContext(ctx, "CHECKPOINT")
	}
	cleanup := func() {
		if dialect == sqlsession.PostgreSQL && os.Getenv("CONSUMERBENCH_KEEP_TABLES") == "" {
			for _, t := range []string{"events", "sessions", "inbox", "inbox_steps", "outbox", "schema_version"} {
				_, _ = db.ExecContext(ctx, "DROP TABLE IF EXISTS "+prefix+t+" CASCADE")
			}
		}
		db.Close()
	}
	return member{sessions: sessions, inbox: ib}, cleanup, nil
}

// cacheSessions is the session store's Options.Cache on the batched sides: more sessions than
// any scenario's conversations, so that a member's own appends serve its next Gets.
const cacheSessions = 32768

// storeSide is one side of the stores scenario: memory stores, or a database with the stores'
// writes batched or not.
type storeSide struct {
	name    string
	driver  string // "" for the memory stores
	dialect sqlsession.Dialect
	batched bool
}

var storeSides = []storeSide{
	{name: "memory"},
	{name: "postgres", driver: "pgx", dialect: sqlsession.PostgreSQL},
	{name: "postgres batched", driver: "pgx", dialect: sqlsession.PostgreSQL, batched: true},
	{name: "sqlite", driver: "sqlite", dialect: sqlsession.SQLite},
	{name: "sqlite batched", driver: "sqlite", dialect: sqlsession.SQLite, batched: true},
}

// stores: 64 turns in flight over PostgreSQL and a SQLite file, each with the stores' writes
// batched (Options.Batch, batches of up to -batch-size, default 32) and not, against the
// in-memory stores, on the same records; an instant model unless -model says otherwise.
func stores(ctx context.Context, o options) error {
	n := orDefault(o.records, 10000)
	const inFlight, maxOpen = 64, 40
	modelTime := o.modelDelay
	model, what := turn.ModelClient(turn.ModelFunc(instant)), "instant model"
	if modelTime > 0 {
		model, what = sleeper(modelTime, false), fmt.Sprintf("%v model", modelTime)
	}
	cluster, err := turntest.Start(turntest.Options{})
	if err != nil {
		return err
	}
	defer cluster.Close()
	brokers := cluster.Brokers()
	dir, err := os.MkdirTemp("", "consumerbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	batchSize := orDefault(o.batchSize, inFlight/2)
	fmt.Printf("stores: %d records, %d partitions, %d keys, %s, MaxInFlight %d; PostgreSQL pool %d, SQLite file WAL synchronous=FULL; batched: Batching{Size: %d}\n",
		n, o.partitions, o.keys, what, inFlight, maxOpen, batchSize)
	cols := []any{"run"}
	for _, side := range storeSides {
		cols = append(cols, side.name+" turns/s")
	}
	row(append(cols, "postgres batched/unbatched", "sqlite batched/unbatched")...)
	for run := 1; run <= o.runs; run++ {
		rates := make([]float64, len(storeSides))
		for i, side := range storeSides {
			if !o.wantSide(side.name) {
				continue
			}
			m := member{model: model, tune: func(c *consumer.Config) { c.MaxInFlight = inFlight }}
			cleanup := func() {}
			if side.driver != "" {
				dsn := o.postgres
				if side.dialect == sqlsession.SQLite {
					path := filepath.Join(dir, fmt.Sprintf("run%d-%d.db", run, i))
					dsn = "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)"
				}
				var batch sqlsession.Batching
				if side.batched {
					batch = sqlsession.Batching{Size: batchSize}
				}
				st, c, err := durableBatched(ctx, side.driver, dsn, side.dialect, inFlight, maxOpen, batch)
				if err != nil {
					return fmt.Errorf("%s: %w", side.name, err)
				}
				m.sessions, m.inbox, cleanup = st.sessions, st.inbox, c
			}
			requests, results, err := topics(ctx, brokers, o.partitions)
			if err == nil {
				_, err = produce(brokers, requests, n, o.keys, 0)
			}
			var d time.Duration
			if err == nil {
				d, _, err = runTurnstile(ctx, brokers, requests, results, n, m)
			}
			cleanup()
			if err != nil {
				return fmt.Errorf("%s: %w", side.name, err)
			}
			rates[i] = float64(n) / d.Seconds()
		}
		cells := []any{run}
		for _, r := range rates {
			cells = append(cells, fmt.Sprintf("%.0f", r))
		}
		row(append(cells, fmt.Sprintf("%.2f", rates[2]/rates[1]), fmt.Sprintf("%.2f", rates[4]/rates[3]))...)
	}
	return nil
}

// wantSide reports whether -sides selects the stores scenario's side named name.
func (o options) wantSide(name string) bool {
	if o.sides == "" {
		return true
	}
	for s := range strings.SplitSeq(o.sides, ",") {
		if strings.TrimSpace(s) == name {
			return true
		}
	}
	return false
}
