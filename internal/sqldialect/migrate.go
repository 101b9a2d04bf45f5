package sqldialect

import (
	"context"
	"database/sql"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Migration is one step of a component's schema. Versions start at 1 and go up by one; a
// step, once released, never changes (add a new one instead).
type Migration struct {
	Version int
	// Statements are run in order, each through Dialect.DDL, in the migration's transaction.
	Statements []string
}

// versionTableDDL is the schema-version table every component shares: one row per applied
// migration of each component.
const versionTableDDL = `CREATE TABLE IF NOT EXISTS {p}schema_version (
	component TEXT NOT NULL,
	version INTEGER NOT NULL,
	applied_at {time} NOT NULL,
	PRIMARY KEY (component, version)
)`

// Migrate brings component's tables up to the last of migrations, in one write transaction,
// and records each applied step in prefix+"schema_version". It is idempotent, and safe when
// several processes run it at once: on PostgreSQL the transaction first takes a transaction-
// scoped advisory lock (pg_advisory_xact_lock) keyed by the table prefix, so that
// runners queue and each later one finds the work done; on SQLite BEGIN IMMEDIATE does the
// same with the database's write lock. Both databases run DDL inside transactions, so a
// failed step leaves no trace; a migration that fails with a transient error (SQLITE_BUSY,
// which SQLite returns without waiting while another connection turns a new file to WAL, or
// a dropped connection) is run again with backoff for up to migrateRetryTime, and ctx bounds it.
func (d *Dialect) Migrate(ctx context.Context, db *sql.DB, component string, migrations []Migration) error {
	for i, m := range migrations {
		if m.Version != i+1 {
			return fmt.Errorf("migrate %s: step %d has version %d", component, i, m.Version)
		}
	}
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		err := d.migrate(ctx, db, component, migrations)
		if err != nil && !IsTransient(err) {
			return struct{}{}, backoff.Permanent(err)
		}
		return struct{}{}, err
	}, backoff.WithMaxElapsedTime(migrateRetryTime))
	return err
}

// migrateRetryTime bounds the retries of a migration that meets transient errors.
const migrateRetryTime = 30 * time.Second

// migrate runs Migrate's transaction once.
func (d *Dialect) migrate(ctx context.Context, db *sql.DB, component string, migrations []Migration) error {
	tx, err := d.BeginWrite(ctx, db)
	if err != nil {
		return fmt.Errorf("migrate %s: begin: %w", component, Classify(err))
	}
	defer tx.Rollback()
	if d.name == PostgreSQL {
		if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", d.lockKey()); err != nil {
			return fmt.Errorf("migrate %s: lock: %w", component, Classify(err))
		}
	}
	if _, err := tx.ExecContext(ctx, d.DDL(versionTableDDL)); err != nil {
		return fmt.Errorf("migrate %s: version table: %w", component, Classify(err))
	}
	var current int
	err = tx.QueryRowContext(ctx, d.Query(`SELECT COALESCE(MAX(version), 0) FROM {p}schema_version WHERE component = $1`), component).Scan(&current)
	if err != nil {
		return fmt.Errorf("migrate %s: read version: %w", component, Classify(err))
	}
	if current > len(migrations) {
		return fmt.Errorf("migrate %s: the database is at version %d, newer than this code's %d", component, current, len(migrations))
	}
	for _, m := range migrations[current:] {
		for j, stmt := range m.Statements {
			if _, err := tx.ExecContext(ctx, d.DDL(stmt)); err != nil {
				return fmt.Errorf("migrate %s: version %d statement %d: %w", component, m.Version, j+1, Classify(err))
			}
		}
		_, err := tx.ExecContext(ctx, d.Query(`INSERT INTO {p}schema_version (component, version, applied_at) VALUES ($1, $2, $3)`),
			component, m.Version, d.Time(time.Now()))
		if err != nil {
			return fmt.Errorf("migrate %s: record version %d: %w", component, m.Version, Classify(err))
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate %s: commit: %w", component, Classify(err))
	}
	return nil
}

// lockKey derives the advisory lock key from the prefix: every component of one prefix shares
// the version table, whose concurrent CREATE TABLE IF NOT EXISTS would otherwise race in the
// catalog, while stores with different prefixes in one database do not wait for each other.
func (d *Dialect) lockKey() int64 {
	h := fnv.New64a()
	h.Write([]byte("turnstile-migrate:" + d.prefix))
	return int64(h.Sum64())
}
