package sqlinbox

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/internal/sqldialect"
)

// Begin implements inbox.Inbox in one INSERT ... ON CONFLICT DO UPDATE ... RETURNING
// statement, so members that receive one request at once each count an attempt. With
// Options.Batch on, that statement holds the Begins of concurrent callers, one row each. A
// caller whose ctx ends while its Begin waits for a batch gets ctx.Err() and nothing is
// written; once its batch's statement is sent, it gets that statement's outcome.
func (b *Inbox) Begin(ctx context.Context, d inbox.Delivery) (inbox.Entry, error) {
	if d.Key == "" {
		return inbox.Entry{}, fmt.Errorf("%w: empty key", inbox.ErrInvalid)
	}
	if b.begins != nil {
		return b.begins.Do(ctx, d.Key, d)
	}
	return b.beginOne(ctx, d)
}

// beginOne is Begin in a statement of its own.
func (b *Inbox) beginOne(ctx context.Context, d inbox.Delivery) (inbox.Entry, error) {
	var (
		e          inbox.Entry
		deliveries int
	)
	err := b.d.Write(ctx, b.db, func() (err error) {
		row := b.db.QueryRowContext(ctx, b.q.begin, d.Key, d.Conversation, d.Topic, d.Partition,
			d.Offset, b.d.Time(time.Now()))
		e, deliveries, err = scanEntry(row)
		return err
	})
	if err != nil {
		return inbox.Entry{}, b.fail(ctx, "begin", d.Key, err)
	}
	if e.Status == inbox.StatusInProgress && deliveries == 1 {
		e.Status = inbox.StatusNew // this statement inserted the entry
	}
	return e, nil
}

// Complete implements inbox.Inbox: only an entry in progress becomes done, so the first
// result stays.
func (b *Inbox) Complete(ctx context.Context, key string, result []byte) error {
	return b.complete(ctx, nil, key, result)
}

// CompleteTx implements inbox.TxCompleter: Complete's statements, run on tx. On the
// transaction of a batch of session/sqlsession appends (Options.Batch) the completion is
// deferred to the end of that transaction, made in one statement with the batch's other
// completions before its commit: CompleteTx then returns nil, and ErrDead or ErrNotFound fail
// that caller's append (its turn is not stored) instead.
func (b *Inbox) CompleteTx(ctx context.Context, tx inbox.SQLTx, key string, result []byte) error {
	if tx == nil {
		return fmt.Errorf("%w: nil transaction", inbox.ErrInvalid)
	}
	if bt, ok := tx.(*sqldialect.BatchTx); ok && key != "" {
		b.deferCompletion(bt, key, result)
		return nil
	}
	return b.complete(ctx, tx, key, result)
}

// TxDB implements inbox.TxCompleter: the *sql.DB given to New.
func (b *Inbox) TxDB() *sql.DB { return b.db }

// complete is Complete, on tx when it is not nil.
func (b *Inbox) complete(ctx context.Context, tx inbox.SQLTx, key string, result []byte) error {
	if key == "" {
		return fmt.Errorf("%w: empty key", inbox.ErrInvalid)
	}
	args := []any{key, sqldialect.Bytes(result), b.d.Time(time.Now())}
	var (
		res sql.Result
		err error
		q   inbox.SQLTx = tx
	)
	if tx == nil {
		q = b.db
		res, err = b.exec(ctx, b.q.complete, args...)
	} else {
		res, err = tx.ExecContext(ctx, b.q.complete, args...)
	}
	if err := b.changed(ctx, "complete", key, res, err); !errors.Is(err, errUnchanged) {
		return err
	}
	status, reason, err := b.status(ctx, q, key)
	switch {
	case err != nil:
		return b.fail(ctx, "complete", key, err)
	case status == "":
		return fmt.Errorf("%w: key %s", inbox.ErrNotFound, key)
	case status == stDead:
		return fmt.Errorf("%w: key %s: %s", inbox.ErrDead, key, reason)
	}
	return nil // done already: the first result stays
}

// Fail implements inbox.Inbox; it changes only an entry in progress.
func (b *Inbox) Fail(ctx context.Context, key string, f inbox.Failure) error {
	if key == "" {
		return fmt.Errorf("%w: empty key", inbox.ErrInvalid)
	}
	res, err := b.exec(ctx, b.q.fail, key, sqldialect.Text(f.Reason), f.Refund, b.d.Time(time.Now()))
	return b.changedOrExists(ctx, "fail", key, res, err)
}

