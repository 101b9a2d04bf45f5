package workflow

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/turnstile-go/turnstile/internal/sqldialect"
)

// SQLDialect names the database behind a SQLLedger's *sql.DB: SQLite or PostgreSQL.
type SQLDialect = sqldialect.Name

// The dialects a SQLLedger speaks.
const (
	SQLite     SQLDialect = sqldialect.SQLite
	PostgreSQL SQLDialect = sqldialect.PostgreSQL
)

// SQLLedger is a durable Ledger in a table of PostgreSQL or SQLite, PREFIX+"handoffs", one row
// per (conversation, sequence), a StateStore in PREFIX+"conversation_states", one row per
// conversation whose run ended idle, and an OverflowStore in PREFIX+"overflow", the pending
// requests a run continued into it rather than into its continue-as-new input. It is a
// LedgerEraser too: Purge deletes hand-offs by age, DeleteUser a user's rows. Share it between the bridges and workers of all members,
// next to the session store and the inbox. It is safe for concurrent use by goroutines and
// processes; call Migrate before the first use.
type SQLLedger struct {
	db *sql.DB
	d  *sqldialect.Dialect
}

var (
	_ Ledger        = (*SQLLedger)(nil)
	_ StateStore    = (*SQLLedger)(nil)
	_ OverflowStore = (*SQLLedger)(nil)
	_ LedgerEraser  = (*SQLLedger)(nil)
)

var ledgerMigrations = []sqldialect.Migration{{Version: 1, Statements: []string{
	`CREATE TABLE {p}handoffs (
		conversation_id TEXT NOT NULL,
		sequence BIGINT NOT NULL,
		request_id TEXT NOT NULL,
		envelope {bytes} NOT NULL,
		handed_at {time} NOT NULL,
		PRIMARY KEY (conversation_id, sequence)
	)`,
	`CREATE INDEX {p}handoffs_handed_at ON {p}handoffs (handed_at)`,
}}, {Version: 2, Statements: []string{
	`CREATE TABLE {p}conversation_states (
		conversation_id TEXT PRIMARY KEY,
		state {bytes} NOT NULL,
		saved_at {time} NOT NULL
	)`,
}}, {Version: 3, Statements: []string{
	// The user of each row, for per-user deletion (DeleteUser); rows written before it say ''.
	`ALTER TABLE {p}handoffs ADD COLUMN user_id TEXT NOT NULL DEFAULT ''`,
	`CREATE INDEX {p}handoffs_user ON {p}handoffs (user_id)`,
	`ALTER TABLE {p}conversation_states ADD COLUMN user_id TEXT NOT NULL DEFAULT ''`,
	`CREATE INDEX {p}conversation_states_user ON {p}conversation_states (user_id)`,
	// The pending requests a run continued into the store instead of its continue-as-new
	// input (OverflowStore), by position in the conversation's queue.
	`CREATE TABLE {p}overflow (
		conversation_id TEXT NOT NULL,
		position BIGINT NOT NULL,
		user_id TEXT NOT NULL,
		envelope {bytes} NOT NULL,
		saved_at {time} NOT NULL,
		PRIMARY KEY (conversation_id, position)
	)`,
	`CREATE INDEX {p}overflow_user ON {p}overflow (user_id)`,
}}}

// NewSQLLedger returns a ledger on db with tables named prefix+"handoffs" (prefix "" means
// turnstile's default). Errors: a nil db, an unknown dialect, an invalid prefix.
func NewSQLLedger(db *sql.DB, dialect SQLDialect, prefix string) (*SQLLedger, error) {
	if db == nil {
		return nil, errors.New("workflow: NewSQLLedger: nil *sql.DB")
	}
	d, err := sqldialect.For(dialect, prefix)
	if err != nil {
		return nil, fmt.Errorf("workflow: NewSQLLedger: %w", err)
	}
	return &SQLLedger{db: db, d: d}, nil
}

// Migrate creates the ledger's table; it is idempotent and safe to run from several
// processes at once.
func (l *SQLLedger) Migrate(ctx context.Context) error {
	if err := l.d.Migrate(ctx, l.db, "workflow_ledger", ledgerMigrations); err != nil {
		return fmt.Errorf("workflow: ledger: %w", err)
	}
	return nil
}

// Record implements Ledger: it inserts each sequenced request, keeping the first row of a
// (conversation, sequence). Each row is its own statement: after a failure, recording the
// same envelopes again adds what is missing.
func (l *SQLLedger) Record(ctx context.Context, envs ...Envelope) error {
	q := l.d.Query(`INSERT INTO {p}handoffs (conversation_id, sequence, request_id, envelope, handed_at, user_id)
		VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (conversation_id, sequence) DO NOTHING`)
	now := l.d.Time(time.Now())
	return l.d.Write(ctx, l.db, func() error {
		for _, env := range envs {
			if env.Request.Sequence <= 0 {
				continue
			}
			data, err := json.Marshal(env)
			if err != nil {
				return fmt.Errorf("workflow: ledger: encode %s: %w", env.Request.ID, err)
			}
			if _, err := l.db.ExecContext(ctx, q, env.Request.ConversationID, env.Request.Sequence, env.Request.ID, data, now, env.Request.UserID); err != nil {
				return fmt.Errorf("workflow: ledger: record %s: %w", env.Request.ID, sqldialect.ClassifyContext(ctx, err))
			}
		}
		return nil
	})
}

