// Package sqlattachment is an attachment.Store on a SQL database: PostgreSQL (through
// github.com/jackc/pgx/v5/stdlib or another database/sql driver) or SQLite (through
// modernc.org/sqlite, pure Go). One code path serves both; what differs lives in
// internal/sqldialect. It can share the *sql.DB (and the table prefix) of the
// session/sqlsession and inbox/sqlinbox stores.
//
// # Setup
//
//	db, err := sql.Open("pgx", "postgres://...")          // or sql.Open("sqlite", dsn)
//	store, err := sqlattachment.New(db, sqlattachment.PostgreSQL, sqlattachment.Options{})
//	err = store.Migrate(ctx)                                // once at start-up; safe to race
//
// The store leaves db's connection pool as it is: on a *sql.DB of the session store it uses
// the pool that store sized. For SQLite, give the DSN a busy timeout and WAL as the
// session/sqlsession package doc shows.
//
// # Schema
//
// Migrate creates two tables (names start with Options.TablePrefix, "turnstile_" by default)
// and records its version in PREFIX+"schema_version" (component "attachments"):
//
//   - attachments: one row per (app, user_id, digest), unique, with the size, the name and
//     media type, the size of its chunks, the time of its last Put (put_at, indexed with the
//     app for DeleteIdle) and a generated id (rid).
//   - attachment_chunks: the content in chunks of ChunkBytes, keyed by (rid, n), so that a
//     Read of a few KiB reads one or two rows, whatever the attachment's size.
//
// Put reads the content into memory (at most Options.MaxSize bytes) before its write
// transaction, so that a slow reader never holds a database lock, then writes the row and its
// chunks in one transaction: a Put that fails stores nothing. Put, Delete and each batch of
// DeleteUser and DeleteIdle are one transaction each, so an attachment is stored, refreshed or
// deleted whole.
//
// # Errors
//
// Contract errors are the attachment package's sentinels. Infrastructure failures (a lost or
// refused connection, a PostgreSQL serialization failure or deadlock, a busy SQLite database)
// come back wrapped in an error that satisfies interface{ Retryable() bool }, so the caller
// can retry them.
package sqlattachment

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/turnstile-go/turnstile/attachment"
	"github.com/turnstile-go/turnstile/internal/sqldialect"
)

// Dialect names the database behind the *sql.DB: PostgreSQL or SQLite.
type Dialect = sqldialect.Name

const (
	// PostgreSQL: any database/sql driver whose errors expose SQLState() string; turnstile
	// tests github.com/jackc/pgx/v5/stdlib (driver name "pgx"). PostgreSQL 12 or later.
	PostgreSQL = sqldialect.PostgreSQL
	// SQLite: modernc.org/sqlite (driver name "sqlite"), SQLite 3.35 or later (RETURNING).
	SQLite = sqldialect.SQLite
)

// DefaultTablePrefix is the table prefix used when Options.TablePrefix is empty.
const DefaultTablePrefix = sqldialect.DefaultPrefix

// ChunkBytes is the size of the chunks Put stores the content in: 256 KiB (the last chunk of
// an attachment may be shorter).
const ChunkBytes = 256 << 10

// Options configures a Store. The zero value is ready to use.
type Options struct {
	// TablePrefix starts the name of every table and index the store uses, as
	// sqlsession.Options.TablePrefix does; give the same prefix as the session store's to keep
	// one version table. Default DefaultTablePrefix.
	TablePrefix string
	// MaxSize bounds the bytes of one attachment; 0 means attachment.DefaultMaxSize. Put holds
	// up to this much in memory.
	MaxSize int64
}

// Store is an attachment.Store on PostgreSQL or SQLite. It is safe for concurrent use by many
// goroutines and processes; build one with New and run Migrate before the first call.
type Store struct {
	db   *sql.DB
	d    *sqldialect.Dialect
	opts Options
	now  func() time.Time
	q    queries
}

var _ attachment.Retention = (*Store)(nil)

// component names the attachment store's schema in the version table.
const component = "attachments"

// migrations is the store's schema, step by step. A released step never changes.
var migrations = []sqldialect.Migration{{
	Version: 1,
	Statements: []string{
		`CREATE TABLE {p}attachments (
			rid {serial},
			app TEXT NOT NULL,
			user_id TEXT NOT NULL,
			digest TEXT NOT NULL,
			size BIGINT NOT NULL,
			chunk_size INTEGER NOT NULL,
			name TEXT NOT NULL,
			media_type TEXT NOT NULL,
			put_at {time} NOT NULL,
			CONSTRAINT {p}attachments_owner_digest UNIQUE (app, user_id, digest)
		)`,
		`CREATE INDEX {p}attachments_idle ON {p}attachments (app, put_at)`,
		// Deleting an attachment deletes its chunks in the same transaction (the cascade where
		// foreign keys are enforced, an explicit DELETE everywhere).
		`CREATE TABLE {p}attachment_chunks (
			rid BIGINT NOT NULL REFERENCES {p}attachments (rid) ON DELETE CASCADE,
			n INTEGER NOT NULL,
			data {bytes} NOT NULL,
			PRIMARY KEY (rid, n)
		)`,
	},
}}

