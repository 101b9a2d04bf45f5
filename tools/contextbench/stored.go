package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
	_ "modernc.org/sqlite"             // registers the "sqlite" driver

	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
	"github.com/turnstile-go/turnstile/internal/sqldialect"
	"github.com/turnstile-go/turnstile/session/sqlsession"
	"github.com/turnstile-go/turnstile/turn"
)

// storedOptions configures measureStored.
type storedOptions struct {
	// DB is "sqlite" or "postgres".
	DB string
	// PostgresDSN is where PostgreSQL is.
	PostgresDSN string
	// Conversations and Turns are the workload: Conversations conversations of Turns turns.
	Conversations, Turns int
	// Dir holds the SQLite database (removed at the end).
	Dir string
}

// groupBytes are the bytes of the tables of each kind of record a turn stores.
type groupBytes struct {
	// Sessions: the sessions and events tables (the history, checkpoints included).
	Sessions int64 `json:"sessions"`
	// Inbox: the inbox and inbox_steps tables (entries with their results and journals).
	Inbox int64 `json:"inbox"`
	// Outbox: the outbox table.
	Outbox int64 `json:"outbox"`
}

func (g groupBytes) total() int64 { return g.Sessions + g.Inbox + g.Outbox }

// storedReport is what measureStored found on one database.
type storedReport struct {
	DB    string `json:"db"`
	Turns int    `json:"turns"`
	// Checkpoints counts the checkpoint events; CheckpointBytes their text and data.
	Checkpoints     int64 `json:"checkpoints"`
	CheckpointBytes int64 `json:"checkpoint_bytes"`
	// Events counts the session events, checkpoints included.
	Events int64 `json:"events"`
	// Intents counts the outbox rows.
	Intents int64 `json:"intents"`
	// Before: after the workload; AfterInbox: after a retention run past the inbox horizon
	// (and within the sessions' idle time); AfterSessions: after one past the sessions' idle
	// time. Each measured after a VACUUM (SQLite) or VACUUM FULL (PostgreSQL) of the tables,
	// so they compare the live rows.
	Before, AfterInbox, AfterSessions groupBytes
	// Deleted are what the two retention runs deleted.
	DeletedInbox, DeletedSessions turn.Deleted
}

// tableGroups maps each table (without the prefix) to its group.
var tableGroups = map[string]func(g *groupBytes) *int64{
	"sessions":    func(g *groupBytes) *int64 { return &g.Sessions },
	"events":      func(g *groupBytes) *int64 { return &g.Sessions },
	"inbox":       func(g *groupBytes) *int64 { return &g.Inbox },
	"inbox_steps": func(g *groupBytes) *int64 { return &g.Inbox },
	"outbox":      func(g *groupBytes) *int64 { return &g.Outbox },
}

// storedDB is a database of the measurement, with tables of its own.
type storedDB struct {
	db      *sql.DB
	dialect sqldialect.Name
	prefix  string
	close   func() error
}

// openStored opens the database o names.
func openStored(o storedOptions) (*storedDB, error) {
	var id [4]byte
	_, _ = rand.Read(id[:])
	switch o.DB {
	case "sqlite":
		dir, err := os.MkdirTemp(o.Dir, "contextbench-")
		if err != nil {
			return nil, err
		}
		db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "turnstile.db")+"?"+sqltestPragmas)
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		return &storedDB{db: db, dialect: sqldialect.SQLite, prefix: sqldialect.DefaultPrefix, close: func() error {
			return errors.Join(db.Close(), os.RemoveAll(dir))
		}}, nil
	case "postgres":
		db, err := sql.Open("pgx", o.PostgresDSN)
		if err != nil {
			return nil, err
		}
		db.SetMaxOpenConns(16)
		s := &storedDB{db: db, dialect: sqldialect.PostgreSQL, prefix: "cb" + hex.EncodeToString(id[:]) + "_"}
		s.close = func() error { return errors.Join(s.dropTables(), db.Close()) }
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := db.PingContext(ctx); err != nil {
			db.Close()
			return nil, fmt.Errorf("PostgreSQL unreachable at %s: %w", o.PostgresDSN, err)
		}
		return s, nil
	}
	return nil, fmt.Errorf("unknown database %q: want sqlite or postgres", o.DB)
}

