package sqlattachment_test

import (
	"bytes"
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/attachment"
	"github.com/turnstile-go/turnstile/attachment/attachmenttest"
	"github.com/turnstile-go/turnstile/attachment/sqlattachment"
	"github.com/turnstile-go/turnstile/internal/sqltest"
)

func dialectOf(db sqltest.DB) sqlattachment.Dialect {
	if db.Postgres {
		return sqlattachment.PostgreSQL
	}
	return sqlattachment.SQLite
}

// newStore opens a migrated store with tables of its own on db.
func newStore(t *testing.T, db sqltest.DB, opts sqlattachment.Options) (*sqlattachment.Store, *sql.DB) {
	t.Helper()
	sqlDB := db.Open(t)
	opts.TablePrefix = sqltest.Prefix(t, sqlDB, db.Postgres)
	s, err := sqlattachment.New(sqlDB, dialectOf(db), opts)
	require.NoError(t, err)
	require.NoError(t, s.Migrate(context.Background()))
	return s, sqlDB
}

func TestConformance(t *testing.T) {
	t.Parallel()
	for _, db := range sqltest.DBs {
		t.Run(db.Name, func(t *testing.T) {
			t.Parallel()
			attachmenttest.Run(t, func(t *testing.T) attachment.Store {
				s, _ := newStore(t, db, sqlattachment.Options{})
				return s
			})
		})
	}
}

// A Read of a few KiB reads the chunks of its range only: with the other chunks of a 6 MB
// attachment gone, it still answers.
func TestReadTouchesItsChunksOnly(t *testing.T) {
	t.Parallel()
	for _, db := range sqltest.DBs {
		t.Run(db.Name, func(t *testing.T) {
			t.Parallel()
			s, sqlDB := newStore(t, db, sqlattachment.Options{})
			ctx := context.Background()
			owner := attachment.Owner{App: "a", User: "u"}
			data := bytes.Repeat([]byte("0123456789abcdef"), 6<<20/16)
			ref, err := s.Put(ctx, owner, "big.log", "text/plain", bytes.NewReader(data))
			require.NoError(t, err)
			_, err = sqlDB.ExecContext(ctx, `DELETE FROM `+s.TablePrefix()+`attachment_chunks WHERE n <> 10`)
			require.NoError(t, err)
			offset := int64(10*sqlattachment.ChunkBytes + 100)
			got, err := s.Read(ctx, owner, ref.ID, offset, 8192)
			require.NoError(t, err)
			require.Equal(t, data[offset:offset+8192], got)
			_, err = s.Read(ctx, owner, ref.ID, 0, 10)
			require.ErrorContains(t, err, "the stored chunks hold 0", "a missing chunk is an error, never a short read")
		})
	}
}

func TestMaxSizeAndOptions(t *testing.T) {
	t.Parallel()
	s, sqlDB := newStore(t, sqltest.SQLiteFileDB, sqlattachment.Options{MaxSize: 10})
	owner := attachment.Owner{App: "a", User: "u"}
	_, err := s.Put(context.Background(), owner, "", "", strings.NewReader("0123456789x"))
	require.ErrorIs(t, err, attachment.ErrTooLarge)
	_, err = s.Put(context.Background(), owner, "", "", strings.NewReader("0123456789"))
	require.NoError(t, err)
	_, err = sqlattachment.New(sqlDB, sqlattachment.SQLite, sqlattachment.Options{MaxSize: -1})
	require.Error(t, err)
	_, err = sqlattachment.New(sqlDB, sqlattachment.SQLite, sqlattachment.Options{TablePrefix: "bad-prefix"})
	require.Error(t, err)
	_, err = sqlattachment.New(nil, sqlattachment.SQLite, sqlattachment.Options{})
	require.Error(t, err)
}

// An infrastructure failure is retryable; a store whose tables are missing says so.
func TestErrors(t *testing.T) {
	t.Parallel()
	sqlDB := sqltest.SQLiteFile(t)
	s, err := sqlattachment.New(sqlDB, sqlattachment.SQLite, sqlattachment.Options{})
	require.NoError(t, err)
	owner := attachment.Owner{App: "a", User: "u"}
	_, err = s.Stat(context.Background(), owner, attachment.IDOf(nil))
	require.ErrorContains(t, err, "no such table")
	require.NoError(t, sqlDB.Close())
	_, err = s.Stat(context.Background(), owner, attachment.IDOf(nil))
	require.Error(t, err)
}
