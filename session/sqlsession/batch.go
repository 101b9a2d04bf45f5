package sqlsession

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/turnstile-go/turnstile/internal/sqldialect"
	"github.com/turnstile-go/turnstile/session"
)

// Batching configures the batching of the store's reads and writes (Get, Create, Append,
// AppendTx) across concurrent callers (see Options.Batch). Size is the most calls one batch
// holds (0: batching off, the default), Wait how long a batch waits for more after its first
// (0: DefaultBatchWait).
type Batching = sqldialect.Batching

// DefaultBatchWait is the Batching.Wait used when it is zero: 2 ms.
const DefaultBatchWait = sqldialect.DefaultBatchWait

// batchInsert is how many events one INSERT of a batch carries: 4,500 host parameters, under
// SQLite's limit of 32,766 (modernc.org/sqlite) and PostgreSQL's of 65,535.
const batchInsert = 500

// appendReq is one caller's Append or AppendTx in a batch.
type appendReq struct {
	key      session.Key
	expected int64
	turn     session.Turn
	join     session.JoinFunc
}

type appendCall = sqldialect.Call[appendReq, session.Appended]

// batchKey is the session a call writes: the Batcher keeps two appends to one session out of
// one batch, since one UPDATE ... FROM changes a row once.
func batchKey(k session.Key) string { return k.App + "\x00" + k.Conversation }

// runAppends makes the appends of calls in one write transaction: one UPDATE bumps the version
// of every session whose expected version matches and whose turn is not stored yet, one INSERT
// (per batchInsert events) adds the events of all of them, each caller's join runs in the
// transaction (a deferred write, such as inbox/sqlinbox's completion, is made for all of them
// in one statement before the commit), and one COMMIT ends it. A caller whose bump did not
// match gets its own outcome (ErrConflict, ErrNotFound, ErrOwnerMismatch, or its stored turn
// as a duplicate) and writes nothing. When a caller's join fails, the transaction is rolled
// back and run again without that caller, who gets the join's error; the others' joins then
// run again. A batch that fails otherwise fails every caller, except that a failure that is
// neither retryable nor the end of every caller's context is retried one call at a time, so
// that one caller's bad input fails that caller alone.
func (s *Store) runAppends(ctx context.Context, calls []*appendCall) {
	slices.SortFunc(calls, func(x, y *appendCall) int {
		return cmp.Or(strings.Compare(x.Req.key.App, y.Req.key.App), strings.Compare(x.Req.key.Conversation, y.Req.key.Conversation))
	})
	for {
		calls = sqldialect.LiveCalls(calls)
		if len(calls) == 0 {
			return
		}
		out, failed, err := s.appendMany(ctx, calls)
		switch {
		case sqldialect.RetryAlone(ctx, len(calls), err):
			for _, c := range calls {
				c.Finish(s.appendOne(sqldialect.CallContext(ctx, c.Ctx), c.Req.key, c.Req.expected, c.Req.turn, c.Req.join))
			}
			return
		case err != nil:
			for _, c := range calls {
				c.Finish(session.Appended{}, s.fail(ctx, "append (batched)", c.Req.key, err))
			}
			return
		case len(failed) == 0:
			for i, c := range calls {
				if out[i].write {
					s.cache.appended(c.Req.key, out[i].id, out[i].count, out[i].ap.Events)
				}
				c.Finish(out[i].ap, out[i].err)
			}
			return
		}
		rest := calls[:0:0]
		for i, c := range calls {
			if err, ok := failed[i]; ok {
				c.Finish(session.Appended{}, err)
			} else {
				rest = append(rest, c)
			}
		}
		calls = rest
	}
}

// appendOutcome is one call's outcome in a batch that committed.
type appendOutcome struct {
	ap        session.Appended
	err       error
	write     bool  // the call's turn is written in the batch
	id, count int64 // when written: the session row's id and its event_count after the batch
}

type bumped struct{ id, version, count int64 }

