// Package temporaldev starts a Temporal CLI dev server for turnstile's tests, benchmarks and
// examples, with the conversation workflow's search attributes registered.
package temporaldev

import (
	"context"
	"errors"
	"fmt"
	"go/build"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"
)

// EnvCLI names the environment variable that gives the path of the temporal CLI binary.
const EnvCLI = "TURNSTILE_TEMPORAL_CLI"

// InstallHint says how to get the CLI; test.sh does it when the binary is missing.
const InstallHint = "go install github.com/temporalio/cli/cmd/temporal@v1.5.1"

// ErrNoCLI is returned by CLIPath when no temporal binary is found.
var ErrNoCLI = errors.New("temporaldev: no temporal CLI (set " + EnvCLI + " or run: " + InstallHint + ")")

// CLIPath returns the temporal CLI to run: $TURNSTILE_TEMPORAL_CLI, else temporal in
// $GOBIN or $GOPATH/bin, else on $PATH. It returns ErrNoCLI when there is none.
func CLIPath() (string, error) {
	if p := os.Getenv(EnvCLI); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("temporaldev: %s=%s: %w", EnvCLI, p, err)
		}
		return p, nil
	}
	var dirs []string
	if gobin := os.Getenv("GOBIN"); gobin != "" {
		dirs = append(dirs, gobin)
	}
	gopath := os.Getenv("GOPATH")
	if gopath == "" {
		gopath = build.Default.GOPATH
	}
	for _, p := range filepath.SplitList(gopath) {
		dirs = append(dirs, filepath.Join(p, "bin"))
	}
	for _, d := range dirs {
		p := filepath.Join(d, "temporal")
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	if p, err := exec.LookPath("temporal"); err == nil {
		return p, nil
	}
	return "", ErrNoCLI
}

// Args are the dev server's extra arguments: the search attributes given (name to type; pass
// workflow.SearchAttributeTypes), and sub-second timers (by default the server fires timers
// shorter than 1 s after about 1 s).
func Args(searchAttributes map[string]enums.IndexedValueType) []string {
	var args []string
	for name, typ := range searchAttributes {
		t := "Keyword"
		if typ == enums.INDEXED_VALUE_TYPE_INT {
			t = "Int"
		}
		args = append(args, "--search-attribute", name+"="+t)
	}
	return append(args, "--dynamic-config-value", `history.timerProcessorMaxTimeShift="50ms"`)
}

// Start starts a dev server in memory on a free port of 127.0.0.1 with the search attributes
// given registered and extra arguments for the CLI (such as "--dynamic-config-value",
// "KEY=VALUE"), its logs to logs (nil: discarded). Stop it with DevServer.Stop.
func Start(ctx context.Context, logs io.Writer, searchAttributes map[string]enums.IndexedValueType, extra ...string) (*testsuite.DevServer, error) {
	path, err := CLIPath()
	if err != nil {
		return nil, err
	}
	if logs == nil {
		logs = io.Discard
	}
	srv, err := testsuite.StartDevServer(ctx, testsuite.DevServerOptions{
		ExistingPath:  path,
		ClientOptions: &client.Options{HostPort: "", Namespace: "default", Logger: quiet{}},
		LogLevel:      "error",
		ExtraArgs:     append(Args(searchAttributes), extra...),
		Stdout:        logs,
		Stderr:        logs,
	})
	if err != nil {
		return nil, fmt.Errorf("temporaldev: start %s: %w", path, err)
	}
	return srv, nil
}

// quiet is a Temporal logger that drops everything below warnings.
type quiet struct{}

func (quiet) Debug(string, ...any) {}
func (quiet) Info(string, ...any)  {}
func (quiet) Warn(msg string, kv ...any) {
	if !strings.Contains(msg, "DevServer") {
		fmt.Fprintln(os.Stderr, append([]any{"temporal:", msg}, kv...)...)
	}
}
func (quiet) Error(msg string, kv ...any) {
	fmt.Fprintln(os.Stderr, append([]any{"temporal:", msg}, kv...)...)
}
