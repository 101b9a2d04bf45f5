package sqlinbox

import (
	"context"
	"fmt"
	"slices"
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
	values := make([]any, 0, len(calls)*beginCols)
	for _, c := range calls {
		d := c.Req
		values = append(values, d.Key, d.Conversation, d.Topic, int64(d.Partition), d.Offset)
	}
	args, err := b.q.beginRows.Args(values)
	if err != nil {
		return nil, err
	}
	args = append(args, b.d.Time(time.Now()))
	got := make(map[string]inbox.Entry, len(calls))
	err = b.d.Write(ctx, b.db, func() error {
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

// beginRows are the rows of the batched Begin: one delivery each.
func beginRows(d *sqldialect.Dialect) *sqldialect.Rows {
	return d.Rows(sqldialect.Col{Name: "k", Type: sqldialect.ColText}, sqldialect.Col{Name: "c", Type: sqldialect.ColText},
		sqldialect.Col{Name: "tp", Type: sqldialect.ColText}, sqldialect.Col{Name: "pt", Type: sqldialect.ColInt},
		sqldialect.Col{Name: "o", Type: sqldialect.ColInt})
}

// beginManyQuery is the batched Begin of n deliveries (beginRows, then the time): the single
// one's statement reading its rows from v. SQLite needs the WHERE of an INSERT ... SELECT
// ... ON CONFLICT to tell the upsert from a join (https://www.sqlite.org/lang_upsert.html).
func beginManyQuery(d *sqldialect.Dialect, single string) func(n int) string {
	_, tail, _ := strings.Cut(single, "ON CONFLICT")
	return beginRows(d).Statement(func(cte string, next int) string {
		now := fmt.Sprintf("CAST($%d AS {time})", next)
		return `WITH ` + cte + ` INSERT INTO {p}inbox AS i (request_id, conversation, status, attempts, deliveries,
				reason, topic, kafka_partition, kafka_offset, created_at, updated_at)
			SELECT k, c, 'in_progress', 1, 1, '', tp, pt, o, ` + now + `, ` + now + ` FROM v WHERE true
			ON CONFLICT` + tail
	})
}

// completions are the completions deferred to the end of one batch transaction (see
// CompleteTx): one statement for all of them (completeManyQuery), at Flush.
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

// Flush implements sqldialect.Deferred: one statement completes every entry in progress among
// the keys (completeManyQuery), then, for the keys it did not change, one read of their status:
// done already is a success (the first result stays), dead is ErrDead, missing is ErrNotFound,
// as Complete has them. A missing key's error also tells the batch to roll back, as Deferred
// requires: on PostgreSQL the statement inserted a row for it.
//
// A key completed more than once in the batch (a join that calls CompleteTx twice) goes in
// once, with its first result, as completing it twice in a row would leave it (PostgreSQL's
// upsert refuses to change one row twice in a statement); each of its completions gets the
// outcome. The keys go in sorted, so that batches lock the entries they share in one order.
func (c *completions) Flush(ctx context.Context, q sqldialect.Querier) (map[int]error, error) {
	b := c.b
	first := make(map[string]int, len(c.keys)) // a key's first completion in the batch
	keys := make([]string, 0, len(c.keys))
	for i, k := range c.keys {
		if _, ok := first[k]; !ok {
			first[k] = i
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	values := make([]any, 0, 2*len(keys))
	for _, k := range keys {
		values = append(values, k, sqldialect.Bytes(c.results[first[k]]))
	}
	args, err := b.q.completeRows.Args(values)
	if err != nil {
		return nil, err
	}
	args = append(args, b.d.Time(time.Now()))
	rows, err := q.QueryContext(ctx, b.q.completeMany(len(keys)), args...)
	if err != nil {
		return nil, err
	}
	changed, missing := map[string]bool{}, map[string]bool{}
	for rows.Next() {
		var (
			k    string
			none bool
		)
		if err := rows.Scan(&k, &none); err != nil {
			rows.Close()
			return nil, err
		}
		changed[k], missing[k] = !none, none
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	outcome := make(map[string]error, len(keys)) // by key: nil for a success
	for _, k := range keys {
		switch {
		case changed[k]:
			continue
		case missing[k]: // inserted by the upsert: the transaction must not commit with it
			outcome[k] = fmt.Errorf("%w: key %s", inbox.ErrNotFound, k)
			continue
		}
		status, reason, err := b.status(ctx, q, k)
		switch {
		case err != nil:
			return nil, err
		case status == "":
			outcome[k] = fmt.Errorf("%w: key %s", inbox.ErrNotFound, k)
		case status == stDead:
			outcome[k] = fmt.Errorf("%w: key %s: %s", inbox.ErrDead, k, reason)
		}
	}
	failed := map[int]error{}
	for i, k := range c.keys {
		if err := outcome[k]; err != nil {
			failed[c.items[i]] = err
		}
	}
	return failed, nil
}

// completeRows are the rows of the batched completion: a key and its result each.
func completeRows(d *sqldialect.Dialect) *sqldialect.Rows {
	return d.Rows(sqldialect.Col{Name: "k", Type: sqldialect.ColText}, sqldialect.Col{Name: "r", Type: sqldialect.ColBytes})
}

// completeManyQuery is the completion of n entries in one statement (completeRows, then the
// time). Only entries in progress change, as in Complete. Its rows are a changed entry's key
// and whether the entry was missing (see Flush).
//
// On PostgreSQL it is an upsert whose insert is never kept: ON CONFLICT finds each entry
// through the primary key's index (its arbiter), whereas the plan of an UPDATE joined to the
// rows, made once per connection and kept (the plan cache's generic plan), scanned the whole
// inbox when it was made while the table was small, and went on doing so as it grew. A key
// with no entry is inserted with deliveries 0, which no entry Begin made has; Flush reports it
// ErrNotFound and the batch's transaction is rolled back without it, so the row is never
// committed. On SQLite, which plans a statement when it is prepared, an UPDATE ... FROM.
func completeManyQuery(d *sqldialect.Dialect) func(n int) string {
	if d.Name() == sqldialect.PostgreSQL {
		return completeRows(d).Statement(func(cte string, next int) string {
			return fmt.Sprintf(`WITH %s
				INSERT INTO {p}inbox AS i (request_id, conversation, status, attempts, deliveries,
					result, reason, topic, kafka_partition, kafka_offset, created_at, updated_at)
				SELECT k, '', 'done', 0, 0, r, '', '', 0, 0, $%[2]d, $%[2]d FROM v
				ON CONFLICT (request_id) DO UPDATE SET status = 'done', result = excluded.result,
					updated_at = excluded.updated_at
				WHERE i.status = 'in_progress'
				RETURNING i.request_id, i.deliveries = 0`, cte, next)
		})
	}
	return completeRows(d).Statement(func(cte string, next int) string {
		return fmt.Sprintf(`WITH %s
			UPDATE {p}inbox SET status = 'done', result = v.r, updated_at = $%d
			FROM v WHERE request_id = v.k AND status = 'in_progress'
			RETURNING request_id, false`, cte, next)
	})
}