// appendMany runs one transaction of the batch. It returns each call's outcome once it
// committed; or the errors of the calls whose joins failed, the transaction rolled back; or
// the error that failed the batch.
func (s *Store) appendMany(ctx context.Context, calls []*appendCall) ([]appendOutcome, map[int]error, error) {
	tx, err := s.d.BeginWrite(ctx, s.db)
	if err != nil {
		return nil, nil, err
	}
	defer tx.Rollback()
	turns := make([][]session.Event, len(calls)) // each call's events as stored, but their seq
	for i, c := range calls {
		turns[i] = make([]session.Event, len(c.Req.turn.Events))
		for j, e := range c.Req.turn.Events {
			e.RequestID = c.Req.turn.RequestID
			e.Data, e.Time = nilIfEmpty(bytes.Clone(e.Data)), sqldialect.StoredTime(e.Time)
			turns[i][j] = e
		}
	}
	got, err := s.bumpMany(ctx, tx, calls, turns)
	if err != nil {
		return nil, nil, err
	}
	s.hook(ctx, "bumped", tx)
	out := make([]appendOutcome, len(calls))
	var rows []any
	for i, c := range calls {
		r := c.Req
		b, ok := got[batchKey(r.key)]
		if !ok {
			if out[i], err = s.notBumped(ctx, tx, r); err != nil {
				return nil, nil, err
			}
			continue
		}
		events := turns[i]
		n := int64(len(events))
		for j := range events {
			e := &events[j]
			e.Seq = b.count - n + int64(j) + 1
			if s.q.bumpInsert == "" { // inserted below; on PostgreSQL bumpMany did
				rows = append(rows, b.id, e.Seq, e.RequestID, j, e.ID, e.Author, e.Text, sqldialect.Bytes(e.Data), s.d.Time(e.Time))
			}
		}
		out[i] = appendOutcome{ap: session.Appended{Version: b.version, Events: events}, write: true, id: b.id, count: b.count}
	}
	for chunk := range slices.Chunk(rows, batchInsert*eventCols) {
		args, err := s.q.eventRows.Args(chunk)
		if err != nil {
			return nil, nil, err
		}
		if _, err := tx.ExecContext(ctx, s.q.insertMany(len(chunk)/eventCols), args...); err != nil {
			return nil, nil, err
		}
	}
	if failed, err := s.joinAll(ctx, tx, calls, out); err != nil || len(failed) > 0 {
		return nil, failed, err
	}
	s.hook(ctx, "inserted", tx)
	if failed := cancelled(calls); len(failed) > 0 {
		return nil, failed, nil
	}
	if err := tx.Commit(); err != nil {
		return nil, nil, err
	}
	return out, nil, nil
}

// cancelled returns the context errors of the calls whose caller's context has ended, for
// the batch to roll back and leave them out before it commits.
func cancelled(calls []*appendCall) map[int]error {
	var failed map[int]error
	for i, c := range calls {
		if err := c.Ctx.Err(); err != nil {
			if failed == nil {
				failed = map[int]error{}
			}
			failed[i] = err
		}
	}
	return failed
}

// bumpMany runs the batch's version bump and returns the sessions it bumped, by batchKey. On
// PostgreSQL the same statement inserts the events of those sessions (turns, by call, as
// stored but their seq; see queries.bumpInsert); on SQLite appendMany inserts them.
func (s *Store) bumpMany(ctx context.Context, tx *sqldialect.Tx, calls []*appendCall, turns [][]session.Event) (map[string]bumped, error) {
	now := s.d.Time(time.Now())
	together := s.q.bumpInsert != ""
	values := make([]any, 0, len(calls)*(bumpCols+1))
	var events []any
	for i, c := range calls {
		r := c.Req
		values = append(values, r.key.App, r.key.Conversation, r.key.User, r.expected, int64(len(r.turn.Events)),
			r.turn.State != nil, sqldialect.Bytes(r.turn.State), now, r.turn.RequestID)
		if !together {
			continue
		}
		values = append(values, int64(i))
		for j, e := range turns[i] {
			events = append(events, int64(i), int64(j), e.ID, e.Author, e.Text, sqldialect.Bytes(e.Data), s.d.Time(e.Time))
		}
	}
	var (
		query string
		args  []any
		err   error
	)
	if together {
		query = s.q.bumpInsert
		args, err = s.q.bumpIndexRows.Args(values)
		if err == nil {
			var more []any
			more, err = s.q.turnEventRows.Args(events)
			args = append(args, more...)
		}
	} else {
		query = s.q.bumpMany(len(calls))
		args, err = s.q.bumpRows.Args(values)
	}
	if err != nil {
		return nil, err
	}
	rs, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	got := make(map[string]bumped, len(calls))
	for rs.Next() {
		var (
			k session.Key
			b bumped
		)
		if err := rs.Scan(&k.App, &k.Conversation, &b.id, &b.version, &b.count); err != nil {
			return nil, err
		}
		got[batchKey(k)] = b
	}
	return got, rs.Err()
}

