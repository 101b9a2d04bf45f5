package sqlsession

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/turnstile-go/turnstile/internal/sqldialect"
	"github.com/turnstile-go/turnstile/session"
)

// maxRecent caps Get's recent, the LIMIT of its query, at a value every database takes.
const maxRecent = 1 << 40

// insertBatch is how many events one INSERT carries: 900 arguments, under SQLite's oldest
// limit of 999 host parameters.
const insertBatch = 100

// createTries bounds Create's loop when the session it collided with is deleted before it
// could be read.
const createTries = 3

// Get implements session.Store: the state and the newest recent events, in one query.
func (s *Store) Get(ctx context.Context, key session.Key, recent int) (session.Session, error) {
	if err := key.Validate(); err != nil {
		return session.Session{}, err
	}
	recent = min(max(recent, 0), maxRecent)
	switch {
	case s.gets != nil:
		return s.gets.Do(ctx, batchKey(key), getReq{key: key, recent: recent})
	case s.cache != nil: // the batched get's statement, for one session: it reads what the cache lacks
		got, err := s.getMany(ctx, []getReq{{key: key, recent: recent}})
		if err != nil {
			return session.Session{}, s.fail(ctx, "get", key, err)
		}
		return got[0].session(key)
	}
	return s.getOne(ctx, key, recent)
}

// getOne is Get in a statement of its own.
func (s *Store) getOne(ctx context.Context, key session.Key, recent int) (session.Session, error) {
	rows, err := s.db.QueryContext(ctx, s.q.get, key.App, key.Conversation, key.User, int64(recent))
	if err != nil {
		return session.Session{}, s.fail(ctx, "get", key, err)
	}
	defer rows.Close()
	var (
		g loaded
		r getRow // every column is scanned into it for each row: one set of destinations
	)
	dest := r.dest()
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return session.Session{}, s.fail(ctx, "get", key, err)
		}
		g.add(r)
	}
	if err := rows.Err(); err != nil {
		return session.Session{}, s.fail(ctx, "get", key, err)
	}
	return g.session(key)
}

// getRow is one row of the get query: the session's own (kind 0) or one of its events.
type getRow struct {
	kind                 int
	user                 sql.NullString
	state                []byte
	version, count       sql.NullInt64
	created, updated     time.Time
	seq                  sql.NullInt64
	id, req, author, txt sql.NullString
	data                 []byte
	at                   time.Time
	sid                  sql.NullInt64 // the session row's id, on its own row
}

// dest returns the scan destinations of the row's columns, in the get query's order.
func (r *getRow) dest() []any {
	return []any{&r.kind, &r.user, &r.state, &r.version, &r.count,
		sqldialect.TimeScanner{T: &r.created}, sqldialect.TimeScanner{T: &r.updated},
		&r.seq, &r.id, &r.req, &r.author, &r.txt, &r.data, sqldialect.TimeScanner{T: &r.at}, &r.sid}
}

// loaded gathers the rows of one session read by the get query.
type loaded struct {
	out   session.Session
	found bool
	owner string
	id    int64 // the session row's id
}

func (g *loaded) add(r getRow) {
	if r.kind == 0 {
		g.found, g.owner, g.id = true, r.user.String, r.sid.Int64
		g.out.State, g.out.Version, g.out.EventCount = nilIfEmpty(r.state), r.version.Int64, r.count.Int64
		g.out.CreatedAt, g.out.UpdatedAt = r.created, r.updated
		return
	}
	g.out.Events = append(g.out.Events, session.Event{
		ID: r.id.String, RequestID: r.req.String, Seq: r.seq.Int64, Author: r.author.String,
		Text: r.txt.String, Data: nilIfEmpty(r.data), Time: r.at,
	})
}

// session returns the session of key that the rows held, or why there is none: ErrNotFound,
// ErrOwnerMismatch.
func (g *loaded) session(key session.Key) (session.Session, error) {
	switch {
	case !g.found:
		return session.Session{}, fmt.Errorf("%w: session %s", session.ErrNotFound, key)
	case g.owner != key.User:
		return session.Session{}, fmt.Errorf("%w: session %s", session.ErrOwnerMismatch, key)
	}
	g.out.Key = key
	return g.out, nil
}

