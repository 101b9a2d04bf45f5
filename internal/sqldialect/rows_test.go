package sqldialect_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/internal/sqldialect"
	"github.com/turnstile-go/turnstile/internal/sqltest"
)

// TestRowsRoundTrip sends rows of every column type through Rows (arrays on PostgreSQL, a
// VALUES list on SQLite) and reads them back unchanged: the characters PostgreSQL's array
// syntax quotes or escapes, the empty string and the text "NULL", NUL and high bytes, NULLs
// of every type, one row and many. On PostgreSQL both forms of the arrays go through: typed
// arrays in the binary format (the dialect On a pgx database, as the stores use it) and text
// literals (what any other driver sends).
func TestRowsRoundTrip(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 2, 7, 8, 9, 123456000, time.UTC)
	texts := []string{`plain`, ``, `NULL`, `"quoted"`, `back\slash`, `{braces}`, `a,b`, ` spaced `, "new\nline", "ünï €"}
	type row struct {
		s  string
		i  int64
		b  bool
		by []byte
		t  time.Time
	}
	var rows []row
	for i, s := range texts {
		rows = append(rows, row{s: s, i: int64(i) - 3, b: i%2 == 0, by: []byte(s + "\x00\xff\\\"")})
	}
	rows = append(rows, row{s: "nulls", i: 1 << 62, by: nil, t: time.Time{}}, row{s: "time", t: at})
	for _, form := range []struct {
		name   sqldialect.Name
		binary bool
		simple bool // pgx's simple protocol (as behind PgBouncer's transaction pooling): pgx writes the arrays into the SQL text
	}{{sqldialect.PostgreSQL, true, false}, {sqldialect.PostgreSQL, true, true}, {sqldialect.PostgreSQL, false, false}, {sqldialect.SQLite, false, false}} {
		name := form.name
		t.Run(fmt.Sprintf("%s/binary=%t/simple=%t", name, form.binary, form.simple), func(t *testing.T) {
			t.Parallel()
			var db *sql.DB
			switch {
			case form.simple:
				sqltest.Postgres(t) // skips, or fails under CI, when PostgreSQL is unreachable
				dsn := sqltest.PostgresDSN()
				sep := "?"
				if strings.Contains(dsn, "?") {
					sep = "&"
				}
				var err error
				db, err = sql.Open("pgx", dsn+sep+"default_query_exec_mode=simple_protocol")
				require.NoError(t, err)
				t.Cleanup(func() { require.NoError(t, db.Close()) })
			case name == sqldialect.PostgreSQL:
				db = sqltest.Postgres(t)
			default:
				db = sqltest.SQLiteMemory(t)
			}
			d, err := sqldialect.For(name, "")
			require.NoError(t, err)
			if form.binary {
				d = d.On(db)
			}
			r := d.Rows(sqldialect.Col{Name: "s", Type: sqldialect.ColText}, sqldialect.Col{Name: "i", Type: sqldialect.ColInt},
				sqldialect.Col{Name: "b", Type: sqldialect.ColBool}, sqldialect.Col{Name: "by", Type: sqldialect.ColBytes},
				sqldialect.Col{Name: "t", Type: sqldialect.ColTime})
			for _, n := range []int{1, len(rows)} {
				var values []any
				for _, x := range rows[:n] {
					values = append(values, x.s, x.i, x.b, sqldialect.Bytes(x.by), d.Time(x.t))
				}
				args, err := r.Args(values)
				require.NoError(t, err)
				require.Len(t, args, r.Params(n))
				if name == sqldialect.PostgreSQL {
					_, literal := args[0].(string)
					require.Equal(t, !form.binary, literal, "a text literal for the column, or a typed array: %T", args[0])
				}
				q := d.Query("WITH " + r.CTE(n, 1) + " SELECT s, i, b, by, t FROM v")
				rs, err := db.QueryContext(context.Background(), q, args...)
				require.NoError(t, err)
				var got []row
				for rs.Next() {
					var x row
					var b sql.NullBool
					require.NoError(t, rs.Scan(&x.s, &x.i, &b, &x.by, sqldialect.TimeScanner{T: &x.t}))
					x.b = b.Bool
					got = append(got, x)
				}
				require.NoError(t, rs.Err())
				require.NoError(t, rs.Close())
				want := append([]row(nil), rows[:n]...)
				for i := range want {
					if len(want[i].by) == 0 {
						want[i].by = nil
					}
				}
				require.Equal(t, want, got, "n=%d", n)
			}
		})
	}
}

// TestRowsArgsRefusesWrongTypes: a value of the wrong Go type for its column, or a count of
// values that is not a whole number of rows, is an error, not a silently wrong statement.
func TestRowsArgsRefusesWrongTypes(t *testing.T) {
	t.Parallel()
	d, err := sqldialect.For(sqldialect.PostgreSQL, "")
	require.NoError(t, err)
	for _, typ := range []sqldialect.ColType{sqldialect.ColText, sqldialect.ColInt, sqldialect.ColBool, sqldialect.ColBytes, sqldialect.ColTime} {
		r := d.Rows(sqldialect.Col{Name: "x", Type: typ})
		_, err := r.Args([]any{struct{}{}})
		require.ErrorContains(t, err, "column x", "type %d", typ)
	}
	r := d.Rows(sqldialect.Col{Name: "a", Type: sqldialect.ColText}, sqldialect.Col{Name: "b", Type: sqldialect.ColText})
	_, err = r.Args([]any{"one"})
	require.ErrorContains(t, err, "1 values for rows of 2 columns")
}

// TestOnTellsPgxFromOtherDrivers: Dialect.On turns the binary arrays on for PostgreSQL through
// pgx's driver only. Through SQLite, or with no database, it returns the dialect unchanged;
// a PostgreSQL dialect on a database of another driver keeps the text literals (its Args give
// strings).
func TestOnTellsPgxFromOtherDrivers(t *testing.T) {
	t.Parallel()
	pg, err := sqldialect.For(sqldialect.PostgreSQL, "")
	require.NoError(t, err)
	lite, err := sqldialect.For(sqldialect.SQLite, "")
	require.NoError(t, err)
	sqliteDB := sqltest.SQLiteMemory(t)
	require.Same(t, lite, lite.On(sqliteDB))
	require.Same(t, pg, pg.On(nil))
	// A PostgreSQL dialect on a database whose driver is not pgx's (here SQLite's, standing for
	// lib/pq or any other): unchanged.
	require.Same(t, pg, pg.On(sqliteDB))
	col := sqldialect.Col{Name: "x", Type: sqldialect.ColInt}
	args, err := pg.Rows(col).Args([]any{int64(1)})
	require.NoError(t, err)
	require.IsType(t, "", args[0])

	pgxDB, err := sql.Open("pgx", sqltest.PostgresDSN()) // no connection is made: On reads the driver only
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, pgxDB.Close()) })
	on := pg.On(pgxDB)
	require.NotSame(t, pg, on)
	require.Equal(t, pg.Name(), on.Name())
	require.Equal(t, pg.Prefix(), on.Prefix())
	args, err = on.Rows(col).Args([]any{int64(1)})
	require.NoError(t, err)
	_, literal := args[0].(string)
	require.False(t, literal, "pgx gets a typed array: %T", args[0])
}