// MarkDead implements inbox.Inbox; a done entry stays done.
func (b *Inbox) MarkDead(ctx context.Context, key, reason string) error {
	if key == "" {
		return fmt.Errorf("%w: empty key", inbox.ErrInvalid)
	}
	res, err := b.exec(ctx, b.q.markDead, key, sqldialect.Text(reason), b.d.Time(time.Now()))
	return b.changedOrExists(ctx, "mark dead", key, res, err)
}

// Redrive implements inbox.Inbox: it reads the entry, then updates it only if it is still
// dead with the audit it read, so that of concurrent Redrives one wins and the others find it
// not dead; the update deletes the entry's steps in its transaction.
func (b *Inbox) Redrive(ctx context.Context, key, note string) (inbox.Entry, error) {
	if key == "" {
		return inbox.Entry{}, fmt.Errorf("%w: empty key", inbox.ErrInvalid)
	}
	for {
		e, err := b.Get(ctx, key)
		if err != nil {
			return inbox.Entry{}, err
		}
		if e.Status != inbox.StatusDead {
			return e, fmt.Errorf("%w: key %s is %s", inbox.ErrNotDead, key, e.Status)
		}
		old, err := encodeRedrives(e.Redrives)
		if err != nil {
			return inbox.Entry{}, b.fail(ctx, "redrive", key, err)
		}
		now := sqldialect.StoredTime(time.Now())
		audit := append(e.Redrives, inbox.RedriveAudit{Reason: e.Reason, Attempts: e.Attempts, Note: sqldialect.Text(note), At: now})
		next, err := encodeRedrives(audit)
		if err != nil {
			return inbox.Entry{}, b.fail(ctx, "redrive", key, err)
		}
		res, err := b.redriveTx(ctx, key, next, now, old)
		switch err := b.changed(ctx, "redrive", key, res, err); {
		case errors.Is(err, errUnchanged):
			continue // changed since we read it: read again
		case err != nil:
			return inbox.Entry{}, err
		}
		e.Status, e.Attempts, e.Reason, e.UpdatedAt, e.Redrives = inbox.StatusInProgress, 0, "", now, audit
		return e, nil
	}
}

// redriveTx runs the redrive UPDATE and, when it changed the entry, deletes its steps in
// the same transaction: a re-driven request runs its steps afresh.
func (b *Inbox) redriveTx(ctx context.Context, key, next string, now time.Time, old string) (sql.Result, error) {
	tx, err := b.d.BeginWrite(ctx, b.db)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, b.q.redrive, key, next, b.d.Time(now), old)
	if err != nil {
		return nil, err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return res, err
	}
	if _, err := tx.ExecContext(ctx, b.oq.clearSteps, key); err != nil {
		return nil, err
	}
	return res, tx.Commit()
}

// encodeRedrives stores the audit as a JSON array, "" when empty.
func encodeRedrives(a []inbox.RedriveAudit) (string, error) {
	if len(a) == 0 {
		return "", nil
	}
	b, err := json.Marshal(a)
	return string(b), err
}

// Get implements inbox.Inbox.
func (b *Inbox) Get(ctx context.Context, key string) (inbox.Entry, error) {
	if key == "" {
		return inbox.Entry{}, fmt.Errorf("%w: empty key", inbox.ErrInvalid)
	}
	e, _, err := scanEntry(b.db.QueryRowContext(ctx, b.q.get, key))
	if errors.Is(err, sql.ErrNoRows) {
		return inbox.Entry{}, fmt.Errorf("%w: key %s", inbox.ErrNotFound, key)
	}
	if err != nil {
		return inbox.Entry{}, b.fail(ctx, "get", key, err)
	}
	return e, nil
}

