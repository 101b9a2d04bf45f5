package sqldialect

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkRowsArgs encodes the rows of a batched append of 32 turns on PostgreSQL: the
// columns of sqlsession's batched bump (text, integers, a boolean, bytes, a time).
func BenchmarkRowsArgs(b *testing.B) {
	d := &Dialect{name: PostgreSQL}
	r := d.Rows(Col{"a", ColText}, Col{"c", ColText}, Col{"u", ColText}, Col{"x", ColInt}, Col{"n", ColInt},
		Col{"hs", ColBool}, Col{"st", ColBytes}, Col{"t", ColTime}, Col{"r", ColText})
	var values []any
	now := time.Now()
	for i := range 32 {
		values = append(values, "app", fmt.Sprintf("conversation-%d", i), "user-1", int64(i), int64(2), false, nil, now,
			fmt.Sprintf("0b6c3c56-6f8e-4d0a-9a4e-%012d", i))
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Args(values); err != nil {
			b.Fatal(err)
		}
	}
}