// notBumped tells why the batch's bump left r's session alone, inside its transaction: not
// found, another owner, a stale version, or (at the expected version) the turn stored already.
func (s *Store) notBumped(ctx context.Context, tx *sqldialect.Tx, r appendReq) (appendOutcome, error) {
	var (
		owner       string
		version, id int64
	)
	err := tx.QueryRowContext(ctx, s.q.ownerID, r.key.App, r.key.Conversation).Scan(&owner, &version, &id)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return appendOutcome{err: fmt.Errorf("%w: session %s", session.ErrNotFound, r.key)}, nil
	case err != nil:
		return appendOutcome{}, err
	case owner != r.key.User:
		return appendOutcome{err: fmt.Errorf("%w: session %s", session.ErrOwnerMismatch, r.key)}, nil
	case version != r.expected:
		return appendOutcome{err: fmt.Errorf("%w: session %s is at version %d, not %d", session.ErrConflict, r.key, version, r.expected)}, nil
	}
	prior, err := s.readTurn(ctx, tx, id, r.turn.RequestID)
	if err != nil {
		return appendOutcome{}, err
	}
	if len(prior) == 0 { // the session was replaced meanwhile (deleted, created again)
		return appendOutcome{err: fmt.Errorf("%w: session %s changed during the append", session.ErrConflict, r.key)}, nil
	}
	return appendOutcome{ap: session.Appended{Version: r.expected, Events: prior, Duplicate: true}}, nil
}

// joinAll runs the joins of the calls that write, then the writes they deferred, and returns
// the errors of the calls whose join failed (the first one met: on PostgreSQL a failed
// statement ends the transaction) or the error that fails the batch.
func (s *Store) joinAll(ctx context.Context, tx *sqldialect.Tx, calls []*appendCall, out []appendOutcome) (map[int]error, error) {
	bt := sqldialect.NewBatchTx(tx)
	for i, c := range calls {
		if !out[i].write || c.Req.join == nil {
			continue
		}
		bt.SetItem(i)
		if err := callJoin(ctx, c.Req.join, bt, out[i].ap.Events); err != nil {
			return map[int]error{i: fmt.Errorf("sqlsession: append %s: joined write: %w", c.Req.key, err)}, nil
		}
	}
	failed, err := bt.Flush(ctx)
	if err != nil {
		return nil, err
	}
	for i, err := range failed {
		failed[i] = fmt.Errorf("sqlsession: append %s: joined write: %w", calls[i].Req.key, err)
	}
	return failed, nil
}

// callJoin calls join, turning a panic into its error: the batch's other callers go on.
func callJoin(ctx context.Context, join session.JoinFunc, tx session.SQLTx, events []session.Event) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("join panicked: %v", v)
		}
	}()
	return join(ctx, tx, events)
}

// createReq is one caller's Create in a batch: the insert, without the reading of the
// session found in its way, which the caller does on its own.
type createReq struct {
	key   session.Key
	state []byte
	now   time.Time
}

type createCall = sqldialect.Call[createReq, bool]

// createCols is how many host parameters one session takes in the batched insert.
const createCols = 5

// runCreates inserts the sessions of calls in one INSERT ... ON CONFLICT DO NOTHING
// RETURNING statement, one row each (one key at most once: the Batcher sees to it), and tells
// each caller whether its row went in. A failure that is neither retryable nor the end of every
// caller's context is retried one call at a time, as runAppends does.
func (s *Store) runCreates(ctx context.Context, calls []*createCall) {
	calls = sqldialect.LiveCalls(calls)
	if len(calls) == 0 {
		return
	}
	inserted, err := s.createMany(ctx, calls)
	if sqldialect.RetryEachAlone(ctx, calls, err, func(ctx context.Context, c *createCall) (bool, error) { return s.createOne(ctx, c.Req) }) {
		return
	}
	for _, c := range calls {
		c.Finish(inserted[batchKey(c.Req.key)], err)
	}
}

// createMany runs the batched insert and returns the sessions it inserted, by batchKey.
func (s *Store) createMany(ctx context.Context, calls []*createCall) (map[string]bool, error) {
	values := make([]any, 0, len(calls)*createCols)
	for _, c := range calls {
		r := c.Req
		values = append(values, r.key.App, r.key.Conversation, r.key.User, sqldialect.Bytes(r.state), s.d.Time(r.now))
	}
	args, err := s.q.createRows.Args(values)
	if err != nil {
		return nil, err
	}
	inserted := make(map[string]bool, len(calls))
	err = s.d.Write(ctx, s.db, func() error {
		rows, err := s.db.QueryContext(ctx, s.q.createMany(len(calls)), args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var k session.Key
			if err := rows.Scan(&k.App, &k.Conversation); err != nil {
				return err
			}
			inserted[batchKey(k)] = true
		}
		return rows.Err()
	})
	return inserted, err
}

