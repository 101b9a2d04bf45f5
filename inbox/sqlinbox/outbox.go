package sqlinbox

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/internal/sqldialect"
)

var _ inbox.TxOutbox = (*Inbox)(nil)

// The journal's and the outbox's calls are never batched (Options.Batch batches Begin only):
// each runs its own statements at once.

// outboxQueries are the statements of the step journal and the outbox.
type outboxQueries struct {
	recordStep, readStep, steps, clearSteps                       string
	promote, claim, delivered, retry, bury, exists, intents       string
	redriveIntent, getIntent, purgeIntents, purgeSteps, purgeBoth string
}

const intentCols = `id, request_id, conversation, ordinal, name, payload, status, attempts, reason, next_at, created_at, updated_at`

func buildOutboxQueries(d *sqldialect.Dialect) outboxQueries {
	// On PostgreSQL the insert takes a key-share lock on the entry, so that a Purge deleting
	// it waits (and then the step is deleted with it) or went first (and no row is inserted).
	// SQLite serializes writers.
	lockEntry := ""
	if d.Name() == sqldialect.PostgreSQL {
		lockEntry = " FOR KEY SHARE"
	}
	q := outboxQueries{
		// Insert-if-absent, only when the entry exists; no row back when either is not so.
		recordStep: d.Query(`INSERT INTO {p}inbox_steps (request_id, ordinal, name, output, deferred, created_at)
			SELECT request_id, $2, $3, $4, $5, $6 FROM {p}inbox WHERE request_id = $1` + lockEntry + `
			ON CONFLICT (request_id, ordinal) DO NOTHING
			RETURNING created_at`),
		// What RecordStep found in its way: the stored step (if any) and whether the entry exists.
		readStep: d.Query(`SELECT s.name, s.output, s.deferred, s.created_at,
				EXISTS (SELECT 1 FROM {p}inbox WHERE request_id = $1)
			FROM (SELECT 1 AS one) AS x
			LEFT JOIN {p}inbox_steps AS s ON s.request_id = $1 AND s.ordinal = $2`),
		steps: d.Query(`SELECT ordinal, name, output, deferred, created_at FROM {p}inbox_steps
			WHERE request_id = $1 ORDER BY ordinal`),
		clearSteps: d.Query(`DELETE FROM {p}inbox_steps WHERE request_id = $1`),
		promote: d.Query(`INSERT INTO {p}outbox (` + intentCols + `)
			SELECT s.request_id || '#' || CAST(s.ordinal AS TEXT), s.request_id, i.conversation, s.ordinal,
				s.name, s.output, 'pending', 0, '', $2, $2, $2
			FROM {p}inbox_steps AS s JOIN {p}inbox AS i ON i.request_id = s.request_id
			WHERE s.request_id = $1 AND s.deferred AND ($3 < 1 OR s.ordinal <= $3)
			ON CONFLICT (id) DO NOTHING`),
		// The settles: $1 is the id, $2 the fencing attempt (0: unfenced).
		delivered: d.Query(`UPDATE {p}outbox SET status = 'delivered', next_at = $3, updated_at = $3
			WHERE id = $1 AND status = 'pending' AND ($2 = 0 OR attempts = $2)`),
		retry: d.Query(`UPDATE {p}outbox SET reason = $3, next_at = $4, updated_at = $5
			WHERE id = $1 AND status = 'pending' AND ($2 = 0 OR attempts = $2)`),
		bury: d.Query(`UPDATE {p}outbox SET status = 'dead', reason = $3, updated_at = $4
			WHERE id = $1 AND status = 'pending' AND ($2 = 0 OR attempts = $2)`),
		exists: d.Query(`SELECT attempts FROM {p}outbox WHERE id = $1`),
		intents: d.Query(`SELECT ` + intentCols + ` FROM {p}outbox
			WHERE ($1 = '' OR status = $1) AND ($2 = '' OR conversation = $2)
			ORDER BY created_at, id LIMIT $3`),
		redriveIntent: d.Query(`UPDATE {p}outbox SET status = 'pending', attempts = 0, reason = $2, next_at = $3,
				updated_at = $3
			WHERE id = $1 AND status = 'dead'
			RETURNING ` + intentCols),
		getIntent: d.Query(`SELECT ` + intentCols + ` FROM {p}outbox WHERE id = $1`),
		purgeIntents: d.Query(`DELETE FROM {p}outbox WHERE status IN ('delivered', 'dead') AND updated_at < $1
			AND id IN (
				SELECT id FROM {p}outbox WHERE status IN ('delivered', 'dead') AND updated_at < $1 LIMIT $2)`),
	}
	// Claim: the due pending intents, oldest due first, each counting an attempt and leased.
	// On PostgreSQL concurrent claimers skip each other's rows (FOR UPDATE SKIP LOCKED), and
	// a row claimed and committed meanwhile is re-checked against the CTE's conditions before
	// it is locked; SQLite serializes writers.
	// On PostgreSQL the due rows are chosen in a MATERIALIZED CTE: as an IN (subquery), the
	// planner may run the locking subquery again for each row and so claim more than n.
	const due = `SELECT id FROM {p}outbox WHERE status = 'pending' AND next_at <= $2 ORDER BY next_at, id LIMIT $1`
	if d.Name() == sqldialect.PostgreSQL {
		q.claim = d.Query(`WITH due AS MATERIALIZED (` + due + ` FOR UPDATE SKIP LOCKED)
			UPDATE {p}outbox AS o SET attempts = o.attempts + 1, next_at = $3, updated_at = $2
			FROM due WHERE o.id = due.id
			RETURNING o.` + strings.ReplaceAll(intentCols, ", ", ", o."))
	} else {
		q.claim = d.Query(`UPDATE {p}outbox SET attempts = attempts + 1, next_at = $3, updated_at = $2
			WHERE id IN (` + due + `)
			RETURNING ` + intentCols)
	}
	// Purge of entries with their steps. PostgreSQL: one statement, so that the steps deleted
	// are exactly those of the entries deleted. SQLite (no DELETE in WITH): the steps of the
	// batch's entries, then the entries, in one write transaction, which SQLite serializes,
	// so both subqueries select the same entries.
	const batch = `SELECT request_id FROM {p}inbox WHERE status IN ('done', 'dead') AND updated_at < $1 LIMIT $2`
	if d.Name() == sqldialect.PostgreSQL {
		q.purgeBoth = d.Query(`WITH gone AS (DELETE FROM {p}inbox WHERE status IN ('done', 'dead') AND updated_at < $1
				AND request_id IN (` + batch + `)
				RETURNING request_id),
			steps AS (DELETE FROM {p}inbox_steps WHERE request_id IN (SELECT request_id FROM gone))
			SELECT COUNT(*) FROM gone`)
	} else {
		q.purgeSteps = d.Query(`DELETE FROM {p}inbox_steps WHERE request_id IN (` + batch + `)`)
	}
	return q
}

