package sqlsession_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/internal/sqltest"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/session/sessiontest"
	"github.com/turnstile-go/turnstile/session/sqlsession"
)

func dialectOf(db sqltest.DB) sqlsession.Dialect {
	if db.Postgres {
		return sqlsession.PostgreSQL
	}
	return sqlsession.SQLite
}

// newStore opens a migrated store with tables of its own on db.
func newStore(t testing.TB, db sqltest.DB) (*sqlsession.Store, *sql.DB) {
	t.Helper()
	sqlDB := db.Open(t)
	s, err := sqlsession.New(sqlDB, dialectOf(db), sqlsession.Options{TablePrefix: sqltest.Prefix(t, sqlDB, db.Postgres)})
	require.NoError(t, err)
	require.NoError(t, s.Migrate(context.Background()))
	return s, sqlDB
}

func TestConformance(t *testing.T) {
	t.Parallel()
	for _, db := range sqltest.DBs {
		t.Run(db.Name, func(t *testing.T) {
			t.Parallel()
			sessiontest.Run(t, func(t *testing.T) session.Store {
				s, _ := newStore(t, db)
				return s
			})
		})
	}
}
