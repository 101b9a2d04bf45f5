package sqldialect

import (
	"context"
	"database/sql"
	"fmt"
)

// Location names where table lives, the same way whichever *sql.DB reaches it, so that two
// stores can be found to share tables (a replay into a sandbox refuses to write to the
// production's): for PostgreSQL "postgres:SYSTEM_ID/DATABASE/SCHEMA.TABLE", where SYSTEM_ID is
// the cluster's system identifier (pg_control_system(), PostgreSQL 9.6 and later) or, when
// the role may not read it, the server's address and port; for SQLite
// "sqlite:PATH/TABLE" with the main database's file path (PRAGMA database_list), or "" for an
// in-memory database, which only the same *sql.DB reaches. table is the name without the
// prefix ("sessions", "inbox"). Errors: the database's.
func (d *Dialect) Location(ctx context.Context, db *sql.DB, table string) (string, error) {
	full := d.Table(table)
	switch d.name {
	case PostgreSQL:
		var id, dbName, schema string
		err := db.QueryRowContext(ctx, `SELECT CAST(system_identifier AS TEXT) FROM pg_control_system()`).Scan(&id)
		if err != nil {
			err = db.QueryRowContext(ctx, `SELECT COALESCE(host(inet_server_addr()), 'local') || ':' ||
				COALESCE(CAST(inet_server_port() AS TEXT), '')`).Scan(&id)
		}
		if err != nil {
			return "", err
		}
		if err := db.QueryRowContext(ctx, `SELECT current_database(), current_schema()`).Scan(&dbName, &schema); err != nil {
			return "", err
		}
		return fmt.Sprintf("postgres:%s/%s/%s.%s", id, dbName, schema, full), nil
	case SQLite:
		rows, err := db.QueryContext(ctx, `PRAGMA database_list`)
		if err != nil {
			return "", err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				seq        int
				name, file string
			)
			if err := rows.Scan(&seq, &name, &file); err != nil {
				return "", err
			}
			if name == "main" && file != "" {
				return "sqlite:" + file + "/" + full, nil
			}
		}
		return "", rows.Err()
	}
	return "", fmt.Errorf("unknown dialect %q", d.name)
}