// sqltestPragmas are SQLite's DSN parameters: the tests' busy timeout, WAL, and
// synchronous=NORMAL (SQLite's advice for WAL).
const sqltestPragmas = "_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)"

// dropTables drops the PostgreSQL tables of the prefix.
func (s *storedDB) dropTables() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var names []string
	for _, t := range []string{"sessions", "events", "inbox", "inbox_steps", "outbox", "schema_version"} {
		names = append(names, s.prefix+t)
	}
	_, err := s.db.ExecContext(ctx, "DROP TABLE IF EXISTS "+strings.Join(names, ", ")+" CASCADE")
	return err
}

// vacuum compacts the tables, so that their sizes are those of their live rows.
func (s *storedDB) vacuum(ctx context.Context) error {
	if s.dialect == sqldialect.SQLite {
		_, err := s.db.ExecContext(ctx, "VACUUM")
		return err
	}
	var names []string
	for t := range tableGroups {
		names = append(names, s.prefix+t)
	}
	_, err := s.db.ExecContext(ctx, "VACUUM FULL "+strings.Join(names, ", "))
	return err
}

// sizes returns the bytes of the tables by group: PostgreSQL's pg_total_relation_size (the
// table, its TOAST and its indexes), SQLite's dbstat pages of the table and its indexes.
func (s *storedDB) sizes(ctx context.Context) (groupBytes, error) {
	var g groupBytes
	for t, field := range tableGroups {
		var n int64
		var err error
		if s.dialect == sqldialect.PostgreSQL {
			err = s.db.QueryRowContext(ctx, `SELECT pg_total_relation_size($1::regclass)`, s.prefix+t).Scan(&n)
		} else {
			err = s.db.QueryRowContext(ctx, `SELECT COALESCE(SUM(d.pgsize), 0) FROM dbstat AS d
				JOIN sqlite_schema AS m ON m.name = d.name WHERE m.tbl_name = ?`, s.prefix+t).Scan(&n)
		}
		if err != nil {
			return g, fmt.Errorf("size of %s: %w", s.prefix+t, err)
		}
		*field(&g) += n
	}
	return g, nil
}

