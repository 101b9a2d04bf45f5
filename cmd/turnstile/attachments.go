package main

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/turnstile-go/turnstile/attachment"
	"github.com/turnstile-go/turnstile/attachment/fsattachment"
	"github.com/turnstile-go/turnstile/attachment/sqlattachment"
	"github.com/turnstile-go/turnstile/internal/sqldialect"
)

// sqlAttachments returns the attachment store on db, the --db database, with the stores'
// --table-prefix.
func (f *flags) sqlAttachments(db *sql.DB) (*sqlattachment.Store, error) {
	dialect := sqlattachment.PostgreSQL
	if strings.HasPrefix(*f.db, "sqlite:") {
		dialect = sqlattachment.SQLite
	}
	s, err := sqlattachment.New(db, dialect, sqlattachment.Options{TablePrefix: *f.prefix})
	if err != nil {
		return nil, usageError{err.Error()}
	}
	return s, nil
}

// attachmentStore is an attachment store session delete deletes from: where it is, for the
// output, and how to open it.
type attachmentStore struct {
	name string
	open func() (attachment.Retention, error)
}

// deleteAttachments runs del (a DeleteUser or a DeleteIdle) on each attachment store the
// service may keep: the SQL store in the --db database, when its tables are there (turnstile
// migrate makes them), and the filesystem store in dir, when dir is given (--attachments-dir).
// It prints what each deleted and whose (what: "of user u-12 in app support"), and says on
// stderr when the database has no attachment tables. Errors: the stores'.
func deleteAttachments(ctx context.Context, e *env, f *flags, db *sql.DB, dir, what string,
	del func(context.Context, attachment.Retention) (int64, error)) error {
	inDB := attachmentStore{"the database", func() (attachment.Retention, error) { return f.sqlAttachments(db) }}
	stores := []attachmentStore{inDB}
	if dir != "" {
		stores = append(stores, attachmentStore{dir, func() (attachment.Retention, error) {
			return fsattachment.New(dir, fsattachment.Options{})
		}})
	}
	for _, s := range stores {
		store, err := s.open()
		if err != nil {
			return err
		}
		n, err := del(ctx, store)
		switch {
		case err != nil && s.name == inDB.name && sqldialect.IsMissingTable(err):
			fmt.Fprintf(e.stderr, "no attachment tables under the table prefix %q in the database: no attachments deleted there "+
				"(give --attachments-dir for a service that keeps them in a directory)\n", *f.prefix)
			continue
		case err != nil:
			return partly(n, "deleted %d attachments "+strings.ReplaceAll(what+" from "+s.name, "%", "%%"), err)
		}
		fmt.Fprintf(e.stdout, "deleted %d attachments %s from %s\n", n, what, s.name)
	}
	return nil
}
