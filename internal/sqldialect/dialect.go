package sqldialect

import (
	"database/sql"
	"database/sql/driver"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"time"
)

// Name names a supported database. The stores' public packages alias it as their Dialect.
type Name string

const (
	// PostgreSQL through any database/sql driver whose errors expose SQLState() string
	// (github.com/jackc/pgx/v5/stdlib, registered as "pgx", is the one turnstile tests).
	PostgreSQL Name = "postgres"
	// SQLite through modernc.org/sqlite (driver name "sqlite"), the pure Go port.
	SQLite Name = "sqlite"
)

// DefaultPrefix is the table prefix used when the options leave it empty.
const DefaultPrefix = "turnstile_"

// MaxPrefixLen bounds the table prefix so that every table, constraint and index name stays
// under PostgreSQL's identifier limit of 63 bytes (NAMEDATALEN-1).
const MaxPrefixLen = 32

var prefixRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ValidatePrefix reports an error when p is not a plain SQL identifier prefix: an ASCII
// letter or underscore, then letters, digits or underscores, at most MaxPrefixLen bytes. The
// prefix is spliced into SQL text, so nothing else may pass.
func ValidatePrefix(p string) error {
	if len(p) > MaxPrefixLen {
		return fmt.Errorf("table prefix %q: longer than %d bytes", p, MaxPrefixLen)
	}
	if !prefixRE.MatchString(p) {
		return fmt.Errorf("table prefix %q: want letters, digits and underscores, not starting with a digit", p)
	}
	return nil
}

// Dialect is one database's way of saying things. Get one with For; a Dialect is immutable
// and safe for concurrent use.
type Dialect struct {
	name   Name
	prefix string
	types  *strings.Replacer
	// binaryArrays: the batches' rows go to PostgreSQL as typed arrays that the driver encodes
	// in the binary format (see Rows.Args and Dialect.On); false: as array literals in text.
	binaryArrays bool
}

// For returns the dialect of name with tables named prefix+"sessions" and so on. An empty
// prefix means DefaultPrefix. Errors: an unknown name or an invalid prefix (ValidatePrefix).
func For(name Name, prefix string) (*Dialect, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if err := ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	d := &Dialect{name: name, prefix: prefix}
	switch name {
	case PostgreSQL:
		d.types = strings.NewReplacer(
			"{p}", prefix,
			"{serial}", "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
			"{bytes}", "BYTEA",
			"{time}", "TIMESTAMPTZ",
		)
	case SQLite:
		d.types = strings.NewReplacer(
			"{p}", prefix,
			"{serial}", "INTEGER PRIMARY KEY",
			"{bytes}", "BLOB",
			// Unix microseconds: SQLite has no time type, and an integer sorts and compares.
			"{time}", "INTEGER",
		)
	default:
		return nil, fmt.Errorf("unknown SQL dialect %q (want %q or %q)", name, PostgreSQL, SQLite)
	}
	return d, nil
}

// On returns the dialect for statements run on db: on PostgreSQL through pgx's database/sql
// driver (github.com/jackc/pgx/v5/stdlib, registered as "pgx", or stdlib.OpenDB), the rows of
// batched statements (Rows.Args) are handed to pgx as typed arrays, which it sends in
// PostgreSQL's binary format (written into the statement under pgx's simple protocol): no
// array literal to build on this side nor to parse on the server's (array_in). The literals
// took a tenth of the client's CPU on the stores benchmark's batched PostgreSQL side, and
// BenchmarkRowsArgs builds and encodes a 32-turn bump's rows in a third of the time. Through
// any other driver, or on SQLite, it returns d. db may be nil (d is returned).
func (d *Dialect) On(db *sql.DB) *Dialect {
	if d.name != PostgreSQL || db == nil || !isPgx(db.Driver()) {
		return d
	}
	on := *d
	on.binaryArrays = true
	return &on
}

// pgxStdlib is the import path of pgx's database/sql driver, whose driver type is *Driver.
const pgxStdlib = "github.com/jackc/pgx/v5/stdlib"

// isPgx reports whether drv is pgx's database/sql driver, told by its type's package so that
// this package need not import (and register) the driver itself.
func isPgx(drv driver.Driver) bool {
	t := reflect.TypeOf(drv)
	return t != nil && t.Kind() == reflect.Pointer && t.Elem().PkgPath() == pgxStdlib && t.Elem().Name() == "Driver"
}

// Name returns the dialect's name.
func (d *Dialect) Name() Name { return d.name }

// Prefix returns the table prefix in use.
func (d *Dialect) Prefix() string { return d.prefix }

// Table returns the full name of a table: the prefix, then name.
func (d *Dialect) Table(name string) string { return d.prefix + name }

var dollarRE = regexp.MustCompile(`\$([0-9]+)`)

// Query rewrites a query written in PostgreSQL's form for this dialect: "{p}" becomes the
// table prefix, the type tokens become types as in DDL (for casts), and on SQLite "$N"
// becomes "?N". Queries must not hold "$" in literals.
func (d *Dialect) Query(q string) string {
	q = d.types.Replace(q)
	if d.name == SQLite {
		q = dollarRE.ReplaceAllString(q, "?$1")
	}
	return q
}

// DDL rewrites a schema statement: "{p}" becomes the prefix, and the type tokens "{serial}"
// (a generated 64-bit primary key), "{bytes}" (opaque bytes) and "{time}" (a point in time,
// see Time) become the dialect's types.
func (d *Dialect) DDL(stmt string) string { return d.types.Replace(stmt) }

// Time returns the value that stores t in a "{time}" column: a time.Time in UTC truncated to
// microseconds on PostgreSQL (timestamptz keeps microseconds), Unix microseconds on SQLite.
// The zero time is stored as NULL, so it comes back as the zero time.
func (d *Dialect) Time(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	t = t.UTC().Truncate(time.Microsecond)
	if d.name == SQLite {
		return t.UnixMicro()
	}
	return t
}

// StoredTime returns t as a "{time}" column gives it back: UTC, truncated to microseconds.
func StoredTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC().Truncate(time.Microsecond)
}

// TimeScanner scans a "{time}" column of either dialect; NULL gives the zero time. Times come
// back in UTC.
type TimeScanner struct{ T *time.Time }

// Scan implements sql.Scanner.
func (s TimeScanner) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*s.T = time.Time{}
	case time.Time:
		*s.T = v.UTC()
	case int64:
		*s.T = time.UnixMicro(v).UTC()
	default:
		return fmt.Errorf("sqldialect: cannot scan %T into a time", src)
	}
	return nil
}

// Bytes returns b as a "{bytes}" argument: nil (SQL NULL) when b is empty.
func Bytes(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return b
}