// queries holds the store's statements, rewritten for the dialect once in New.
type queries struct {
	insert, refresh, insertChunk, stat, read string
}

// deleteBatch is how many attachments one transaction of DeleteUser or DeleteIdle deletes.
const deleteBatch = 500

// New returns a Store on db. It does not touch the database; call Migrate for the schema.
// Errors: a nil db, an unknown dialect, an invalid Options.TablePrefix, a negative
// Options.MaxSize.
func New(db *sql.DB, dialect Dialect, opts Options) (*Store, error) {
	if db == nil {
		return nil, errors.New("sqlattachment: nil *sql.DB")
	}
	d, err := sqldialect.For(dialect, opts.TablePrefix)
	if err != nil {
		return nil, fmt.Errorf("sqlattachment: %w", err)
	}
	if opts.MaxSize < 0 {
		return nil, fmt.Errorf("sqlattachment: Options.MaxSize: %d is negative", opts.MaxSize)
	}
	s := &Store{db: db, d: d, opts: opts, now: time.Now}
	s.q = queries{
		insert: d.Query(`INSERT INTO {p}attachments (app, user_id, digest, size, chunk_size, name, media_type, put_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
			ON CONFLICT (app, user_id, digest) DO NOTHING RETURNING rid`),
		refresh: d.Query(`UPDATE {p}attachments SET put_at = $4 WHERE app = $1 AND user_id = $2 AND digest = $3
			RETURNING size, name, media_type`),
		insertChunk: d.Query(`INSERT INTO {p}attachment_chunks (rid, n, data) VALUES ($1, $2, $3)`),
		stat:        d.Query(`SELECT size, name, media_type FROM {p}attachments WHERE app = $1 AND user_id = $2 AND digest = $3`),
		// One statement, so one snapshot: the row and its chunks in [$4, $5], or the row alone.
		read: d.Query(`SELECT a.size, a.chunk_size, c.n, c.data FROM {p}attachments a
			LEFT JOIN {p}attachment_chunks c ON c.rid = a.rid AND c.n BETWEEN $4 AND $5
			WHERE a.app = $1 AND a.user_id = $2 AND a.digest = $3 ORDER BY c.n`),
	}
	return s, nil
}

// Migrate creates or upgrades the store's tables to this code's schema version. It is
// idempotent and safe to run from several processes at once (see the Schema section of the
// package doc). Errors: the database's, wrapped.
func (s *Store) Migrate(ctx context.Context) error {
	if err := s.d.Migrate(ctx, s.db, component, migrations); err != nil {
		return fmt.Errorf("sqlattachment: %w", err)
	}
	return nil
}

// TablePrefix returns the table prefix in use.
func (s *Store) TablePrefix() string { return s.d.Prefix() }

// fail wraps a database error of op on id, retryable when it is an infrastructure failure.
func (s *Store) fail(ctx context.Context, op, id string, err error) error {
	return fmt.Errorf("sqlattachment: %s %s: %w", op, id, sqldialect.ClassifyContext(ctx, err))
}

// maxTries bounds the transactions of one Put when deletions keep removing what it finds.
const maxTries = 10

// errGone is put's error when the attachment it found was deleted before it could refresh it.
var errGone = errors.New("sqlattachment: attachment deleted during Put")

// Put implements attachment.Store.
func (s *Store) Put(ctx context.Context, owner attachment.Owner, name, mediaType string, r io.Reader) (attachment.Ref, error) {
	if err := attachment.CheckPut(ctx, owner, name, mediaType); err != nil {
		return attachment.Ref{}, err
	}
	var chunks [][]byte
	id, size, err := attachment.ReadChunks(ctx, r, ChunkBytes, s.opts.MaxSize, func(c []byte) error {
		chunks = append(chunks, bytes.Clone(c))
		return nil
	})
	if err != nil {
		return attachment.Ref{}, err
	}
	ref := attachment.Ref{ID: id, Size: size, Name: name, MediaType: mediaType}
	for try := 1; ; try++ {
		got, err := s.put(ctx, owner, ref, chunks)
		if errors.Is(err, errGone) && try < maxTries {
			continue
		}
		return got, err
	}
}

