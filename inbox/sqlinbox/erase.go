package sqlinbox

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/internal/sqldialect"
)

var _ inbox.EraseCounter = (*Inbox)(nil)

// eraseBatch is how many conversations, and then how many keys, one statement of Erase names.
const eraseBatch = 200

// Erase implements inbox.Eraser: EraseCounted's entries and intents.
func (b *Inbox) Erase(ctx context.Context, scopes []inbox.Scope) (int64, error) {
	n, err := b.EraseCounted(ctx, scopes, false)
	return n.Entries + n.Intents, err
}

// EraseCounted implements inbox.EraseCounter: for each batch of 200 conversations, one write
// transaction reads the keys of their entries and intents, keeps those a scope selects, and
// deletes the entries, then their steps, then the intents; a dry run rolls each transaction
// back, so that it counts what the same statements delete. Neither table has an index on
// conversation (one would cost every Begin), so each batch reads the inbox and the outbox
// tables through once: a data-deletion request's cost, which the tables' retention bounds. On
// an error the counts of the batches that committed come back with it.
func (b *Inbox) EraseCounted(ctx context.Context, scopes []inbox.Scope, dryRun bool) (inbox.EraseCounts, error) {
	var total inbox.EraseCounts
	if err := ctx.Err(); err != nil {
		return total, err
	}
	if err := inbox.CheckScopes(scopes); err != nil {
		return total, err
	}
	set := inbox.NewScopeSet(scopes)
	convs := set.Conversations()
	for len(convs) > 0 {
		batch := convs[:min(len(convs), eraseBatch)]
		convs = convs[len(batch):]
		n, err := b.eraseBatch(ctx, set, batch, dryRun)
		if err != nil {
			return total, fmt.Errorf("sqlinbox: erase: %w", sqldialect.ClassifyContext(ctx, err))
		}
		total.Entries, total.Steps, total.Intents = total.Entries+n.Entries, total.Steps+n.Steps, total.Intents+n.Intents
	}
	return total, nil
}

// eraseBatch erases what set selects in the conversations convs, in one write transaction
// (rolled back in a dry run). The entries go before their steps: on PostgreSQL a RecordStep
// racing it either committed its step before the entry's DELETE (it holds a key-share lock on
// the entry until then), so the steps' DELETE, a later statement, sees it, or finds no entry
// and inserts nothing.
func (b *Inbox) eraseBatch(ctx context.Context, set inbox.ScopeSet, convs []string, dryRun bool) (inbox.EraseCounts, error) {
	var n inbox.EraseCounts
	tx, err := b.d.BeginWrite(ctx, b.db)
	if err != nil {
		return n, err
	}
	defer tx.Rollback()
	in, args := inList(1, convs)
	keys, err := selectedKeys(ctx, tx, set, b.d.Query(`SELECT request_id, conversation, request_id FROM {p}inbox WHERE conversation IN (`+in+`)`), args)
	if err != nil {
		return n, err
	}
	ids, err := selectedKeys(ctx, tx, set, b.d.Query(`SELECT request_id, conversation, id FROM {p}outbox WHERE conversation IN (`+in+`)`), args)
	if err != nil {
		return n, err
	}
	for _, del := range []struct {
		query string
		keys  []string
		count *int64
	}{
		{`DELETE FROM {p}inbox WHERE request_id IN (%s)`, keys, &n.Entries},
		{`DELETE FROM {p}inbox_steps WHERE request_id IN (%s)`, keys, &n.Steps},
		{`DELETE FROM {p}outbox WHERE id IN (%s)`, ids, &n.Intents},
	} {
		for k := 0; k < len(del.keys); k += eraseBatch {
			part := del.keys[k:min(len(del.keys), k+eraseBatch)]
			in, args := inList(1, part)
			res, err := tx.ExecContext(ctx, b.d.Query(fmt.Sprintf(del.query, in)), args...)
			if err != nil {
				return inbox.EraseCounts{}, err
			}
			m, err := res.RowsAffected()
			if err != nil {
				return inbox.EraseCounts{}, err
			}
			*del.count += m
		}
	}
	if dryRun {
		return n, tx.Rollback()
	}
	return n, tx.Commit()
}

// selectedKeys runs query, whose rows are (key, conversation, value), and returns the values
// of the rows whose key set selects in their conversation.
func selectedKeys(ctx context.Context, q sqldialect.Querier, set inbox.ScopeSet, query string, args []any) ([]string, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var key, conv, value string
		if err := rows.Scan(&key, &conv, &value); err != nil {
			return nil, err
		}
		if set.Selects(conv, key) {
			out = append(out, value)
		}
	}
	return out, rows.Err()
}

// inList returns "$first, $first+1, ..." for values and the values as arguments.
func inList(first int, values []string) (string, []any) {
	var b strings.Builder
	args := make([]any, len(values))
	for i, v := range values {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("$" + strconv.Itoa(first+i))
		args[i] = v
	}
	return b.String(), args
}
