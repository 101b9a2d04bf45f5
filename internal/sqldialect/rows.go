package sqldialect

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// ColType is the SQL type of a column of a batch's rows (see Rows).
type ColType int

const (
	// ColText is TEXT; its values are string.
	ColText ColType = iota
	// ColInt is BIGINT; its values are int64 or int.
	ColInt
	// ColBool is BOOLEAN; its values are bool.
	ColBool
	// ColBytes is "{bytes}" (BYTEA, BLOB); its values are []byte, nil for NULL (see Bytes).
	ColBytes
	// ColTime is "{time}"; its values are what Dialect.Time returns.
	ColTime
	numColTypes
)

// sqlType is the type a column is cast to, in the dialect's tokens (see Query).
var sqlType = [numColTypes]string{ColText: "TEXT", ColInt: "BIGINT", ColBool: "BOOLEAN", ColBytes: "{bytes}", ColTime: "{time}"}

// arrayOID is the PostgreSQL array type of a column's parameter on PostgreSQL.
var arrayOID = [numColTypes]uint32{ColText: pgtype.TextArrayOID, ColInt: pgtype.Int8ArrayOID, ColBool: pgtype.BoolArrayOID,
	ColBytes: pgtype.ByteaArrayOID, ColTime: pgtype.TimestamptzArrayOID}

// Col is a column of a batch's rows: its name in the statement and its type.
type Col struct {
	Name string
	Type ColType
}

// Rows describes the rows of a batched statement, given to it as a table named v: a common
// table expression (WITH v (cols) AS (...)) that the statement reads. On PostgreSQL each column
// is one parameter holding the column's values as an array, cast to the column's array type,
// and unnest turns them back into rows: the statement's text is the same for any number of
// rows, so the driver prepares it once per connection and the server plans it once, instead of
// a statement of its own for every batch size. Through pgx's driver (see Dialect.On) the array
// is a pgtype.FlatArray, which pgx sends in the binary format; through any other driver it is
// a text literal in PostgreSQL's array syntax, made by pgx's pgtype, which any driver can send
// and the server parses for the cast. On SQLite, which has no arrays, v is a VALUES list of one
// row of parameters per row.
type Rows struct {
	d    *Dialect
	name string // the table's name in the statement: "v" unless As says otherwise
	cols []Col
}

// Rows returns the description of rows of cols for statements of this dialect.
func (d *Dialect) Rows(cols ...Col) *Rows { return &Rows{d: d, name: "v", cols: cols} }

// As returns the rows named name in the statement instead of v, for a statement that reads
// two sets of rows (two common table expressions).
func (r *Rows) As(name string) *Rows { return &Rows{d: r.d, name: name, cols: r.cols} }

// Width is the number of columns.
func (r *Rows) Width() int { return len(r.cols) }

// CTE returns "v (col, ...) AS (...)" (v: the rows' name, see As) for n rows whose parameters
// start at $first, in PostgreSQL's form (the caller rewrites the whole statement with
// Dialect.Query). On PostgreSQL n does not change the text.
func (r *Rows) CTE(n, first int) string {
	var q strings.Builder
	q.WriteString(r.name)
	q.WriteString(" (")
	for i, c := range r.cols {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString(c.Name)
	}
	q.WriteString(") AS (")
	if r.d.name == PostgreSQL {
		q.WriteString("SELECT * FROM unnest(")
		for i, c := range r.cols {
			if i > 0 {
				q.WriteString(", ")
			}
			fmt.Fprintf(&q, "CAST($%d AS %s[])", first+i, sqlType[c.Type])
		}
		q.WriteString("))")
		return q.String()
	}
	q.WriteString("VALUES ")
	for row := range n {
		if row > 0 {
			q.WriteString(", ")
		}
		q.WriteByte('(')
		for i, c := range r.cols {
			if i > 0 {
				q.WriteString(", ")
			}
			q.WriteString("CAST($")
			q.WriteString(strconv.Itoa(first + row*len(r.cols) + i))
			q.WriteString(" AS ")
			q.WriteString(sqlType[c.Type])
			q.WriteByte(')')
		}
		q.WriteByte(')')
	}
	q.WriteByte(')')
	return q.String()
}

// Params is how many parameters CTE takes for n rows.
func (r *Rows) Params(n int) int {
	if r.d.name == PostgreSQL {
		return len(r.cols)
	}
	return n * len(r.cols)
}