// getReq is one caller's Get in a batch.
type getReq struct {
	key    session.Key
	recent int
}

type getCall = sqldialect.Call[getReq, session.Session]

// runGets reads the sessions of calls in one query (getMany), each caller given its own
// session or its own ErrNotFound or ErrOwnerMismatch. A failure that is neither retryable nor
// the end of every caller's context is retried one call at a time, as runAppends does.
func (s *Store) runGets(ctx context.Context, calls []*getCall) {
	calls = sqldialect.LiveCalls(calls)
	if len(calls) == 0 {
		return
	}
	reqs := make([]getReq, len(calls))
	for i, c := range calls {
		reqs[i] = c.Req
	}
	got, err := s.getMany(ctx, reqs)
	if sqldialect.RetryEachAlone(ctx, calls, err, func(ctx context.Context, c *getCall) (session.Session, error) {
		return s.getOne(ctx, c.Req.key, c.Req.recent)
	}) {
		return
	}
	for i, c := range calls {
		if err != nil {
			c.Finish(session.Session{}, s.fail(ctx, "get (batched)", c.Req.key, err))
			continue
		}
		c.Finish(got[i].session(c.Req.key))
	}
}

// getMany runs the batched get and returns what it read of each request's session, by index,
// with the events the cache held (Options.Cache) merged in and the cache updated.
func (s *Store) getMany(ctx context.Context, reqs []getReq) ([]loaded, error) {
	held := make([]*cachedSession, len(reqs))
	hints := make([]hint, len(reqs))
	for i, r := range reqs {
		held[i] = s.cache.lookup(r.key)
		hints[i] = held[i].hint()
	}
	got, err := s.readMany(ctx, reqs, hints)
	if err != nil || s.cache == nil {
		return got, err
	}
	// A session row that took the id of the one the cache held (SQLite) is read again in full.
	var again []int
	for i, r := range reqs {
		g := &got[i]
		if g.found && hints[i].covers(g.id, g.out.EventCount, r.recent) && !held[i].same(g.id, g.out.CreatedAt) {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		retry := make([]getReq, len(again))
		for j, i := range again {
			retry[j] = reqs[i]
		}
		full, err := s.readMany(ctx, retry, make([]hint, len(retry)))
		if err != nil {
			return nil, err
		}
		for j, i := range again {
			got[i], held[i], hints[i] = full[j], nil, hint{}
		}
	}
	for i, r := range reqs {
		g := &got[i]
		if !g.found || g.owner != r.key.User {
			continue
		}
		events, room := held[i].merged(hints[i], g.id, g.out.EventCount, r.recent, g.out.Events)
		s.cache.served.Add(int64(len(events) - len(g.out.Events)))
		g.out.Events = s.cache.got(r.key, g.id, g.out.CreatedAt, g.out.EventCount, r.recent, events, room)
	}
	return got, nil
}

// readMany runs the batched get's query for reqs, each telling the query the events it holds
// already (hints, by index; the zero hint holds none), and returns what it read of each
// request's session, by index. The query's rows come in no particular order: each session's
// events are sorted by seq here.
func (s *Store) readMany(ctx context.Context, reqs []getReq, hints []hint) ([]loaded, error) {
	values := make([]any, 0, len(reqs)*getCols)
	for i, r := range reqs {
		values = append(values, int64(i), r.key.App, r.key.Conversation, r.key.User, int64(r.recent),
			hints[i].id, hints[i].from, hints[i].count)
	}
	args, err := s.q.getRows.Args(values)
	if err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, s.q.getMany(len(reqs)), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	got := make([]loaded, len(reqs))
	var (
		i int64
		r getRow // every column is scanned into it for each row: one set of destinations
	)
	dest := append([]any{&i}, r.dest()...)
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		if i < 0 || i >= int64(len(got)) {
			return nil, fmt.Errorf("sqlsession: get (batched): a row for call %d of %d", i, len(got))
		}
		got[i].add(r)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for i := range got {
		slices.SortFunc(got[i].out.Events, func(x, y session.Event) int { return cmp.Compare(x.Seq, y.Seq) })
	}
	return got, nil
}
