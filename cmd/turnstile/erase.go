package main

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/turnstile-go/turnstile/attachment"
	"github.com/turnstile-go/turnstile/attachment/fsattachment"
	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
	"github.com/turnstile-go/turnstile/internal/sqldialect"
	"github.com/turnstile-go/turnstile/session/sqlsession"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/workflow"
)

// eraseUser is session delete --user U alone: turn.Retention.EraseUser on the database's
// stores (with workflow.UserEraser as its External under --temporal, and the attachments of
// the database and of --attachments-dir), printing each kind with its count; a dry run
// deletes nothing. With vacuum (not in a dry run), the database is vacuumed afterwards.
func eraseUser(ctx context.Context, e *env, f *flags, ss *sqlsession.Store, ib *sqlinbox.Inbox, user, dir string, dryRun bool, vacuum vacuumMode) error {
	files, err := f.userAttachments(e, ss.TxDB(), dir)
	if err != nil {
		return err
	}
	ret := turn.Retention{App: *f.app, Inbox: ib, Sessions: ss, Attachments: files}
	if *f.temporal != "" {
		c, err := f.temporalClient()
		if err != nil {
			return err
		}
		defer c.Close()
		l, done, err := f.ledger()
		if err != nil {
			return err
		}
		defer done()
		ret.External = workflow.UserEraser{Client: c, Options: workflow.UserDeletion{Namespace: *f.namespace, IDPrefix: *f.idPrefix, Ledger: l}}
	}
	erased, err := ret.EraseUser(ctx, user, dryRun)
	if err != nil {
		if !dryRun {
			printErasure(e, erased, false)
			return fmt.Errorf("%w (what is listed above was deleted; run it again to delete the rest)", err)
		}
		return err
	}
	if *f.json {
		return printJSON(e.stdout, erased)
	}
	if err := printErasure(e, erased, true); err != nil {
		return err
	}
	if dryRun {
		fmt.Fprintf(e.stderr, "a dry run: nothing was deleted\n")
		return nil
	}
	if vacuum != vacuumNone {
		return vacuumDB(ctx, e, f, ss.TxDB(), vacuum)
	}
	return nil
}

// printErasure prints each kind of erased with its count, as a table when table is set (else
// as lines on stderr: what a failed deletion did before it failed).
func printErasure(e *env, erased turn.Erasure, table bool) error {
	verb := "deleted"
	if erased.DryRun {
		verb = "would delete"
	}
	if !table {
		for _, k := range erased.Kinds {
			fmt.Fprintf(e.stderr, "%s %d %s of user %s in app %s (%s)\n", verb, k.Count, k.Name, erased.User, erased.App, k.Where)
		}
		return nil
	}
	fmt.Fprintf(e.stdout, "user %s in app %s: %d conversations (%s)\n", erased.User, erased.App, len(erased.Conversations), clipText(strings.Join(erased.Conversations, ", "), 200))
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tWHERE\t"+strings.ToUpper(verb))
	for _, k := range erased.Kinds {
		fmt.Fprintf(tw, "%s\t%s\t%d\n", k.Name, k.Where, k.Count)
	}
	return tw.Flush()
}

// userAttachments returns the attachment stores session delete --user erases from, as one
// attachment store: the SQL store in the database, and the filesystem store in dir when dir
// is given (--attachments-dir).
func (f *flags) userAttachments(e *env, db *sql.DB, dir string) (*attachmentStores, error) {
	inDB, err := f.sqlAttachments(db)
	if err != nil {
		return nil, err
	}
	s := &attachmentStores{Retention: inDB, e: e, prefix: *f.prefix}
	s.stores = append(s.stores, inDB)
	if dir != "" {
		fs, err := fsattachment.New(dir, fsattachment.Options{})
		if err != nil {
			return nil, err
		}
		s.stores = append(s.stores, fs)
	}
	return s, nil
}

