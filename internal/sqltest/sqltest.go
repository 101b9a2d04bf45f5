// Package sqltest opens the databases that the SQL stores' tests run on: SQLite in a file or
// in memory (modernc.org/sqlite), and PostgreSQL (github.com/jackc/pgx/v5/stdlib) at
// TURNSTILE_POSTGRES_DSN, each test with tables of its own.
package sqltest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
	_ "modernc.org/sqlite"             // registers the "sqlite" driver
)

// DefaultPostgresDSN is where the tests look for PostgreSQL when TURNSTILE_POSTGRES_DSN is unset.
const DefaultPostgresDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// SQLitePragmas are the DSN parameters the tests (and the docs) give modernc.org/sqlite:
// writers wait up to 5 s for the write lock instead of failing with SQLITE_BUSY.
const SQLitePragmas = "_pragma=busy_timeout(5000)"

// ID returns a random lower-case hex id of 16 characters.
func ID(t testing.TB) string {
	t.Helper()
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// SQLiteFile opens a new SQLite database in a file under t.TempDir(), in WAL mode, closed at
// the end of the test.
func SQLiteFile(t testing.TB) *sql.DB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "turnstile.db")
	return open(t, "sqlite", "file:"+path+"?"+SQLitePragmas+"&_pragma=journal_mode(WAL)")
}

// SQLiteFileSyncNormal is SQLiteFile with synchronous=NORMAL, SQLite's advice for WAL: a
// commit writes the WAL without waiting for the disk (fsync), so it survives a crash of the
// process but the last commits may be lost to a power cut.
func SQLiteFileSyncNormal(t testing.TB) *sql.DB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "turnstile.db")
	return open(t, "sqlite", "file:"+path+"?"+SQLitePragmas+"&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)")
}

// SQLiteMemory opens a new named in-memory SQLite database with a shared cache, so that all
// the pool's connections see it. SQLite drops such a database when its last connection
// closes, and database/sql closes a connection whose transaction a cancelled context cut
// short (a test of cancellation may cut the pool's only one), so a second *sql.DB holds one
// connection open until the test ends: the database lives as long as the test.
func SQLiteMemory(t testing.TB) *sql.DB {
	t.Helper()
	dsn := "file:mem-" + ID(t) + "?mode=memory&cache=shared&" + SQLitePragmas
	anchor := open(t, "sqlite", dsn)
	anchor.SetMaxIdleConns(1)
	if _, err := anchor.Exec("SELECT 1"); err != nil {
		t.Fatal(err)
	}
	return open(t, "sqlite", dsn)
}

func open(t testing.TB, driver, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.Ping(); err != nil {
		t.Fatal(err)
	}
	return db
}

var pg struct {
	once sync.Once
	db   *sql.DB
	err  error
	dsn  string
}

// PostgresDSN returns TURNSTILE_POSTGRES_DSN, or DefaultPostgresDSN when it is unset.
func PostgresDSN() string {
	if dsn := os.Getenv("TURNSTILE_POSTGRES_DSN"); dsn != "" {
		return dsn
	}
	return DefaultPostgresDSN
}