// Create implements session.Store. The insert is one statement that does nothing on a
// conflict (INSERT ... ON CONFLICT DO NOTHING), so the loser of a create race waits for the
// winner's row and then gets ErrExists, or ErrOwnerMismatch when the row is another user's.
// With Options.Batch on, the statement holds the inserts of concurrent callers, one row each,
// and a cancelled caller is answered as by Append.
func (s *Store) Create(ctx context.Context, key session.Key, state json.RawMessage) (session.Session, error) {
	if err := key.Validate(); err != nil {
		return session.Session{}, err
	}
	now := time.Now()
	for range createTries {
		var (
			inserted bool
			err      error
		)
		if s.creates != nil {
			inserted, err = s.creates.Do(ctx, batchKey(key), createReq{key: key, state: state, now: now})
		} else {
			inserted, err = s.createOne(ctx, createReq{key: key, state: state, now: now})
		}
		if err != nil {
			return session.Session{}, s.fail(ctx, "create", key, err)
		}
		if inserted {
			at := sqldialect.StoredTime(now)
			return session.Session{Key: key, State: nilIfEmpty(bytes.Clone(state)), CreatedAt: at, UpdatedAt: at}, nil
		}
		owner, _, found, err := s.lookup(ctx, s.db, key)
		if err != nil {
			return session.Session{}, s.fail(ctx, "create", key, err)
		}
		if !found {
			continue // deleted since the insert saw it: try again
		}
		if owner != key.User {
			return session.Session{}, fmt.Errorf("%w: session %s", session.ErrOwnerMismatch, key)
		}
		return session.Session{}, fmt.Errorf("%w: session %s", session.ErrExists, key)
	}
	return session.Session{}, fmt.Errorf("%w: session %s (created and deleted under us %d times)", session.ErrExists, key, createTries)
}

