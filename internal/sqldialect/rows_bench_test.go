package sqldialect

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// BenchmarkRowsArgs encodes the rows of a batched append of 32 turns on PostgreSQL: the
// columns of sqlsession's batched bump (text, integers, a boolean, bytes, a time), as text
// literals (any driver) and as typed arrays (pgx, Dialect.On), each then encoded into the bytes
// that go on the wire as pgx's extended protocol does it (a string as it is, an array in the
// binary format): the whole of the client's work on the rows.
func BenchmarkRowsArgs(b *testing.B) {
	for _, binary := range []bool{false, true} {
		b.Run(fmt.Sprintf("binary=%t", binary), func(b *testing.B) {
			benchmarkRowsArgs(b, &Dialect{name: PostgreSQL, binaryArrays: binary})
		})
	}
}

func benchmarkRowsArgs(b *testing.B, d *Dialect) {
	r := d.Rows(Col{"a", ColText}, Col{"c", ColText}, Col{"u", ColText}, Col{"x", ColInt}, Col{"n", ColInt},
		Col{"hs", ColBool}, Col{"st", ColBytes}, Col{"t", ColTime}, Col{"r", ColText})
	var values []any
	now := time.Now()
	for i := range 32 {
		values = append(values, "app", fmt.Sprintf("conversation-%d", i), "user-1", int64(i), int64(2), false, nil, now,
			fmt.Sprintf("0b6c3c56-6f8e-4d0a-9a4e-%012d", i))
	}
	m := pgtype.NewMap()
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		args, err := r.Args(values)
		if err != nil {
			b.Fatal(err)
		}
		buf = buf[:0]
		for i, a := range args {
			if s, ok := a.(string); ok {
				buf = append(buf, s...)
				continue
			}
			if buf, err = m.Encode(arrayOID[r.cols[i].Type], pgtype.BinaryFormatCode, a, buf); err != nil {
				b.Fatal(err)
			}
		}
	}
}
