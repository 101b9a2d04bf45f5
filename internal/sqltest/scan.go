package sqltest

import (
	"bytes"
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// FindText scans every text and binary column of every table whose name starts with prefix
// (SQLite: from sqlite_master; PostgreSQL: from information_schema, in the current schema)
// and returns, by "table.column", how many rows hold text in that column (the raw bytes of a
// binary column, the text form of any other: jsonb's included). A table or column the schema
// adds later is scanned too: the deletion tests use it to find every copy of a user's text.
func FindText(t testing.TB, db *sql.DB, postgres bool, prefix, text string) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type column struct{ table, name, typ string }
	var cols []column
	var rows *sql.Rows
	var err error
	if postgres {
		rows, err = db.QueryContext(ctx, `SELECT table_name, column_name, data_type FROM information_schema.columns
			WHERE table_schema = current_schema() AND starts_with(table_name, $1) ORDER BY table_name, ordinal_position`, prefix)
	} else {
		rows, err = db.QueryContext(ctx, `SELECT m.name, p.name, p.type FROM sqlite_master m, pragma_table_info(m.name) p
			WHERE m.type = 'table' AND substr(m.name, 1, length(?1)) = ?1 ORDER BY m.name, p.cid`, prefix)
	}
	require.NoError(t, err)
	for rows.Next() {
		var c column
		require.NoError(t, rows.Scan(&c.table, &c.name, &c.typ))
		cols = append(cols, c)
	}
	require.NoError(t, rows.Err())
	require.NoError(t, rows.Close())
	require.NotEmpty(t, cols, "no table starts with %q", prefix)
	found := map[string]int{}
	want := []byte(text)
	for _, c := range cols {
		typ := strings.ToLower(c.typ)
		if strings.Contains(typ, "int") || strings.Contains(typ, "bool") || strings.Contains(typ, "timestamp") || strings.Contains(typ, "double") {
			continue // no text fits
		}
		expr := `"` + c.name + `"`
		if postgres && typ != "bytea" {
			expr = "CAST(" + expr + " AS TEXT)"
		}
		rows, err := db.QueryContext(ctx, `SELECT `+expr+` FROM "`+c.table+`"`)
		require.NoError(t, err, "%s.%s", c.table, c.name)
		for rows.Next() {
			var v []byte
			require.NoError(t, rows.Scan(&v))
			if bytes.Contains(v, want) {
				found[c.table+"."+c.name]++
			}
		}
		require.NoError(t, rows.Err())
		require.NoError(t, rows.Close())
	}
	return found
}