// measureStored runs the workload on the SQL stores of o.DB with compaction on (the Runner's
// defaults), delivers the outbox's intents, and measures the tables' bytes before and after
// the retention runs.
func measureStored(ctx context.Context, o storedOptions, progress func(string)) (r storedReport, err error) {
	s, err := openStored(o)
	if err != nil {
		return r, err
	}
	defer func() { err = errors.Join(err, s.close()) }()
	r.DB, r.Turns = o.DB, o.Conversations*o.Turns
	sessions, err := sqlsession.New(s.db, s.dialect, sqlsession.Options{TablePrefix: s.prefix})
	if err != nil {
		return r, err
	}
	ib, err := sqlinbox.New(s.db, s.dialect, sqlinbox.Options{TablePrefix: s.prefix})
	if err != nil {
		return r, err
	}
	if err := errors.Join(sessions.Migrate(ctx), ib.Migrate(ctx)); err != nil {
		return r, err
	}
	var convs []*conversation
	for k := range o.Conversations {
		c, err := newConversation(compaction, conversationOptions{Sessions: sessions, Inbox: ib, CacheTokens: true,
			Conversation: fmt.Sprintf("conv-%03d", k)})
		if err != nil {
			return r, err
		}
		defer c.Close()
		convs = append(convs, c)
	}
	for i := 1; i <= o.Turns; i++ {
		for _, c := range convs {
			if err := c.run(ctx, i); err != nil {
				return r, err
			}
		}
		if progress != nil && i%25 == 0 {
			progress(fmt.Sprintf("%s: turn %d of %d conversations", o.DB, i, len(convs)))
		}
	}
	// The relay delivers every intent.
	for {
		its, err := ib.Claim(ctx, 100, time.Minute)
		if err != nil {
			return r, err
		}
		if len(its) == 0 {
			break
		}
		for _, it := range its {
			if err := ib.Delivered(ctx, it.ID, it.Attempts); err != nil {
				return r, err
			}
		}
	}
	if err := s.db.QueryRowContext(ctx, s.dialectQuery(`SELECT COUNT(*), COALESCE(SUM(CASE WHEN author = 'checkpoint' THEN 1 ELSE 0 END), 0),
			COALESCE(SUM(CASE WHEN author = 'checkpoint' THEN LENGTH(body) + COALESCE(LENGTH(data), 0) ELSE 0 END), 0) FROM {p}events`)).
		Scan(&r.Events, &r.Checkpoints, &r.CheckpointBytes); err != nil {
		return r, fmt.Errorf("count the events: %w", err)
	}
	if err := s.db.QueryRowContext(ctx, s.dialectQuery(`SELECT COUNT(*) FROM {p}outbox`)).Scan(&r.Intents); err != nil {
		return r, fmt.Errorf("count the intents: %w", err)
	}
	measure := func(g *groupBytes) error {
		if err := s.vacuum(ctx); err != nil {
			return fmt.Errorf("vacuum: %w", err)
		}
		*g, err = s.sizes(ctx)
		return err
	}
	if err := measure(&r.Before); err != nil {
		return r, err
	}
	ret := turn.Retention{App: turn.DefaultApp, Inbox: ib, Sessions: sessions}
	for _, step := range []struct {
		after   time.Duration
		deleted *turn.Deleted
		sizes   *groupBytes
	}{
		{turn.DefaultInboxHorizon + time.Hour, &r.DeletedInbox, &r.AfterInbox},
		{turn.DefaultSessionIdle + time.Hour, &r.DeletedSessions, &r.AfterSessions},
	} {
		ret.NowFunc = func() time.Time { return time.Now().Add(step.after) }
		if *step.deleted, err = ret.Run(ctx); err != nil {
			return r, err
		}
		if err := measure(step.sizes); err != nil {
			return r, err
		}
	}
	return r, nil
}

// dialectQuery rewrites q for the database.
func (s *storedDB) dialectQuery(q string) string {
	d, err := sqldialect.For(s.dialect, s.prefix)
	if err != nil {
		panic(err) // the prefix was checked when the stores were made
	}
	return d.Query(q)
}

// writeStoredTable writes the reports as a Markdown table: bytes per turn of each group of
// tables, after the workload and after each retention run.
func writeStoredTable(w io.Writer, reports []storedReport) {
	fmt.Fprintln(w, "| database | tables | after the turns | retention past the inbox horizon (14 d) | retention past the sessions' idle time (90 d) |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, r := range reports {
		per := func(n int64) string { return group(int(n / int64(r.Turns))) }
		rows := []struct {
			name string
			get  func(g groupBytes) int64
		}{
			{"session events with checkpoints (sessions, events)", func(g groupBytes) int64 { return g.Sessions }},
			{"inbox entries with journals (inbox, inbox_steps)", func(g groupBytes) int64 { return g.Inbox }},
			{"outbox rows (outbox)", func(g groupBytes) int64 { return g.Outbox }},
			{"**total**", groupBytes.total},
		}
		for _, row := range rows {
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", r.DB, row.name, per(row.get(r.Before)), per(row.get(r.AfterInbox)), per(row.get(r.AfterSessions)))
		}
	}
	fmt.Fprintln(w)
	for _, r := range reports {
		fmt.Fprintf(w, "%s: %s turns, %s events (%s checkpoints, %s bytes of summary text and range, %s per turn), %s outbox rows; "+
			"the first run deleted %s inbox entries and intents, the second %s sessions.\n",
			r.DB, group(r.Turns), group(int(r.Events)), group(int(r.Checkpoints)), group(int(r.CheckpointBytes)),
			group(int(r.CheckpointBytes/int64(r.Turns))), group(int(r.Intents)), group(int(r.DeletedInbox.Inbox)), group(int(r.DeletedSessions.Sessions)))
	}
}