// Postgres returns the test binary's pool to PostgreSQL (at most 25 connections, shared by
// every test, closed after 10 s idle; the pool itself is never closed). When the database cannot be reached the test is skipped with the
// reason, or fails when CI=true.
func Postgres(t testing.TB) *sql.DB {
	t.Helper()
	pg.once.Do(func() {
		pg.dsn = PostgresDSN()
		pg.db, pg.err = sql.Open("pgx", pg.dsn)
		if pg.err != nil {
			return
		}
		pg.db.SetMaxOpenConns(25)
		// The stores keep up to 25 connections idle (Options.Concurrency); let them go once a
		// test binary's burst is over, as other test binaries share the server's 100 clients.
		pg.db.SetConnMaxIdleTime(10 * time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		pg.err = pg.db.PingContext(ctx)
	})
	if pg.err != nil {
		msg := fmt.Sprintf("PostgreSQL unreachable at %s (set TURNSTILE_POSTGRES_DSN): %v", pg.dsn, pg.err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return pg.db
}

// OpenPostgres opens a pool of the test's own to PostgreSQL at PostgresDSN(), without the
// shared pool of Postgres (which outlives the test, and which goleak then reports), closed at
// the end of the test. When the database cannot be reached the test is skipped with the
// reason, or fails when CI=true.
func OpenPostgres(t testing.TB) *sql.DB {
	t.Helper()
	db := open(t, "pgx", PostgresDSN())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		msg := fmt.Sprintf("PostgreSQL unreachable at %s (set TURNSTILE_POSTGRES_DSN): %v", PostgresDSN(), err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return db
}

// PostgresPool opens a pool of its own to PostgreSQL at PostgresDSN(), with database/sql's
// default settings (no limit on open connections, 2 idle), closed at the end of the test: for
// tests and benchmarks that set or measure the pool. When the database cannot be reached the
// test is skipped with the reason, or fails when CI=true, as with Postgres.
func PostgresPool(t testing.TB) *sql.DB {
	t.Helper()
	Postgres(t)
	return open(t, "pgx", PostgresDSN())
}

// Prefix returns a table prefix no other test uses, and drops the tables that start with it
// at the end of the test (on PostgreSQL; SQLite databases are per test anyway).
func Prefix(t testing.TB, db *sql.DB, postgres bool) string {
	t.Helper()
	prefix := "t" + ID(t)[:12] + "_"
	if postgres {
		t.Cleanup(func() { DropTables(t, db, prefix) })
	}
	return prefix
}

// DropTables drops every PostgreSQL table in the current schema whose name starts with prefix.
func DropTables(t testing.TB, db *sql.DB, prefix string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := db.QueryContext(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND starts_with(tablename, $1)`, prefix)
	if err != nil {
		t.Errorf("list tables of %s: %v", prefix, err)
		return
	}
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Errorf("list tables of %s: %v", prefix, err)
		}
		names = append(names, `"`+n+`"`)
	}
	rows.Close()
	if len(names) == 0 {
		return
	}
	if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+strings.Join(names, ", ")+" CASCADE"); err != nil {
		t.Errorf("drop tables of %s: %v", prefix, err)
	}
}

// DB is one database the stores' tests run on.
type DB struct {
	// Name is "sqlite-file", "sqlite-memory" or "postgres", for subtest names.
	Name string
	// Postgres is true for PostgreSQL.
	Postgres bool
	// Open returns a database with nothing of another test in it (for PostgreSQL, the shared
	// pool; pair it with Prefix).
	Open func(t testing.TB) *sql.DB
}

// The databases every SQL store test runs on.
var (
	SQLiteFileDB   = DB{Name: "sqlite-file", Open: SQLiteFile}
	SQLiteMemoryDB = DB{Name: "sqlite-memory", Open: SQLiteMemory}
	PostgresDB     = DB{Name: "postgres", Postgres: true, Open: Postgres}
	// SQLiteFileSyncNormalDB is left out of DBs: it runs the same code as SQLiteFileDB; the
	// benchmarks compare the two.
	SQLiteFileSyncNormalDB = DB{Name: "sqlite-file-sync-normal", Open: SQLiteFileSyncNormal}
	// DBs lists them all.
	DBs = []DB{SQLiteFileDB, SQLiteMemoryDB, PostgresDB}
)

// WaitForLockWait waits until a PostgreSQL session is waiting for a lock while it runs a
// statement that starts with prefix (say "DELETE FROM t1234_inbox"), and fails the test after a
// minute: a test that holds a row lock in a transaction uses it to know the statement it
// races is blocked on that row before it commits.
func WaitForLockWait(t testing.TB, db *sql.DB, prefix string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var waiting int
		err := db.QueryRow(`SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND starts_with(query, $1)`, prefix).Scan(&waiting)
		switch {
		case err != nil:
			t.Fatalf("sqltest: read pg_stat_activity: %v", err)
		case waiting > 0:
			return
		case time.Now().After(deadline):
			t.Fatalf("sqltest: no statement starting with %q waited for a lock within a minute", prefix)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// BreakTable makes the writes of the store whose table it is fail, as a database outage would,
// by renaming table (a full name, prefix included) to table+"_broken"; mend renames it back.
func BreakTable(t testing.TB, db *sql.DB, table string) (mend func()) {
	t.Helper()
	if _, err := db.ExecContext(context.Background(), "ALTER TABLE "+table+" RENAME TO "+table+"_broken"); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		if _, err := db.ExecContext(context.Background(), "ALTER TABLE "+table+"_broken RENAME TO "+table); err != nil {
			t.Fatal(err)
		}
	}
}
