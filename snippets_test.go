package turnstile_test

import (
	"encoding/json"
	"fmt"
	"go/doc/comment"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// snippetImports are the packages a fragment of the docs may use, each with a name of it that
// keeps the import used in every generated file.
var snippetImports = map[string]string{
	"context":                   "context.Background",
	"database/sql":              "sql.Open",
	"errors":                    "errors.New",
	"log/slog":                  "slog.Default",
	"net/http":                  "http.Handle",
	"os":                        "os.Getenv",
	"os/signal":                 "signal.NotifyContext",
	"strings":                   "strings.Split",
	"syscall":                   "syscall.SIGTERM",
	"time":                      "time.Hour",
	"github.com/IBM/sarama":     "sarama.NewConfig",
	"go.temporal.io/sdk/client": "client.Dial",
	"go.temporal.io/sdk/worker": "worker.New",
	"github.com/turnstile-go/turnstile/attachment/sqlattachment": "sqlattachment.New",
	"github.com/turnstile-go/turnstile/console":                  "console.New",
	"github.com/turnstile-go/turnstile/consumer":                 "consumer.New",
	"github.com/turnstile-go/turnstile/inbox":                    "inbox.RunPurge",
	"github.com/turnstile-go/turnstile/inbox/sqlinbox":           "sqlinbox.New",
	"github.com/turnstile-go/turnstile/session/sqlsession":       "sqlsession.New",
	"github.com/turnstile-go/turnstile/turn":                     "turn.Permanent",
	"github.com/turnstile-go/turnstile/turn/turnotel":            "turnotel.Runner",
	"github.com/turnstile-go/turnstile/turn/agent":               "agent.New",
	"github.com/turnstile-go/turnstile/turn/chatcompletion":      "chatcompletion.New",
	"github.com/turnstile-go/turnstile/turn/anthropic":           "anthropic.New",
	"github.com/turnstile-go/turnstile/workflow":                 "workflow.NewBridge",
	"tlog go.temporal.io/sdk/log":                                "tlog.NewStructuredLogger",
	"twf go.temporal.io/sdk/workflow":                            "twf.GetLogger",
	"_ github.com/jackc/pgx/v5/stdlib":                           "",
}

// snippetPreamble declares what a fragment of the docs takes from the program around it.
const snippetPreamble = `	ctx := context.Background()
	hostPort, brokers := "temporal:7233", []string{"kafka:9092"}
	var runner *turn.Runner        // the Runner of "Wiring it into your service"
	var ledger *workflow.SQLLedger // workflow.NewSQLLedger on the stores' database
	tp, mp := turnotel.Options{}.TracerProvider, turnotel.Options{}.MeterProvider
	_, _, _, _, _, _, _ = ctx, hostPort, brokers, runner, ledger, tp, mp
`

// snippetSupport is what the docs say a program has besides a snippet: must and myModel.
const snippetSupport = `package %s

import (
	"context"

	"github.com/turnstile-go/turnstile/turn"
)

// must panics on a non-nil error, as the README says.
func must(err error) {
	if err != nil {
		panic(err)
	}
}

// myModel is the host's turn.ModelClient.
type myModel struct{}

func (myModel) Respond(context.Context, turn.Input) (turn.Output, error) { return turn.Output{}, nil }

var _ turn.ModelClient = myModel{}
`

// The README's Go snippets and the workflow package doc's compile: a whole program as it is
// (with must and myModel, which the README describes), a fragment inside a function that
// declares what it takes from the program around it (ctx, hostPort, brokers, runner, ledger,
// tp, mp). The workflow package doc's blocks are one program's parts, compiled together. The
// files are laid over the module with go build -overlay; nothing is written to the tree.
func TestDocSnippetsCompile(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(readme), -1)
	require.GreaterOrEqual(t, len(blocks), 4, "the README's Go snippets")
	var fragments []string
	overlay := map[string]string{}
	dir := t.TempDir()
	add := func(pkg, name, src string) {
		path := filepath.Join(dir, strings.ReplaceAll(pkg+"_"+name, "/", "_"))
		require.NoError(t, os.WriteFile(path, []byte(src), 0o600))
		abs, err := filepath.Abs(filepath.Join("internal", "docsnippets", pkg, name))
		require.NoError(t, err)
		overlay[abs] = path
	}
	var pkgs []string
	for i, b := range blocks {
		if strings.HasPrefix(b[1], "package ") {
			pkg := fmt.Sprintf("program%d", i)
			add(pkg, "main.go", b[1])
			add(pkg, "support.go", fmt.Sprintf(snippetSupport, "main"))
			pkgs = append(pkgs, pkg)
			continue
		}
		fragments = append(fragments, b[1])
	}
	fragments = append(fragments, strings.Join(docCodeBlocks(t, filepath.Join("workflow", "doc.go")), "\n"))
	for i, f := range fragments {
		add("fragments", fmt.Sprintf("f%d.go", i), fragmentFile(i, f))
	}
	add("fragments", "support.go", fmt.Sprintf(snippetSupport, "fragments"))
	pkgs = append(pkgs, "fragments")

	data, err := json.Marshal(map[string]any{"Replace": overlay})
	require.NoError(t, err)
	overlayFile := filepath.Join(dir, "overlay.json")
	require.NoError(t, os.WriteFile(overlayFile, data, 0o600))
	args := []string{"build", "-overlay=" + overlayFile}
	for _, p := range pkgs {
		args = append(args, "./internal/docsnippets/"+p)
	}
	out, err := exec.Command("go", args...).CombinedOutput()
	require.NoError(t, err, "the docs' Go snippets do not compile:\n%s\n(fragments:\n%s)", out, strings.Join(fragments, "\n----\n"))
}

// fragmentFile is a fragment of the docs inside a function of its own, with every import of
// snippetImports kept used.
func fragmentFile(i int, fragment string) string {
	var b strings.Builder
	b.WriteString("package fragments\n\nimport (\n")
	for imp := range snippetImports {
		name, path, found := strings.Cut(imp, " ")
		if !found {
			name, path = "", imp
		}
		fmt.Fprintf(&b, "\t%s %q\n", name, path)
	}
	b.WriteString(")\n\n")
	for _, use := range snippetImports {
		if use != "" {
			fmt.Fprintf(&b, "var _ = %s\n", use)
		}
	}
	fmt.Fprintf(&b, "\nfunc fragment%d() {\n%s\n%s\n}\n", i, snippetPreamble, fragment)
	return b.String()
}

// docCodeBlocks returns the code blocks of a Go file's package doc.
func docCodeBlocks(t *testing.T, file string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ParseComments|parser.PackageClauseOnly)
	require.NoError(t, err)
	require.NotNil(t, f.Doc, "%s has a package doc", file)
	var p comment.Parser
	var out []string
	for _, blk := range p.Parse(f.Doc.Text()).Content {
		if c, ok := blk.(*comment.Code); ok {
			out = append(out, c.Text)
		}
	}
	require.NotEmpty(t, out, "%s's package doc has code blocks", file)
	return out
}