// put stores ref's row and chunks in one transaction, or refreshes the stored row's time and
// returns its Ref.
func (s *Store) put(ctx context.Context, owner attachment.Owner, ref attachment.Ref, chunks [][]byte) (attachment.Ref, error) {
	tx, err := s.d.BeginWrite(ctx, s.db)
	if err != nil {
		return attachment.Ref{}, s.fail(ctx, "put", ref.ID, err)
	}
	defer tx.Rollback()
	now := s.d.Time(s.now())
	var rid int64
	err = tx.QueryRowContext(ctx, s.q.insert, owner.App, owner.User, ref.ID, ref.Size, ChunkBytes, ref.Name, ref.MediaType, now).Scan(&rid)
	switch {
	case errors.Is(err, sql.ErrNoRows): // stored already: this Put refreshes it
		stored := attachment.Ref{ID: ref.ID}
		err := tx.QueryRowContext(ctx, s.q.refresh, owner.App, owner.User, ref.ID, now).Scan(&stored.Size, &stored.Name, &stored.MediaType)
		if errors.Is(err, sql.ErrNoRows) {
			return attachment.Ref{}, errGone
		}
		if err != nil {
			return attachment.Ref{}, s.fail(ctx, "put", ref.ID, err)
		}
		ref = stored
	case err != nil:
		return attachment.Ref{}, s.fail(ctx, "put", ref.ID, err)
	default:
		for n, c := range chunks {
			if _, err := tx.ExecContext(ctx, s.q.insertChunk, rid, n, c); err != nil {
				return attachment.Ref{}, s.fail(ctx, "put", ref.ID, err)
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return attachment.Ref{}, s.fail(ctx, "put: commit", ref.ID, err)
	}
	return ref, nil
}

// Stat implements attachment.Store.
func (s *Store) Stat(ctx context.Context, owner attachment.Owner, id string) (attachment.Ref, error) {
	if _, err := attachment.CheckCall(ctx, owner, id); err != nil {
		return attachment.Ref{}, err
	}
	ref := attachment.Ref{ID: id}
	err := s.db.QueryRowContext(ctx, s.q.stat, owner.App, owner.User, id).Scan(&ref.Size, &ref.Name, &ref.MediaType)
	if errors.Is(err, sql.ErrNoRows) {
		return attachment.Ref{}, fmt.Errorf("%w: attachment %s of %s", attachment.ErrNotFound, id, owner)
	}
	if err != nil {
		return attachment.Ref{}, s.fail(ctx, "stat", id, err)
	}
	return ref, nil
}

// Read implements attachment.Store.
func (s *Store) Read(ctx context.Context, owner attachment.Owner, id string, offset, length int64) ([]byte, error) {
	if _, err := attachment.CheckCall(ctx, owner, id); err != nil {
		return nil, err
	}
	if _, err := attachment.CheckRange(math.MaxInt64, offset, length); err != nil {
		return nil, fmt.Errorf("attachment %s: %w", id, err)
	}
	chunkSize := int64(ChunkBytes)
	for {
		out, stored, err := s.read(ctx, owner, id, offset, length, chunkSize)
		if err == nil && stored != chunkSize {
			chunkSize = stored // a row written in chunks of another size: read again with its size
			continue
		}
		return out, err
	}
}

// read reads [offset, offset+length) of the attachment from the chunks it would be in if they
// were of chunkSize bytes, and returns the bytes and the row's own chunk size; when that is
// not chunkSize, the bytes are not read.
func (s *Store) read(ctx context.Context, owner attachment.Owner, id string, offset, length, chunkSize int64) ([]byte, int64, error) {
	first, last := offset/chunkSize, (offset+max(length, 1)-1)/chunkSize
	rows, err := s.db.QueryContext(ctx, s.q.read, owner.App, owner.User, id, first, last)
	if err != nil {
		return nil, 0, s.fail(ctx, "read", id, err)
	}
	defer rows.Close()
	var (
		out       []byte
		found     bool
		size, end int64
		stored    int64
	)
	for rows.Next() {
		var (
			n    sql.NullInt64
			data []byte
		)
		if err := rows.Scan(&size, &stored, &n, &data); err != nil {
			return nil, 0, s.fail(ctx, "read", id, err)
		}
		if !found {
			found = true
			if stored <= 0 {
				return nil, 0, fmt.Errorf("sqlattachment: read %s: the stored chunk size is %d", id, stored)
			}
			if stored != chunkSize {
				return nil, stored, nil
			}
			if end, err = attachment.CheckRange(size, offset, length); err != nil {
				return nil, 0, fmt.Errorf("attachment %s: %w", id, err)
			}
			out = make([]byte, 0, end-offset)
		}
		if !n.Valid {
			continue // no chunk in the range: an empty read
		}
		if n.Int64 != first {
			break // a chunk missing: found short below
		}
		first++
		start := n.Int64 * chunkSize // the chunk's first byte in the attachment
		lo, hi := max(offset-start, 0), min(end-start, int64(len(data)))
		if lo < hi {
			out = append(out, data[lo:hi]...)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, 0, s.fail(ctx, "read", id, err)
	}
	switch {
	case !found:
		return nil, chunkSize, fmt.Errorf("%w: attachment %s of %s", attachment.ErrNotFound, id, owner)
	case int64(len(out)) != end-offset:
		return nil, 0, fmt.Errorf("sqlattachment: read %s: %d bytes at %d: the stored chunks hold %d", id, end-offset, offset, len(out))
	}
	return out, chunkSize, nil
}

// Delete implements attachment.Store.
func (s *Store) Delete(ctx context.Context, owner attachment.Owner, id string) error {
	if _, err := attachment.CheckCall(ctx, owner, id); err != nil {
		return err
	}
	n, err := s.deleteWhere(ctx, "delete", id, `app = $1 AND user_id = $2 AND digest = $3`, owner.App, owner.User, id)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("%w: attachment %s of %s", attachment.ErrNotFound, id, owner)
	}
	return nil
}

// DeleteUser implements attachment.Retention.
func (s *Store) DeleteUser(ctx context.Context, app, user string) (int64, error) {
	if app == "" || user == "" {
		return 0, fmt.Errorf("%w: DeleteUser needs an app and a user", attachment.ErrInvalid)
	}
	return s.deleteAll(ctx, "delete user", app+"/"+user, `app = $1 AND user_id = $2`, app, user)
}

var _ attachment.UserCounter = (*Store)(nil)

// CountUser implements attachment.UserCounter.
func (s *Store) CountUser(ctx context.Context, app, user string) (int64, error) {
	if app == "" || user == "" {
		return 0, fmt.Errorf("%w: CountUser needs an app and a user", attachment.ErrInvalid)
	}
	var n int64
	err := s.db.QueryRowContext(ctx, s.d.Query(`SELECT COUNT(*) FROM {p}attachments WHERE app = $1 AND user_id = $2`), app, user).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("sqlattachment: count user %s/%s: %w", app, user, sqldialect.ClassifyContext(ctx, err))
	}
	return n, nil
}

// DeleteIdle implements attachment.Retention.
func (s *Store) DeleteIdle(ctx context.Context, app string, before time.Time) (int64, error) {
	if app == "" {
		return 0, fmt.Errorf("%w: DeleteIdle needs an app", attachment.ErrInvalid)
	}
	return s.deleteAll(ctx, "delete idle", app, `app = $1 AND put_at < $2`, app, s.d.Time(before))
}

// deleteAll deletes the attachments that cond selects, deleteBatch to a transaction, and
// returns how many it deleted.
func (s *Store) deleteAll(ctx context.Context, op, what, cond string, args ...any) (int64, error) {
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		n, err := s.deleteWhere(ctx, op, what, cond+` AND rid IN (SELECT rid FROM {p}attachments WHERE `+cond+
			` LIMIT `+strconv.Itoa(deleteBatch)+`)`, args...)
		total += n
		if err != nil || n < deleteBatch {
			return total, err
		}
	}
}