// Args returns the parameters of CTE for values, the rows' values one row after another
// (len(values) a multiple of Width). On PostgreSQL it returns one array per column: a
// pgtype.FlatArray through pgx's driver (Dialect.On), an array literal otherwise; its error
// is a value of the wrong Go type for its column.
func (r *Rows) Args(values []any) ([]any, error) {
	w := len(r.cols)
	if w == 0 || len(values)%w != 0 {
		return nil, fmt.Errorf("sqldialect: %d values for rows of %d columns", len(values), w)
	}
	if r.d.name != PostgreSQL {
		return values, nil
	}
	n := len(values) / w
	args := make([]any, w)
	var m *pgtype.Map // for the text literals only
	if !r.d.binaryArrays {
		m = pgMaps.Get().(*pgtype.Map)
		defer pgMaps.Put(m)
	}
	for i, c := range r.cols {
		col, err := column(c, values, i, w, n)
		if err != nil {
			return nil, err
		}
		if r.d.binaryArrays {
			args[i] = col
			continue
		}
		buf, err := m.Encode(arrayOID[c.Type], pgtype.TextFormatCode, col, nil)
		if err != nil {
			return nil, fmt.Errorf("sqldialect: column %s: %w", c.Name, err)
		}
		args[i] = string(buf)
	}
	return args, nil
}

// pgMaps holds pgtype maps for Args: a Map caches its encode plans and is not safe for
// concurrent use.
var pgMaps = sync.Pool{New: func() any { return pgtype.NewMap() }}

// column gathers column i of the n rows of values (width w) into the typed slice pgtype
// encodes as the column's array, with NULL for a nil value.
func column(c Col, values []any, i, w, n int) (any, error) {
	switch c.Type {
	case ColText:
		return gather(c, values, i, w, n, func(v any) (pgtype.Text, bool) {
			s, ok := v.(string)
			return pgtype.Text{String: s, Valid: true}, ok
		})
	case ColInt:
		return gather(c, values, i, w, n, func(v any) (pgtype.Int8, bool) {
			switch x := v.(type) {
			case int64:
				return pgtype.Int8{Int64: x, Valid: true}, true
			case int:
				return pgtype.Int8{Int64: int64(x), Valid: true}, true
			case int32:
				return pgtype.Int8{Int64: int64(x), Valid: true}, true
			}
			return pgtype.Int8{}, false
		})
	case ColBool:
		return gather(c, values, i, w, n, func(v any) (pgtype.Bool, bool) {
			b, ok := v.(bool)
			return pgtype.Bool{Bool: b, Valid: true}, ok
		})
	case ColBytes:
		return gather(c, values, i, w, n, func(v any) ([]byte, bool) {
			b, ok := v.([]byte)
			return b, ok
		})
	case ColTime:
		return gather(c, values, i, w, n, func(v any) (pgtype.Timestamptz, bool) {
			t, ok := v.(time.Time)
			return pgtype.Timestamptz{Time: t, Valid: true}, ok
		})
	}
	return nil, fmt.Errorf("sqldialect: column %s: unknown type %d", c.Name, c.Type)
}

// gather is column for one type: conv turns a value into its element, or reports a value of
// the wrong Go type; a nil value stays T's zero value, which pgtype encodes as NULL. The
// column is a pgtype.FlatArray, an ArrayGetter, which pgtype encodes without the reflection
// a plain slice takes (BenchmarkRowsArgs: 613 allocations for 32 rows of 9 columns, not 654).
func gather[T any](c Col, values []any, i, w, n int, conv func(any) (T, bool)) (pgtype.FlatArray[T], error) {
	col := make(pgtype.FlatArray[T], n)
	for row := range n {
		v := values[row*w+i]
		if v == nil {
			continue
		}
		e, ok := conv(v)
		if !ok {
			return nil, fmt.Errorf("sqldialect: column %s: a %T value in a column of type %s", c.Name, v, sqlType[c.Type])
		}
		col[row] = e
	}
	return col, nil
}

// Statement returns the statement that build makes around the rows' CTE, for n rows, rewritten
// by Dialect.Query. build is given "v (...) AS (...)" and the number of the first parameter
// after the rows' own, for the statement's other parameters. On PostgreSQL the statement is
// built once, as its text is the same for any number of rows.
func (r *Rows) Statement(build func(cte string, next int) string) func(n int) string {
	if r.d.name == PostgreSQL {
		q := r.d.Query(build(r.CTE(0, 1), r.Params(0)+1))
		return func(int) string { return q }
	}
	return func(n int) string { return r.d.Query(build(r.CTE(n, 1), r.Params(n)+1)) }
}
