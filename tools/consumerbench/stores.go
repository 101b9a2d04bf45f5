package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	_ "modernc.org/sqlite"             // registers the "sqlite" database/sql driver

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
	"github.com/turnstile-go/turnstile/session/sqlsession"
	"github.com/turnstile-go/turnstile/turntest"
)

// durable opens the session store and the inbox on one database, sized for inFlight turns
// (pool capped at maxOpen), in tables of their own.
func durable(ctx context.Context, driver, dsn string, dialect sqlsession.Dialect, inFlight, maxOpen int) (member, func(), error) {
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return member{}, nil, err
	}
	db.SetMaxOpenConns(maxOpen)
	prefix := fmt.Sprintf("bench_%d_", time.Now().UnixNano())
	conc := min(inFlight, maxOpen)
	sessions, err := sqlsession.New(db, dialect, sqlsession.Options{TablePrefix: prefix, Concurrency: conc})
	if err != nil {
		db.Close()
		return member{}, nil, err
	}
	ib, err := sqlinbox.New(db, sqlinbox.Dialect(dialect), sqlinbox.Options{TablePrefix: prefix, Concurrency: conc})
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
	cleanup := func() {
		if dialect == sqlsession.PostgreSQL {
			for _, t := range []string{"events", "sessions", "inbox", "schema_version"} {
				_, _ = db.ExecContext(ctx, "DROP TABLE IF EXISTS "+prefix+t+" CASCADE")
			}
		}
		db.Close()
	}
	return member{sessions: sessions, inbox: ib}, cleanup, nil
}

// stores: a 50 ms model with 64 turns in flight, over PostgreSQL and a SQLite file, against
// the in-memory stores, on the same records.
func stores(ctx context.Context, o options) error {
	n := orDefault(o.records, 3000)
	const modelTime, inFlight, maxOpen = 50 * time.Millisecond, 64, 40
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
	fmt.Printf("stores: %d records, %d partitions, %d keys, %v model, MaxInFlight %d; PostgreSQL pool %d, SQLite file WAL synchronous=FULL\n",
		n, o.partitions, o.keys, modelTime, inFlight, maxOpen)
	row("run", "memory turns/s", "postgres turns/s", "sqlite turns/s", "postgres/memory", "sqlite/memory")
	for run := 1; run <= o.runs; run++ {
		var rates [3]float64
		for side := range 3 {
			m := member{model: sleeper(modelTime, false), tune: func(c *consumer.Config) { c.MaxInFlight = inFlight }}
			cleanup := func() {}
			switch side {
			case 1:
				st, c, err := durable(ctx, "pgx", o.postgres, sqlsession.PostgreSQL, inFlight, maxOpen)
				if err != nil {
					return fmt.Errorf("PostgreSQL: %w", err)
				}
				m.sessions, m.inbox, cleanup = st.sessions, st.inbox, c
			case 2:
				path := filepath.Join(dir, fmt.Sprintf("run%d.db", run))
				st, c, err := durable(ctx, "sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)", sqlsession.SQLite, inFlight, maxOpen)
				if err != nil {
					return fmt.Errorf("SQLite: %w", err)
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
				return err
			}
			rates[side] = float64(n) / d.Seconds()
		}
		row(run, fmt.Sprintf("%.0f", rates[0]), fmt.Sprintf("%.0f", rates[1]), fmt.Sprintf("%.0f", rates[2]),
			fmt.Sprintf("%.2f", rates[1]/rates[0]), fmt.Sprintf("%.2f", rates[2]/rates[0]))
	}
	return nil
}