// Purge implements inbox.Inbox: DELETE statements of at most Options.PurgeBatch entries each
// (with their steps), until one deletes fewer, then the same for the delivered and dead
// intents last updated before the cutoff (pending intents stay). The count is of entries and
// intents. Each batch commits on its own; on an error the count so far comes back with it.
func (b *Inbox) Purge(ctx context.Context, before time.Time) (int64, error) {
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		n, err := b.purgeEntries(ctx, before)
		if err != nil {
			return total, fmt.Errorf("sqlinbox: purge: %w", sqldialect.ClassifyContext(ctx, err))
		}
		total += n
		if n < int64(b.batch) {
			break
		}
	}
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		res, err := b.exec(ctx, b.oq.purgeIntents, b.d.Time(before), b.batch)
		if err != nil {
			return total, fmt.Errorf("sqlinbox: purge intents: %w", sqldialect.ClassifyContext(ctx, err))
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, fmt.Errorf("sqlinbox: purge intents: %w", sqldialect.ClassifyContext(ctx, err))
		}
		total += n
		if n < int64(b.batch) {
			return total, nil
		}
	}
}

// exec runs one writing statement (see sqldialect.Dialect.Write).
func (b *Inbox) exec(ctx context.Context, query string, args ...any) (res sql.Result, err error) {
	err = b.d.Write(ctx, b.db, func() error {
		res, err = b.db.ExecContext(ctx, query, args...)
		return err
	})
	return res, err
}

// errUnchanged says an UPDATE matched no row.
var errUnchanged = errors.New("no row changed")

// changed returns nil when the UPDATE changed a row, errUnchanged when it changed none, and
// the classified error when it failed.
func (b *Inbox) changed(ctx context.Context, op, key string, res sql.Result, err error) error {
	if err != nil {
		return b.fail(ctx, op, key, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return b.fail(ctx, op, key, err)
	}
	if n == 0 {
		return errUnchanged
	}
	return nil
}

// changedOrExists is changed for updates that are no-ops on entries in a final state: an
// unchanged row is fine when the entry exists, ErrNotFound when it does not.
func (b *Inbox) changedOrExists(ctx context.Context, op, key string, res sql.Result, err error) error {
	if err := b.changed(ctx, op, key, res, err); !errors.Is(err, errUnchanged) {
		return err
	}
	status, _, err := b.status(ctx, b.db, key)
	switch {
	case err != nil:
		return b.fail(ctx, op, key, err)
	case status == "":
		return fmt.Errorf("%w: key %s", inbox.ErrNotFound, key)
	}
	return nil
}

// status returns the stored status and reason of an entry, "" when there is none, read
// through q (the *sql.DB or a transaction).
func (b *Inbox) status(ctx context.Context, q inbox.SQLTx, key string) (status, reason string, err error) {
	err = q.QueryRowContext(ctx, b.q.status, key).Scan(&status, &reason)
	if errors.Is(err, sql.ErrNoRows) {
		return "", "", nil
	}
	return status, reason, err
}

// scanEntry reads the entryCols of one row, and the deliveries count.
func scanEntry(row interface{ Scan(...any) error }) (inbox.Entry, int, error) {
	var (
		e          inbox.Entry
		status     string
		deliveries int
		result     []byte
		redrives   string
	)
	err := row.Scan(&e.Key, &e.Conversation, &status, &e.Attempts, &deliveries, &result, &e.Reason,
		&e.Topic, &e.Partition, &e.Offset, sqldialect.TimeScanner{T: &e.CreatedAt}, sqldialect.TimeScanner{T: &e.UpdatedAt},
		&redrives)
	if err != nil {
		return inbox.Entry{}, 0, err
	}
	if redrives != "" {
		if err := json.Unmarshal([]byte(redrives), &e.Redrives); err != nil {
			return inbox.Entry{}, 0, fmt.Errorf("stored redrives unreadable: %w", err)
		}
	}
	switch status {
	case stInProgress:
		e.Status = inbox.StatusInProgress
	case stDone:
		e.Status = inbox.StatusDone
	case stDead:
		e.Status = inbox.StatusDead
	default:
		return inbox.Entry{}, 0, fmt.Errorf("unknown stored status %q", status)
	}
	if len(result) > 0 {
		e.Result = bytes.Clone(result)
	}
	return e, deliveries, nil
}

// fail wraps a database error with the operation and key, classifying
// infrastructure failures as retryable.
func (b *Inbox) fail(ctx context.Context, op, key string, err error) error {
	return fmt.Errorf("sqlinbox: %s %s: %w", op, key, sqldialect.ClassifyContext(ctx, err))
}