// Steps implements inbox.Journal.
func (b *Inbox) Steps(ctx context.Context, key string) ([]inbox.Step, error) {
	if key == "" {
		return nil, fmt.Errorf("%w: empty key", inbox.ErrInvalid)
	}
	rows, err := b.db.QueryContext(ctx, b.oq.steps, key)
	if err != nil {
		return nil, b.fail(ctx, "steps", key, err)
	}
	defer rows.Close()
	out := []inbox.Step{}
	for rows.Next() {
		var s inbox.Step
		if err := rows.Scan(&s.Ordinal, &s.Name, &s.Output, &s.Deferred, sqldialect.TimeScanner{T: &s.At}); err != nil {
			return nil, b.fail(ctx, "steps", key, err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, b.fail(ctx, "steps", key, err)
	}
	return out, nil
}

// RecordStep implements inbox.Journal: one INSERT ... SELECT ... ON CONFLICT DO NOTHING
// RETURNING statement, which inserts the step when its entry exists and no step of its
// ordinal does; only when it inserts nothing does a second query read what was in its way
// (the first writer's step, or no entry). Two steps of one ordinal are the same step when
// their Name and Deferred agree. Not batched (Options.Batch).
func (b *Inbox) RecordStep(ctx context.Context, key string, s inbox.Step) (inbox.Step, error) {
	if err := inbox.CheckStep(key, s); err != nil {
		return inbox.Step{}, err
	}
	s.Name = sqldialect.Text(s.Name)
	now := sqldialect.StoredTime(time.Now())
	var at time.Time
	err := b.d.Write(ctx, b.db, func() error {
		return b.db.QueryRowContext(ctx, b.oq.recordStep, key, s.Ordinal, s.Name, sqldialect.Bytes(s.Output),
			s.Deferred, b.d.Time(now)).Scan(sqldialect.TimeScanner{T: &at})
	})
	if err == nil {
		s.At, s.Output = at, cloneBytes(s.Output)
		return s, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return inbox.Step{}, b.fail(ctx, "record step", key, err)
	}
	var (
		name     sql.NullString
		deferred sql.NullBool
		got      = inbox.Step{Ordinal: s.Ordinal}
		exists   bool
	)
	err = b.db.QueryRowContext(ctx, b.oq.readStep, key, s.Ordinal).Scan(&name, &got.Output, &deferred,
		sqldialect.TimeScanner{T: &got.At}, &exists)
	switch {
	case err != nil:
		return inbox.Step{}, b.fail(ctx, "record step", key, err)
	case !name.Valid && !exists:
		return inbox.Step{}, fmt.Errorf("%w: key %s", inbox.ErrNotFound, key)
	case !name.Valid:
		// The entry exists and the step does not: a Purge or a Redrive deleted it in between.
		return inbox.Step{}, &sqldialect.TransientError{Err: fmt.Errorf("sqlinbox: record step %s %d: the step was deleted as it was recorded", key, s.Ordinal)}
	}
	got.Name, got.Deferred = name.String, deferred.Bool
	if got.Name != s.Name || got.Deferred != s.Deferred {
		return got, fmt.Errorf("%w: key %s step %d is %q (deferred %t), not %q (deferred %t)",
			inbox.ErrStepMismatch, key, s.Ordinal, got.Name, got.Deferred, s.Name, s.Deferred)
	}
	return got, nil
}

func cloneBytes(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return append([]byte(nil), b...)
}

// Promote implements inbox.Outbox in one INSERT ... SELECT ... ON CONFLICT DO NOTHING
// statement over the key's deferred steps joined with its entry (for the conversation). Not
// batched (Options.Batch).
func (b *Inbox) Promote(ctx context.Context, key string, through int) (int, error) {
	return b.promote(ctx, nil, key, through)
}

// PromoteTx implements inbox.TxOutbox: Promote's statement, run on tx (also the transaction
// of a batch of session/sqlsession appends, where it runs at once, not deferred to the end
// as CompleteTx's completion is).
func (b *Inbox) PromoteTx(ctx context.Context, tx inbox.SQLTx, key string, through int) (int, error) {
	if tx == nil {
		return 0, fmt.Errorf("%w: nil transaction", inbox.ErrInvalid)
	}
	return b.promote(ctx, tx, key, through)
}

func (b *Inbox) promote(ctx context.Context, tx inbox.SQLTx, key string, through int) (int, error) {
	if key == "" {
		return 0, fmt.Errorf("%w: empty key", inbox.ErrInvalid)
	}
	var (
		res sql.Result
		err error
	)
	now := b.d.Time(time.Now())
	if tx == nil {
		res, err = b.exec(ctx, b.oq.promote, key, now, through)
	} else {
		res, err = tx.ExecContext(ctx, b.oq.promote, key, now, through)
	}
	if err != nil {
		return 0, b.fail(ctx, "promote", key, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, b.fail(ctx, "promote", key, err)
	}
	return int(n), nil
}

// Claim implements inbox.Outbox in one UPDATE ... RETURNING statement; on PostgreSQL,
// concurrent claimers skip each other's rows (FOR UPDATE SKIP LOCKED). The intents come back
// oldest created first. Times are this process's clock, as the inbox's other times are.
func (b *Inbox) Claim(ctx context.Context, n int, lease time.Duration) ([]inbox.Intent, error) {
	if n < 1 || lease <= 0 {
		return nil, fmt.Errorf("%w: claim %d intents for %s (want n >= 1, lease > 0)", inbox.ErrInvalid, n, lease)
	}
	now := time.Now()
	var out []inbox.Intent
	err := b.d.Write(ctx, b.db, func() error {
		out = out[:0]
		rows, err := b.db.QueryContext(ctx, b.oq.claim, n, b.d.Time(now), b.d.Time(now.Add(lease)))
		if err != nil {
			return err
		}
		out, err = scanIntents(rows)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("sqlinbox: claim: %w", sqldialect.ClassifyContext(ctx, err))
	}
	sortIntents(out)
	return out, nil
}

// Delivered implements inbox.Outbox in one UPDATE fenced on attempt; only a pending intent
// changes.
func (b *Inbox) Delivered(ctx context.Context, id string, attempt int) error {
	return b.settle(ctx, "delivered", id, attempt, b.oq.delivered, b.d.Time(time.Now()))
}

// Retry implements inbox.Outbox in one UPDATE fenced on attempt; only a pending intent
// changes (a dead one stays dead).
func (b *Inbox) Retry(ctx context.Context, id string, attempt int, reason string, at time.Time) error {
	return b.settle(ctx, "retry", id, attempt, b.oq.retry, sqldialect.Text(reason), b.d.Time(at), b.d.Time(time.Now()))
}

// Bury implements inbox.Outbox in one UPDATE fenced on attempt; only a pending intent
// changes.
func (b *Inbox) Bury(ctx context.Context, id string, attempt int, reason string) error {
	return b.settle(ctx, "bury", id, attempt, b.oq.bury, sqldialect.Text(reason), b.d.Time(time.Now()))
}

// settle runs the UPDATE query of a pending intent fenced on attempt (id is $1, attempt $2,
// args follow), then, only when it changed nothing, reads the intent's attempts to tell a
// missing intent (ErrNotFound) and a stale claim (ErrLeaseLost) from a settled intent (nil).
func (b *Inbox) settle(ctx context.Context, op, id string, attempt int, query string, args ...any) error {
	if id == "" {
		return fmt.Errorf("%w: empty intent id", inbox.ErrInvalid)
	}
	if attempt < 0 {
		return fmt.Errorf("%w: intent %s: attempt %d is negative", inbox.ErrInvalid, id, attempt)
	}
	res, err := b.exec(ctx, query, append([]any{id, attempt}, args...)...)
	if err := b.changed(ctx, op, id, res, err); !errors.Is(err, errUnchanged) {
		return err
	}
	var attempts int
	switch err := b.db.QueryRowContext(ctx, b.oq.exists, id).Scan(&attempts); {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("%w: intent %s", inbox.ErrNotFound, id)
	case err != nil:
		return b.fail(ctx, op, id, err)
	case attempt != 0 && attempts != attempt:
		return fmt.Errorf("%w: intent %s: attempt %d, now at attempt %d", inbox.ErrLeaseLost, id, attempt, attempts)
	}
	return nil
}

// Intents implements inbox.Outbox: oldest created first, then by id.
func (b *Inbox) Intents(ctx context.Context, f inbox.IntentFilter) ([]inbox.Intent, error) {
	if err := inbox.CheckIntentFilter(f); err != nil {
		return nil, err
	}
	status := ""
	if f.Status != 0 {
		status = f.Status.String()
	}
	rows, err := b.db.QueryContext(ctx, b.oq.intents, status, f.Conversation, inbox.FilterLimit(f))
	if err != nil {
		return nil, fmt.Errorf("sqlinbox: intents: %w", sqldialect.ClassifyContext(ctx, err))
	}
	out, err := scanIntents(rows)
	if err != nil {
		return nil, fmt.Errorf("sqlinbox: intents: %w", sqldialect.ClassifyContext(ctx, err))
	}
	return out, nil
}

// RedriveIntent implements inbox.Outbox in one UPDATE of a dead intent; of concurrent
// RedriveIntents of one intent, one succeeds and the others get ErrIntentNotDead.
func (b *Inbox) RedriveIntent(ctx context.Context, id, note string) (inbox.Intent, error) {
	if id == "" {
		return inbox.Intent{}, fmt.Errorf("%w: empty intent id", inbox.ErrInvalid)
	}
	var got []inbox.Intent
	err := b.d.Write(ctx, b.db, func() error {
		rows, err := b.db.QueryContext(ctx, b.oq.redriveIntent, id, sqldialect.Text(note), b.d.Time(time.Now()))
		if err != nil {
			return err
		}
		got, err = scanIntents(rows)
		return err
	})
	if err != nil {
		return inbox.Intent{}, b.fail(ctx, "redrive intent", id, err)
	}
	if len(got) == 1 {
		return got[0], nil
	}
	rows, err := b.db.QueryContext(ctx, b.oq.getIntent, id)
	if err == nil {
		got, err = scanIntents(rows)
	}
	switch {
	case err != nil:
		return inbox.Intent{}, b.fail(ctx, "redrive intent", id, err)
	case len(got) == 0:
		return inbox.Intent{}, fmt.Errorf("%w: intent %s", inbox.ErrNotFound, id)
	}
	return got[0], fmt.Errorf("%w: intent %s is %s", inbox.ErrIntentNotDead, id, got[0].Status)
}

// scanIntents reads the intentCols of rows and closes them.
func scanIntents(rows *sql.Rows) ([]inbox.Intent, error) {
	defer rows.Close()
	var out []inbox.Intent
	for rows.Next() {
		var (
			it     inbox.Intent
			status string
		)
		err := rows.Scan(&it.ID, &it.Key, &it.Conversation, &it.Ordinal, &it.Name, &it.Payload, &status, &it.Attempts,
			&it.Reason, sqldialect.TimeScanner{T: &it.NextAt}, sqldialect.TimeScanner{T: &it.CreatedAt},
			sqldialect.TimeScanner{T: &it.UpdatedAt})
		if err != nil {
			return nil, err
		}
		if it.Status, err = inbox.ParseIntentStatus(status); err != nil {
			return nil, fmt.Errorf("stored intent %s: %w", it.ID, err)
		}
		out = append(out, it)
	}
	return out, rows.Err()
}

// sortIntents orders intents oldest created first, then by id (RETURNING has no order).
func sortIntents(its []inbox.Intent) {
	slices.SortFunc(its, func(x, y inbox.Intent) int {
		return cmp.Or(x.CreatedAt.Compare(y.CreatedAt), strings.Compare(x.ID, y.ID))
	})
}

// purgeEntries deletes one batch of done and dead entries last updated before the cutoff,
// with their steps, and returns how many entries. It takes the write lock itself (on SQLite,
// BeginWrite); PostgreSQL needs none.
func (b *Inbox) purgeEntries(ctx context.Context, before time.Time) (int64, error) {
	if b.oq.purgeBoth != "" {
		var n int64
		err := b.db.QueryRowContext(ctx, b.oq.purgeBoth, b.d.Time(before), b.batch).Scan(&n)
		return n, err
	}
	tx, err := b.d.BeginWrite(ctx, b.db)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, b.oq.purgeSteps, b.d.Time(before), b.batch); err != nil {
		return 0, err
	}
	res, err := tx.ExecContext(ctx, b.q.purge, b.d.Time(before), b.batch)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, err
	}
	return n, tx.Commit()
}
