package consumer_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// engineFiles parses the non-test Go files of dir.
func engineFiles(t *testing.T, dir string) (*token.FileSet, []*ast.File) {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	require.NoError(t, err)
	fs := token.NewFileSet()
	var files []*ast.File
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fs, p, nil, parser.ParseComments)
		require.NoError(t, err)
		files = append(files, f)
	}
	require.NotEmpty(t, files)
	return fs, files
}

// TestDocListsEveryGoStatement checks the package doc's list of goroutines (doc.go,
// "Concurrency") against the code: one entry per function that starts goroutines, with the
// number of its go statements (and sync.WaitGroup.Go calls) when more than one.
func TestDocListsEveryGoStatement(t *testing.T) {
	t.Parallel()
	_, files := engineFiles(t, ".")
	inCode := map[string]int{}
	for _, f := range files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.GoStmt:
					inCode[fd.Name.Name]++
				case *ast.CallExpr:
					if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Go" {
						inCode[fd.Name.Name]++
					}
				}
				return true
			})
		}
	}
	doc, err := os.ReadFile("doc.go")
	require.NoError(t, err)
	text := string(doc)
	begin := strings.Index(text, "one line per go statement")
	end := strings.Index(text, "The throttle's resume")
	require.True(t, begin > 0 && end > begin, "doc.go has no list of goroutines")
	inDoc := map[string]int{}
	entry := regexp.MustCompile(`(?m)^//   - (\w+)(?: \((\d+)(?: of them)?\))?:`)
	for _, m := range entry.FindAllStringSubmatch(text[begin:end], -1) {
		n := 1
		if m[2] != "" {
			n, err = strconv.Atoi(m[2])
			require.NoError(t, err)
		}
		inDoc[m[1]] += n
	}
	// startWorkers starts MaxInFlight workers from one go statement.
	require.Equal(t, 1, inCode["startWorkers"])
	inCode["startWorkers"] = -1
	inDoc["startWorkers"] = -1
	require.Equal(t, inCode, inDoc, "doc.go's goroutines (left: the code's go statements by function)")
	total := 0
	for _, n := range inCode {
		total += max(n, 1)
	}
	t.Logf("%d go statements in %d functions", total, len(inCode))
}

// TestNoEngineFunctionOver60Lines keeps the engine readable: no function of the consumer or
// of its window, from func to its closing brace, is over 60 lines.
func TestNoEngineFunctionOver60Lines(t *testing.T) {
	t.Parallel()
	for _, dir := range []string{".", "internal/window"} {
		fs, files := engineFiles(t, dir)
		for _, f := range files {
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok {
					continue
				}
				from, to := fs.Position(fd.Pos()), fs.Position(fd.End())
				require.LessOrEqual(t, to.Line-from.Line+1, 60, "%s:%d: %s", from.Filename, from.Line, fd.Name.Name)
			}
		}
	}
}