// HighWater implements Ledger.
func (l *SQLLedger) HighWater(ctx context.Context, conversationID string) (int64, error) {
	var high sql.NullInt64
	err := l.db.QueryRowContext(ctx, l.d.Query(`SELECT MAX(sequence) FROM {p}handoffs WHERE conversation_id = $1`), conversationID).Scan(&high)
	if err != nil {
		return 0, fmt.Errorf("workflow: ledger: high-water mark: %w", sqldialect.ClassifyContext(ctx, err))
	}
	return high.Int64, nil
}

// Range implements Ledger.
func (l *SQLLedger) Range(ctx context.Context, conversationID string, from, to int64) ([]Envelope, error) {
	rows, err := l.db.QueryContext(ctx, l.d.Query(`SELECT envelope FROM {p}handoffs
		WHERE conversation_id = $1 AND sequence >= $2 AND sequence <= $3 ORDER BY sequence`), conversationID, from, to)
	if err != nil {
		return nil, fmt.Errorf("workflow: ledger: range: %w", sqldialect.ClassifyContext(ctx, err))
	}
	defer rows.Close()
	var out []Envelope
	for rows.Next() {
		var data []byte
		if err := rows.Scan(&data); err != nil {
			return nil, fmt.Errorf("workflow: ledger: range: %w", err)
		}
		var env Envelope
		if err := json.Unmarshal(data, &env); err != nil {
			return nil, fmt.Errorf("workflow: ledger: range: a stored envelope does not decode: %w", err)
		}
		out = append(out, env)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("workflow: ledger: range: %w", sqldialect.ClassifyContext(ctx, err))
	}
	return out, nil
}

// Conversations implements Ledger.
func (l *SQLLedger) Conversations(ctx context.Context, before time.Time) ([]string, error) {
	rows, err := l.db.QueryContext(ctx, l.d.Query(`SELECT conversation_id FROM {p}handoffs
		GROUP BY conversation_id HAVING MAX(handed_at) < $1 ORDER BY conversation_id`), l.d.Time(before))
	if err != nil {
		return nil, fmt.Errorf("workflow: ledger: conversations: %w", sqldialect.ClassifyContext(ctx, err))
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("workflow: ledger: conversations: %w", err)
		}
		out = append(out, id)
	}
	return out, rows.Err()
}

// SaveState implements StateStore.
func (l *SQLLedger) SaveState(ctx context.Context, st State) error {
	data, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("workflow: ledger: encode state of %s: %w", st.ConversationID, err)
	}
	q := l.d.Query(`INSERT INTO {p}conversation_states (conversation_id, state, saved_at, user_id) VALUES ($1, $2, $3, $4)
		ON CONFLICT (conversation_id) DO UPDATE SET state = excluded.state, saved_at = excluded.saved_at, user_id = excluded.user_id`)
	return l.d.Write(ctx, l.db, func() error {
		tx, err := l.db.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("workflow: ledger: save state of %s: %w", st.ConversationID, sqldialect.ClassifyContext(ctx, err))
		}
		defer func() { _ = tx.Rollback() }()
		if _, err := tx.ExecContext(ctx, q, st.ConversationID, data, l.d.Time(time.Now()), st.UserID); err != nil {
			return fmt.Errorf("workflow: ledger: save state of %s: %w", st.ConversationID, sqldialect.ClassifyContext(ctx, err))
		}
		if nothingPending(st) {
			if _, err := tx.ExecContext(ctx, l.d.Query(`DELETE FROM {p}overflow WHERE conversation_id = $1`), st.ConversationID); err != nil {
				return fmt.Errorf("workflow: ledger: forget the overflow of %s: %w", st.ConversationID, sqldialect.ClassifyContext(ctx, err))
			}
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("workflow: ledger: save state of %s: %w", st.ConversationID, sqldialect.ClassifyContext(ctx, err))
		}
		return nil
	})
}

// LoadState implements StateStore.
func (l *SQLLedger) LoadState(ctx context.Context, conversationID string) (State, bool, error) {
	var data []byte
	err := l.db.QueryRowContext(ctx, l.d.Query(`SELECT state FROM {p}conversation_states WHERE conversation_id = $1`), conversationID).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return State{}, false, nil
	}
	if err != nil {
		return State{}, false, fmt.Errorf("workflow: ledger: load state of %s: %w", conversationID, sqldialect.ClassifyContext(ctx, err))
	}
	var st State
	if err := json.Unmarshal(data, &st); err != nil {
		return State{}, false, fmt.Errorf("workflow: ledger: the stored state of %s does not decode: %w", conversationID, err)
	}
	return st, true, nil
}
