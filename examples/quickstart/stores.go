package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	_ "modernc.org/sqlite"             // registers the "sqlite" database/sql driver

	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
	"github.com/turnstile-go/turnstile/session/sqlsession"
)

// stores are the shared, durable session store and inbox that every member uses (G3, G4).
type stores struct {
	db       *sql.DB
	sessions *sqlsession.Store
	inbox    *sqlinbox.Inbox
	where    string // for the banner
	cleanup  func()
}

// openStores opens the database of cfg (PostgreSQL, or SQLite in a file) and migrates both
// stores' tables.
func openStores(ctx context.Context, cfg Config) (*stores, error) {
	st := &stores{cleanup: func() {}}
	dialect := sqlsession.SQLite
	var err error
	if cfg.Postgres != "" {
		dialect = sqlsession.PostgreSQL
		st.db, err = sql.Open("pgx", cfg.Postgres)
		if err != nil {
			return nil, fmt.Errorf("quickstart: open PostgreSQL: %w", err)
		}
		st.db.SetMaxOpenConns(20)
		st.where = "PostgreSQL"
	} else {
		path := cfg.DBPath
		if path == "" {
			dir, err := os.MkdirTemp("", "turnstile-quickstart-")
			if err != nil {
				return nil, fmt.Errorf("quickstart: temporary directory: %w", err)
			}
			st.cleanup = func() { os.RemoveAll(dir) }
			path = filepath.Join(dir, "turnstile.db")
		}
		// WAL lets readers run beside the writer; the busy timeout makes writers of other
		// processes queue for SQLite's one write lock instead of failing with SQLITE_BUSY.
		// synchronous=NORMAL is SQLite's advice for WAL: a commit survives a crash of the
		// process, and only a power loss can undo the last ones.
		st.db, err = sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)")
		if err != nil {
			st.cleanup()
			return nil, fmt.Errorf("quickstart: open SQLite: %w", err)
		}
		st.where = "SQLite at " + path
	}
	if err := st.db.PingContext(ctx); err != nil {
		st.close()
		return nil, fmt.Errorf("quickstart: reach %s: %w", st.where, err)
	}
	if st.sessions, err = sqlsession.New(st.db, dialect, sqlsession.Options{TablePrefix: cfg.TablePrefix}); err == nil {
		st.inbox, err = sqlinbox.New(st.db, dialect, sqlinbox.Options{TablePrefix: cfg.TablePrefix})
	}
	if err == nil {
		err = st.sessions.Migrate(ctx)
	}
	if err == nil {
		err = st.inbox.Migrate(ctx)
	}
	if err != nil {
		st.close()
		return nil, fmt.Errorf("quickstart: stores: %w", err)
	}
	return st, nil
}

func (st *stores) close() {
	st.db.Close()
	st.cleanup()
}
