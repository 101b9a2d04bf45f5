package sqlsession

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/turnstile-go/turnstile/internal/sqldialect"
	"github.com/turnstile-go/turnstile/session"
)

// Summary is one session as List reports it: its key (with the owner), version, event count
// and times, without its state or events.
type Summary struct {
	Key        session.Key
	Version    int64
	EventCount int64
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

// ListFilter selects the sessions of one app for List. Set fields must all match.
type ListFilter struct {
	// App is the app whose sessions are listed (required).
	App string
	// Conversation, when set, is the conversation id: at most one session, whatever its owner.
	Conversation string
	// User, when set, is the owner: the sessions DeleteUser would delete.
	User string
	// UpdatedBefore, when set, keeps the sessions last updated before it: those DeleteIdle
	// would delete.
	UpdatedBefore time.Time
	// Limit is the most sessions returned; 0 or less means no limit.
	Limit int
}

// List returns the sessions of f.App that match f, least recently updated first: the session
// of a conversation whoever owns it (an operator who knows the conversation and not the
// user), or what DeleteUser or DeleteIdle would delete, to show before deleting. Its cost
// grows with the number of sessions it reads; f.User and f.UpdatedBefore use the indexes of
// schema version 2, f.Conversation the unique (app, conversation) key.
// Errors: ErrInvalid (an empty app), the database's (wrapped and classified as the other
// methods' are).
func (s *Store) List(ctx context.Context, f ListFilter) ([]Summary, error) {
	if f.App == "" {
		return nil, fmt.Errorf("%w: List needs an app", session.ErrInvalid)
	}
	var (
		where strings.Builder
		args  = []any{f.App}
	)
	where.WriteString("app = $1")
	add := func(cond string, v any) {
		args = append(args, v)
		fmt.Fprintf(&where, " AND %s $%d", cond, len(args))
	}
	if f.Conversation != "" {
		add("conversation =", f.Conversation)
	}
	if f.User != "" {
		add("user_id =", f.User)
	}
	if !f.UpdatedBefore.IsZero() {
		add("updated_at <", s.d.Time(f.UpdatedBefore))
	}
	q := "SELECT conversation, user_id, version, event_count, created_at, updated_at FROM {p}sessions WHERE " +
		where.String() + " ORDER BY updated_at, id"
	if f.Limit > 0 {
		q += " LIMIT " + strconv.Itoa(f.Limit)
	}
	rows, err := s.db.QueryContext(ctx, s.d.Query(q), args...)
	if err != nil {
		return nil, fmt.Errorf("sqlsession: list sessions of %s: %w", f.App, sqldialect.ClassifyContext(ctx, err))
	}
	defer rows.Close()
	var out []Summary
	for rows.Next() {
		x := Summary{Key: session.Key{App: f.App}}
		if err := rows.Scan(&x.Key.Conversation, &x.Key.User, &x.Version, &x.EventCount,
			sqldialect.TimeScanner{T: &x.CreatedAt}, sqldialect.TimeScanner{T: &x.UpdatedAt}); err != nil {
			return nil, fmt.Errorf("sqlsession: list sessions of %s: %w", f.App, sqldialect.ClassifyContext(ctx, err))
		}
		out = append(out, x)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlsession: list sessions of %s: %w", f.App, sqldialect.ClassifyContext(ctx, err))
	}
	return out, nil
}