// attachmentStores is several attachment stores whose user deletion and count add up; the
// first is the database's, whose tables may be missing (then it is skipped, with a line on
// stderr). Its other methods are the first store's.
type attachmentStores struct {
	attachment.Retention
	stores []attachment.UserCounter
	e      *env
	prefix string
	warned bool
}

// DeleteUser implements attachment.Retention over every store.
func (s *attachmentStores) DeleteUser(ctx context.Context, app, user string) (int64, error) {
	return s.each(ctx, func(c attachment.UserCounter) (int64, error) { return c.DeleteUser(ctx, app, user) })
}

// CountUser implements attachment.UserCounter over every store.
func (s *attachmentStores) CountUser(ctx context.Context, app, user string) (int64, error) {
	return s.each(ctx, func(c attachment.UserCounter) (int64, error) { return c.CountUser(ctx, app, user) })
}

func (s *attachmentStores) each(_ context.Context, fn func(attachment.UserCounter) (int64, error)) (int64, error) {
	var total int64
	for i, c := range s.stores {
		n, err := fn(c)
		if err != nil && i == 0 && sqldialect.IsMissingTable(err) {
			if !s.warned {
				s.warned = true
				fmt.Fprintf(s.e.stderr, "no attachment tables under the table prefix %q in the database: no attachments there "+
					"(give --attachments-dir for a service that keeps them in a directory)\n", s.prefix)
			}
			continue
		}
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// vacuumMode is what --vacuum and --vacuum-full ask for.
type vacuumMode int

const (
	vacuumNone vacuumMode = iota
	vacuumPlain
	vacuumFull
)

// vacuumTables are the turnstile tables (under --table-prefix) that a PostgreSQL vacuum covers:
// the sessions', the inbox's, the attachments' and the hand-off ledger's.
var vacuumTables = []string{"sessions", "events", "inbox", "inbox_steps", "outbox", "attachments", "attachment_chunks",
	"handoffs", "conversation_states", "overflow"}

// vacuumDB reclaims what a deletion left in the database's free space: on SQLite VACUUM (which
// rebuilds the whole file, whatever the mode) and then a checkpoint of the WAL that truncates
// it; on PostgreSQL VACUUM, or VACUUM FULL, of each turnstile table that exists.
func vacuumDB(ctx context.Context, e *env, f *flags, db *sql.DB, mode vacuumMode) error {
	if strings.HasPrefix(*f.db, "sqlite:") {
		if _, err := db.ExecContext(ctx, `VACUUM`); err != nil {
			return fmt.Errorf("vacuum: %w", err)
		}
		var busy, logged, done int
		if err := db.QueryRowContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`).Scan(&busy, &logged, &done); err != nil {
			return fmt.Errorf("vacuum: WAL checkpoint: %w", err)
		}
		if busy != 0 {
			fmt.Fprintf(e.stderr, "the WAL checkpoint could not finish (another connection reads): run --vacuum again when the service is idle\n")
		}
		fmt.Fprintf(e.stdout, "vacuumed the SQLite database (the file rebuilt without free pages; the WAL checkpointed and truncated)\n")
		return nil
	}
	stmt := "VACUUM"
	if mode == vacuumFull {
		stmt = "VACUUM FULL"
	}
	var done []string
	for _, t := range vacuumTables {
		name := cmp.Or(*f.prefix, sqlinbox.DefaultTablePrefix) + t // validated: a plain identifier
		var exists bool
		if err := db.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&exists); err != nil {
			return fmt.Errorf("vacuum: %w", err)
		}
		if !exists {
			continue
		}
		if _, err := db.ExecContext(ctx, stmt+" "+name); err != nil {
			return fmt.Errorf("vacuum: %s %s: %w (vacuumed before: %s)", stmt, name, err, strings.Join(done, ", "))
		}
		done = append(done, name)
	}
	fmt.Fprintf(e.stdout, "ran %s on %d tables: %s\n", stmt, len(done), strings.Join(done, ", "))
	return nil
}