// deleteWhere deletes, in one transaction, the attachments that cond selects and their chunks,
// and returns how many it deleted. cond is checked again on each row as it is deleted (on
// PostgreSQL a row a concurrent Put refreshed is re-read), so an attachment put again while
// this runs is deleted whole or kept whole.
func (s *Store) deleteWhere(ctx context.Context, op, what, cond string, args ...any) (int64, error) {
	tx, err := s.d.BeginWrite(ctx, s.db)
	if err != nil {
		return 0, s.fail(ctx, op, what, err)
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, s.d.Query(`DELETE FROM {p}attachments WHERE `+cond+` RETURNING rid`), args...)
	if err != nil {
		return 0, s.fail(ctx, op, what, err)
	}
	var rids []any
	for rows.Next() {
		var rid int64
		if err := rows.Scan(&rid); err != nil {
			rows.Close()
			return 0, s.fail(ctx, op, what, err)
		}
		rids = append(rids, rid)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, s.fail(ctx, op, what, err)
	}
	if len(rids) == 0 {
		return 0, nil
	}
	marks := make([]string, len(rids))
	for i := range rids {
		marks[i] = "$" + strconv.Itoa(i+1)
	}
	if _, err := tx.ExecContext(ctx, s.d.Query(`DELETE FROM {p}attachment_chunks WHERE rid IN (`+strings.Join(marks, ", ")+`)`), rids...); err != nil {
		return 0, s.fail(ctx, op, what, err)
	}
	if err := tx.Commit(); err != nil {
		return 0, s.fail(ctx, op+": commit", what, err)
	}
	return int64(len(rids)), nil
}
