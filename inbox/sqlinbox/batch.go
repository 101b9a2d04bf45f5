package sqlinbox

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/internal/sqldialect"
)

// Batching configures the batching of the inbox's writes across concurrent callers (see
// Options.Batch); it is session/sqlsession's Batching.
type Batching = sqldialect.Batching

// DefaultBatchWait is the Batching.Wait used when it is zero.
const DefaultBatchWait = sqldialect.DefaultBatchWait

type beginCall = sqldialect.Call[inbox.Delivery, inbox.Entry]

// beginCols is how many host parameters one delivery takes in the batched Begin.
const beginCols = 5

// runBegins makes the Begins of calls in one INSERT ... ON CONFLICT DO UPDATE ... RETURNING
// statement of one row per delivery (the Batcher never puts one key twice in a batch, which
// PostgreSQL refuses in one upsert). The rows go in key order, so that two members' batches
// lock the rows they share in the same order. Each caller gets its own row back, mapped by
// key. When the statement fails for a reason that is not the database's (a retryable failure)
// nor the end of every caller's context, each delivery is tried in a statement of its own, so
// that one caller's bad input fails that caller alone.
func (b *Inbox) runBegins(ctx context.Context, calls []*beginCall) {
	calls = sqldialect.LiveCalls(calls)
	if len(calls) == 0 {
		return
	}
	slices.SortFunc(calls, func(x, y *beginCall) int {
		return strings.Compare(x.Req.Key, y.Req.Key)
	})
	got, err := b.beginMany(ctx, calls)
	if sqldialect.RetryEachAlone(ctx, calls, err, func(ctx context.Context, c *beginCall) (inbox.Entry, error) { return b.beginOne(ctx, c.Req) }) {
		return
	}
	for _, c := range calls {
		switch e, ok := got[c.Req.Key]; {
		case err != nil:
			c.Finish(inbox.Entry{}, b.fail(ctx, "begin (batched)", c.Req.Key, err))
		case !ok:
			c.Finish(inbox.Entry{}, fmt.Errorf("sqlinbox: begin (batched) %s: no row came back", c.Req.Key))
		default:
			c.Finish(e, nil)
		}
	}
}

// beginMany runs the batched Begin and returns the entries by key.
func (b *Inbox) beginMany(ctx context.Context, calls []*beginCall) (map[string]inbox.Entry, error) {
	args := make([]any, 0, len(calls)*beginCols+1)
	for _, c := range calls {
		d := c.Req
		args = append(args, d.Key, d.Conversation, d.Topic, d.Partition, d.Offset)
	}
	args = append(args, b.d.Time(time.Now()))
	got := make(map[string]inbox.Entry, len(calls))
	err := b.d.Write(ctx, b.db, func() error {
		rows, err := b.db.QueryContext(ctx, b.q.beginMany(len(calls)), args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			e, deliveries, err := scanEntry(rows)
			if err != nil {
				return err
			}
			if e.Status == inbox.StatusInProgress && deliveries == 1 {
				e.Status = inbox.StatusNew
			}
			got[e.Key] = e
		}
		return rows.Err()
	})
	return got, err
}

// beginManyQuery is the batched Begin of n deliveries: the single one's statement with n rows
// of beginCols parameters each, and the time last.
func beginManyQuery(d *sqldialect.Dialect, single string) func(n int) string {
	return func(n int) string {
		var q strings.Builder
		q.WriteString(`INSERT INTO {p}inbox AS i (request_id, conversation, status, attempts, deliveries,
				reason, topic, kafka_partition, kafka_offset, created_at, updated_at) VALUES `)
		now := "$" + strconv.Itoa(n*beginCols+1)
		for i := range n {
			if i > 0 {
				q.WriteString(", ")
			}
			p := func(c int) string { return "$" + strconv.Itoa(i*beginCols+c) }
			fmt.Fprintf(&q, "(%s, %s, 'in_progress', 1, 1, '', %s, %s, %s, %s, %s)", p(1), p(2), p(3), p(4), p(5), now, now)
		}
		_, tail, _ := strings.Cut(single, "ON CONFLICT")
		return d.Query(q.String() + " ON CONFLICT" + tail)
	}
}

// completions are the completions deferred to the end of one batch transaction (see
// CompleteTx): one UPDATE for all of them, at Flush.
type completions struct {
	b       *Inbox
	items   []int
	keys    []string
	results [][]byte
}

// deferCompletion adds the completion of key to bt's deferred writes, for its current item.
func (b *Inbox) deferCompletion(bt *sqldialect.BatchTx, key string, result []byte) {
	c := bt.Deferred(b, func() sqldialect.Deferred { return &completions{b: b} }).(*completions)
	c.items = append(c.items, bt.Item())
	c.keys = append(c.keys, key)
	c.results = append(c.results, slices.Clone(result))
}

// Flush implements sqldialect.Deferred: one UPDATE of every entry in progress among the keys,
// then, for the keys it did not change, one read of their status: done already is a success
// (the first result stays), dead is ErrDead, missing is ErrNotFound, as Complete has them.
func (c *completions) Flush(ctx context.Context, q sqldialect.Querier) (map[int]error, error) {
	b := c.b
	args := make([]any, 0, 2*len(c.keys)+1)
	for i, k := range c.keys {
		args = append(args, k, sqldialect.Bytes(c.results[i]))
	}
	args = append(args, b.d.Time(time.Now()))
	rows, err := q.QueryContext(ctx, b.q.completeMany(len(c.keys)), args...)
	if err != nil {
		return nil, err
	}
	changed := map[string]bool{}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			rows.Close()
			return nil, err
		}
		changed[k] = true
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	failed := map[int]error{}
	for i, k := range c.keys {
		if changed[k] {
			continue
		}
		status, reason, err := b.status(ctx, q, k)
		switch {
		case err != nil:
			return nil, err
		case status == "":
			failed[c.items[i]] = fmt.Errorf("%w: key %s", inbox.ErrNotFound, k)
		case status == stDead:
			failed[c.items[i]] = fmt.Errorf("%w: key %s: %s", inbox.ErrDead, k, reason)
		}
	}
	return failed, nil
}

// completeManyQuery is the completion of n entries in one statement: pairs of (key, result)
// parameters, and the time last. Only entries in progress change, as in Complete.
func completeManyQuery(d *sqldialect.Dialect) func(n int) string {
	return func(n int) string {
		var q strings.Builder
		q.WriteString(`WITH v (k, r) AS (VALUES `)
		for i := range n {
			if i > 0 {
				q.WriteString(", ")
			}
			fmt.Fprintf(&q, "(CAST($%d AS TEXT), CAST($%d AS {bytes}))", 2*i+1, 2*i+2)
		}
		fmt.Fprintf(&q, `)
			UPDATE {p}inbox SET status = 'done', result = v.r, updated_at = $%d
			FROM v WHERE request_id = v.k AND status = 'in_progress'
			RETURNING request_id`, 2*n+1)
		return d.Query(q.String())
	}
}