// createOne inserts r's session in a statement of its own, unless the key's session is there;
// it reports whether it inserted it.
func (s *Store) createOne(ctx context.Context, r createReq) (bool, error) {
	err := s.d.Write(ctx, s.db, func() error {
		var id int64
		return s.db.QueryRowContext(ctx, s.q.create, r.key.App, r.key.Conversation, r.key.User,
			sqldialect.Bytes(r.state), s.d.Time(r.now)).Scan(&id)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// Append implements session.Store, in one write transaction: bump the version where it is
// the expected one (the conditional UPDATE is the optimistic lock) and, in the same
// statement, learn whether the request's turn is stored (a duplicate reads it and rolls
// back), then insert the events numbered after the old count. With Options.Batch on, the
// transaction holds the appends of concurrent callers (see runAppends). A caller whose ctx
// ends before the commit of its batch is sent gets ctx.Err() and its turn is not stored (the
// batch leaves it out, rolling back and starting again when it had written it); once the
// commit is sent, the caller gets the commit's outcome, as an unbatched Append would.
func (s *Store) Append(ctx context.Context, key session.Key, expectedVersion int64, t session.Turn) (session.Appended, error) {
	return s.append(ctx, key, expectedVersion, t, nil)
}

// AppendTx implements session.TxAppender: Append's transaction, with join run after the
// events are inserted and before the commit.
func (s *Store) AppendTx(ctx context.Context, key session.Key, expectedVersion int64, t session.Turn, join session.JoinFunc) (session.Appended, error) {
	if join == nil {
		return session.Appended{}, fmt.Errorf("%w: nil join", session.ErrInvalid)
	}
	return s.append(ctx, key, expectedVersion, t, join)
}

// TxDB implements session.TxAppender: the *sql.DB given to New.
func (s *Store) TxDB() *sql.DB { return s.db }

// append is Append, and AppendTx when join is not nil.
func (s *Store) append(ctx context.Context, key session.Key, expectedVersion int64, t session.Turn, join session.JoinFunc) (session.Appended, error) {
	if err := key.Validate(); err != nil {
		return session.Appended{}, err
	}
	if err := t.Validate(); err != nil {
		return session.Appended{}, err
	}
	if s.appends != nil {
		return s.appends.Do(ctx, batchKey(key), appendReq{key: key, expected: expectedVersion, turn: t, join: join})
	}
	return s.appendOne(ctx, key, expectedVersion, t, join)
}

// appendOne is append in a transaction of its own.
func (s *Store) appendOne(ctx context.Context, key session.Key, expectedVersion int64, t session.Turn, join session.JoinFunc) (session.Appended, error) {
	now := time.Now()
	tx, err := s.d.BeginWrite(ctx, s.db)
	if err != nil {
		return session.Appended{}, s.fail(ctx, "append", key, err)
	}
	defer tx.Rollback()

	n := int64(len(t.Events))
	var (
		id, version, count int64
		stored             bool
	)
	err = tx.QueryRowContext(ctx, s.q.bump, key.App, key.Conversation, key.User, expectedVersion,
		n, t.State != nil, sqldialect.Bytes(t.State), s.d.Time(now), t.RequestID).Scan(&id, &version, &count, &stored)
	if errors.Is(err, sql.ErrNoRows) {
		return session.Appended{}, s.whyNot(ctx, tx, key, expectedVersion)
	}
	if err != nil {
		return session.Appended{}, s.fail(ctx, "append", key, err)
	}
	s.hook(ctx, "bumped", tx)

	if stored { // a duplicate, the rare case: read the stored turn, then undo the bump
		prior, err := s.readTurn(ctx, tx, id, t.RequestID)
		if err == nil {
			err = tx.Rollback()
		}
		if err != nil {
			return session.Appended{}, s.fail(ctx, "append", key, err)
		}
		return session.Appended{Version: expectedVersion, Events: prior, Duplicate: true}, nil
	}

	events := make([]session.Event, n)
	for i, e := range t.Events {
		e.RequestID, e.Seq = t.RequestID, count-n+int64(i)+1
		e.Data, e.Time = nilIfEmpty(bytes.Clone(e.Data)), sqldialect.StoredTime(e.Time)
		events[i] = e
	}
	for i := 0; i < len(events); i += insertBatch {
		if err := s.insertEvents(ctx, tx, id, events[i:min(i+insertBatch, len(events))], i); err != nil {
			return session.Appended{}, s.fail(ctx, "append", key, err)
		}
	}
	if join != nil {
		if err := join(ctx, tx, events); err != nil {
			return session.Appended{}, fmt.Errorf("sqlsession: append %s: joined write: %w", key, err)
		}
	}
	s.hook(ctx, "inserted", tx)
	if err := tx.Commit(); err != nil {
		return session.Appended{}, s.fail(ctx, "append: commit", key, err)
	}
	s.cache.appended(key, id, count, events)
	return session.Appended{Version: version, Events: events}, nil
}

func (s *Store) hook(ctx context.Context, stage string, tx sqldialect.Querier) {
	if s.appendHook != nil {
		s.appendHook(ctx, stage, tx)
	}
}

func (s *Store) insertEvents(ctx context.Context, tx sqldialect.Querier, sessionID int64, events []session.Event, firstIdx int) error {
	args := make([]any, 0, len(events)*eventCols)
	for i, e := range events {
		args = append(args, sessionID, e.Seq, e.RequestID, firstIdx+i, e.ID, e.Author, e.Text,
			sqldialect.Bytes(e.Data), s.d.Time(e.Time))
	}
	_, err := tx.ExecContext(ctx, s.q.insertEvents(len(events)), args...)
	return err
}

// whyNot tells why Append's conditional UPDATE matched no row, inside its transaction.
func (s *Store) whyNot(ctx context.Context, q sqldialect.Querier, key session.Key, expected int64) error {
	owner, version, found, err := s.lookup(ctx, q, key)
	switch {
	case err != nil:
		return s.fail(ctx, "append", key, err)
	case !found:
		return fmt.Errorf("%w: session %s", session.ErrNotFound, key)
	case owner != key.User:
		return fmt.Errorf("%w: session %s", session.ErrOwnerMismatch, key)
	}
	return fmt.Errorf("%w: session %s is at version %d, not %d", session.ErrConflict, key, version, expected)
}

// lookup reads the owner and version of key's session.
func (s *Store) lookup(ctx context.Context, q sqldialect.Querier, key session.Key) (owner string, version int64, found bool, err error) {
	err = q.QueryRowContext(ctx, s.q.owner, key.App, key.Conversation).Scan(&owner, &version)
	if errors.Is(err, sql.ErrNoRows) {
		return "", 0, false, nil
	}
	return owner, version, err == nil, err
}

// readTurn returns the stored events of one request in a session, in order.
func (s *Store) readTurn(ctx context.Context, q sqldialect.Querier, sessionID int64, requestID string) ([]session.Event, error) {
	rows, err := q.QueryContext(ctx, s.q.turn, sessionID, requestID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []session.Event
	for rows.Next() {
		var (
			e    session.Event
			data []byte
		)
		if err := rows.Scan(&e.Seq, &e.ID, &e.RequestID, &e.Author, &e.Text, &data, sqldialect.TimeScanner{T: &e.Time}); err != nil {
			return nil, err
		}
		e.Data = nilIfEmpty(data)
		out = append(out, e)
	}
	return out, rows.Err()
}

// FindTurn implements session.Store: one query by the (session_id, request_id, idx) key.
func (s *Store) FindTurn(ctx context.Context, key session.Key, requestID string) ([]session.Event, error) {
	if err := key.Validate(); err != nil {
		return nil, err
	}
	if requestID == "" {
		return nil, fmt.Errorf("%w: empty request id", session.ErrInvalid)
	}
	rows, err := s.db.QueryContext(ctx, s.q.findTurn, key.App, key.Conversation, key.User, requestID)
	if err != nil {
		return nil, s.fail(ctx, "find turn", key, err)
	}
	defer rows.Close()
	var (
		found  bool
		owner  string
		events []session.Event
	)
	for rows.Next() {
		var (
			seq                  sql.NullInt64
			id, req, author, txt sql.NullString
			data                 []byte
			at                   time.Time
		)
		if err := rows.Scan(&owner, &seq, &id, &req, &author, &txt, &data, sqldialect.TimeScanner{T: &at}); err != nil {
			return nil, s.fail(ctx, "find turn", key, err)
		}
		found = true
		if seq.Valid {
			events = append(events, session.Event{ID: id.String, RequestID: req.String, Seq: seq.Int64,
				Author: author.String, Text: txt.String, Data: nilIfEmpty(data), Time: at})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail(ctx, "find turn", key, err)
	}
	switch {
	case !found:
		return nil, fmt.Errorf("%w: session %s", session.ErrNotFound, key)
	case owner != key.User:
		return nil, fmt.Errorf("%w: session %s", session.ErrOwnerMismatch, key)
	case len(events) == 0:
		return nil, fmt.Errorf("%w: no turn of request %s in session %s", session.ErrNotFound, requestID, key)
	}
	return events, nil
}

// Delete implements session.Store: the session row and its events, in one transaction.
func (s *Store) Delete(ctx context.Context, key session.Key) error {
	if err := key.Validate(); err != nil {
		return err
	}
	tx, err := s.d.BeginWrite(ctx, s.db)
	if err != nil {
		return s.fail(ctx, "delete", key, err)
	}
	defer tx.Rollback()
	var id int64
	err = tx.QueryRowContext(ctx, s.q.deleteSession, key.App, key.Conversation, key.User).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		owner, _, found, err := s.lookup(ctx, tx, key)
		switch {
		case err != nil:
			return s.fail(ctx, "delete", key, err)
		case found && owner != key.User:
			return fmt.Errorf("%w: session %s", session.ErrOwnerMismatch, key)
		}
		return fmt.Errorf("%w: session %s", session.ErrNotFound, key)
	}
	if err != nil {
		return s.fail(ctx, "delete", key, err)
	}
	// ON DELETE CASCADE does this where foreign keys are enforced; SQLite enforces them only
	// with PRAGMA foreign_keys=ON, so delete the events explicitly.
	if _, err := tx.ExecContext(ctx, s.q.deleteEvents, id); err != nil {
		return s.fail(ctx, "delete", key, err)
	}
	if err := tx.Commit(); err != nil {
		return s.fail(ctx, "delete: commit", key, err)
	}
	s.cache.forget(key)
	return nil
}

// fail wraps a database error with the operation and key, classifying infrastructure
// failures as retryable.
func (s *Store) fail(ctx context.Context, op string, key session.Key, err error) error {
	return fmt.Errorf("sqlsession: %s %s: %w", op, key, sqldialect.ClassifyContext(ctx, err))
}

func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// retentionBatch is how many sessions one DeleteIdle transaction deletes at most, so that a
// large expiry holds no long lock.
const retentionBatch = 500

// DeleteUser implements session.Retention: the user's sessions of app and their events, in
// one transaction.
func (s *Store) DeleteUser(ctx context.Context, app, user string) (int64, error) {
	n, err := s.DeleteUserCounted(ctx, app, user, false)
	return n.Sessions, err
}

var _ session.UserEraser = (*Store)(nil)

// DeleteUserCounted implements session.UserEraser, in one transaction; a dry run runs the same
// deletes and rolls them back.
func (s *Store) DeleteUserCounted(ctx context.Context, app, user string, dryRun bool) (session.UserCounts, error) {
	if app == "" || user == "" {
		return session.UserCounts{}, fmt.Errorf("%w: DeleteUser needs an app and a user", session.ErrInvalid)
	}
	n, err := s.deleteReturning(ctx, dryRun, s.q.countUserEvents, s.q.deleteUser, app, user)
	if !dryRun {
		s.cache.forgetUser(app, user) // even on an error: the delete may have committed
	}
	if err != nil {
		return session.UserCounts{}, fmt.Errorf("sqlsession: delete user %s/%s: %w", app, user, sqldialect.ClassifyContext(ctx, err))
	}
	return n, nil
}

// DeleteIdle implements session.Retention, in transactions of at most 500 sessions that
// commit on their own; on an error the count so far comes back with it.
func (s *Store) DeleteIdle(ctx context.Context, app string, before time.Time) (int64, error) {
	if app == "" {
		return 0, fmt.Errorf("%w: DeleteIdle needs an app", session.ErrInvalid)
	}
	var total int64
	for {
		d, err := s.deleteReturning(ctx, false, "", s.q.deleteIdle, app, s.d.Time(before), retentionBatch)
		n := d.Sessions
		if n > 0 || err != nil {
			// The rows deleted are not known by key; what the cache held of them would never
			// be read again (a session created again is another row), but it is dropped.
			s.cache.purge()
		}
		total += n
		if err != nil {
			return total, fmt.Errorf("sqlsession: delete idle sessions of %s: %w", app, sqldialect.ClassifyContext(ctx, err))
		}
		if n < retentionBatch {
			return total, nil
		}
	}
}

// deleteReturning runs a DELETE ... RETURNING id of sessions and deletes their events, in one
// write transaction (rolled back in a dry run), and returns how many sessions it deleted and,
// when countEvents (a SELECT COUNT(*) of their events, of the same arguments) is set, how many
// events: counted before the delete, since PostgreSQL's ON DELETE CASCADE deletes them with
// their session.
func (s *Store) deleteReturning(ctx context.Context, dryRun bool, countEvents, query string, args ...any) (session.UserCounts, error) {
	var n session.UserCounts
	tx, err := s.d.BeginWrite(ctx, s.db)
	if err != nil {
		return n, err
	}
	defer tx.Rollback()
	if countEvents != "" {
		if err := tx.QueryRowContext(ctx, countEvents, args...).Scan(&n.Events); err != nil {
			return n, err
		}
	}
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return n, err
	}
	var ids []any
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return n, err
		}
		ids = append(ids, id)
	}
	if err := rows.Close(); err != nil {
		return n, err
	}
	if err := rows.Err(); err != nil {
		return n, err
	}
	// ON DELETE CASCADE does this where foreign keys are enforced; SQLite enforces them only
	// with PRAGMA foreign_keys=ON. Chunks stay under SQLite's and PostgreSQL's parameter limits.
	for chunk := range slices.Chunk(ids, 500) {
		if _, err := tx.ExecContext(ctx, s.q.deleteEventsOf(len(chunk)), chunk...); err != nil {
			return n, err
		}
	}
	n.Sessions = int64(len(ids))
	if dryRun {
		return n, tx.Rollback()
	}
	if err := tx.Commit(); err != nil {
		return session.UserCounts{}, err
	}
	return n, nil
}
