// Command testsummary prints the tests that skipped in one or more runs of `go test -json`,
// each with its reason, grouped by run: what ./test.sh prints at its end, so that a run on a
// machine without PostgreSQL or kcat says what did not run.
//
//	testsummary LABEL FILE [LABEL FILE ...]
//
// Each pair of arguments names a run: a label and the file its `go test -json` events were
// written to (gotestsum --jsonfile writes the same events). A file that is missing or
// empty is a run that did not happen (an earlier pass failed) and is left out. The events are
// test2json's (`go doc cmd/test2json`): a test skipped has an event with Action "skip", and its
// reason is the output it printed, less the framework's "=== RUN" and "--- SKIP" lines.
//
// It prints, for each run, the skipped tests sorted by package and name, each with its reason
// lines indented, or that none skipped. It exits 0, or 2 on a bad argument or a file that is
// not test2json output.
package main

import (
	"fmt"
	"io"
	"os"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run prints the summary of the runs args name to stdout and returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || len(args)%2 != 0 {
		fmt.Fprintln(stderr, "usage: testsummary LABEL FILE [LABEL FILE ...]")
		return 2
	}
	var runs []Run
	for i := 0; i < len(args); i += 2 {
		label, path := args[i], args[i+1]
		f, err := os.Open(path)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			fmt.Fprintf(stderr, "testsummary: %v\n", err)
			return 2
		}
		skipped, n, err := Skipped(f)
		f.Close()
		if err != nil {
			fmt.Fprintf(stderr, "testsummary: %s: %v\n", path, err)
			return 2
		}
		if n > 0 {
			runs = append(runs, Run{Label: label, Skipped: skipped})
		}
	}
	Print(stdout, runs)
	return 0
}
