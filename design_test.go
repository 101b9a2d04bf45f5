package turnstile_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// indexRef is one `path:Name` reference of the guarantee index.
var indexRef = regexp.MustCompile("`([A-Za-z0-9_./-]+\\.go):([A-Za-z_][A-Za-z0-9_]*)`")

// TestGuaranteeIndex checks the guarantee index of docs/DESIGN.md against the tree: it has a
// row for each of G1-G7 (the guarantees doc.go states), each row names code that keeps the
// guarantee and at least one test, and every file and name it refers to exists: the file in
// the module, the name declared at the top level of that file (a function, a method or a type).
func TestGuaranteeIndex(t *testing.T) {
	t.Parallel()
	design, err := os.ReadFile(filepath.Join("docs", "DESIGN.md"))
	require.NoError(t, err)
	doc, err := os.ReadFile("doc.go")
	require.NoError(t, err)

	_, index, found := strings.Cut(string(design), "\n## Guarantee index\n")
	require.True(t, found, "docs/DESIGN.md has no \"## Guarantee index\" section")
	index, _, _ = strings.Cut(index, "\n## ")

	rows := map[string]string{} // "G1" -> the row
	for line := range strings.SplitSeq(index, "\n") {
		if m := regexp.MustCompile(`^\| (G[1-9]) `).FindStringSubmatch(line); m != nil {
			require.NotContains(t, rows, m[1], "two rows for %s", m[1])
			rows[m[1]] = line
		}
	}
	stated := regexp.MustCompile(`(?m)^//   - (G[1-9]) ([a-z ]+):`).FindAllStringSubmatch(string(doc), -1)
	require.Len(t, stated, 7, "doc.go states G1-G7")
	require.Len(t, rows, len(stated), "one index row per guarantee stated in doc.go")

	decls := map[string]map[string]bool{} // file -> its top-level names
	for _, g := range stated {
		id, name := g[1], g[2]
		row, ok := rows[id]
		require.True(t, ok, "no index row for %s", id)
		require.True(t, strings.HasPrefix(row, "| "+id+" "+name+" |"), "the row of %s is named as doc.go names it (%q): %s", id, name, row)
		cells := strings.Split(row, " | ")
		require.Len(t, cells, 3, "%s: a row has the guarantee, the code and the tests", id)
		code, tests := indexRef.FindAllStringSubmatch(cells[1], -1), indexRef.FindAllStringSubmatch(cells[2], -1)
		require.NotEmpty(t, code, "%s names no code", id)
		require.NotEmpty(t, tests, "%s names no test", id)
		for _, ref := range tests {
			require.True(t, strings.HasSuffix(ref[1], "_test.go") || strings.Contains(ref[1], "test/"),
				"%s: %s is not in a test file or a conformance suite", id, ref[0])
		}
		for _, ref := range append(code, tests...) {
			file, want := ref[1], ref[2]
			names, ok := decls[file]
			if !ok {
				names = topLevelNames(t, file)
				decls[file] = names
			}
			require.True(t, names[want], "%s: %s declares no %s", id, file, want)
		}
	}
}

// topLevelNames parses file and returns the names it declares at the top level: functions,
// methods (by method name) and types.
func topLevelNames(t *testing.T, file string) map[string]bool {
	t.Helper()
	_, err := os.Stat(file)
	require.NoError(t, err, "the index names a file that is not in the tree")
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.SkipObjectResolution)
	require.NoError(t, err)
	names := map[string]bool{}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			names[d.Name.Name] = true
		case *ast.GenDecl:
			for _, s := range d.Specs {
				if ts, ok := s.(*ast.TypeSpec); ok {
					names[ts.Name.Name] = true
				}
			}
		}
	}
	return names
}
