package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// event is the part of a test2json event (`go doc cmd/test2json`) the summary reads.
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

// Skip is a test that skipped: its package's import path, its name (a subtest's holds a "/"),
// and the lines it printed, its reason, without the framework's "=== RUN" and "--- SKIP" lines.
type Skip struct {
	Package, Test string
	Reason        []string
}

// Run is one `go test -json` run's skipped tests, under the label the summary prints.
type Run struct {
	Label   string
	Skipped []Skip
}

// maxLine bounds one line of go test -json output: a test may print a long line.
const maxLine = 16 << 20

// Skipped reads test2json events from r and returns the tests that skipped, sorted by package
// and name, and the number of events read. Errors: a line that is not a JSON object, a line
// over 16 MiB, a read error.
func Skipped(r io.Reader) ([]Skip, int, error) {
	type key struct{ pkg, test string }
	output := map[key][]string{}
	var skipped []key
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	n := 0
	for sc.Scan() {
		line := sc.Bytes()
		if len(strings.TrimSpace(string(line))) == 0 {
			continue
		}
		var ev event
		if err := json.Unmarshal(line, &ev); err != nil {
			return nil, n, fmt.Errorf("line %d is not a go test -json event: %w", n+1, err)
		}
		n++
		if ev.Test == "" {
			continue
		}
		k := key{ev.Package, ev.Test}
		switch ev.Action {
		case "output":
			output[k] = append(output[k], ev.Output)
		case "skip":
			skipped = append(skipped, k)
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, n, fmt.Errorf("a line after event %d is over %d bytes", n, maxLine)
		}
		return nil, n, err
	}
	out := make([]Skip, 0, len(skipped))
	for _, k := range skipped {
		out = append(out, Skip{Package: k.pkg, Test: k.test, Reason: reason(output[k])})
	}
	slices.SortFunc(out, func(a, b Skip) int {
		if c := strings.Compare(a.Package, b.Package); c != 0 {
			return c
		}
		return strings.Compare(a.Test, b.Test)
	})
	return out, n, nil
}

// framework are the prefixes of the lines the testing package prints about a test, not the
// test itself.
var framework = []string{"=== RUN", "=== PAUSE", "=== CONT", "=== NAME", "--- SKIP: "}

// reason returns a skipped test's output as lines, without the testing package's own
// (framework) and without the four spaces that indent a test's log lines.
func reason(output []string) []string {
	var lines []string
	for _, chunk := range output {
		for line := range strings.Lines(chunk) {
			line = strings.TrimRight(line, "\r\n")
			trimmed := strings.TrimSpace(line)
			if trimmed == "" || slices.ContainsFunc(framework, func(p string) bool { return strings.HasPrefix(trimmed, p) }) {
				continue
			}
			lines = append(lines, strings.TrimPrefix(line, "    "))
		}
	}
	return lines
}

// Print writes the summary of runs: a heading with the number of skipped tests, then for each
// run its label and its skipped tests, "PACKAGE TEST" and the reason lines indented under
// it, or "no test skipped".
func Print(w io.Writer, runs []Run) {
	total := 0
	for _, r := range runs {
		total += len(r.Skipped)
	}
	fmt.Fprintf(w, "\n== skipped tests: %d\n", total)
	for _, r := range runs {
		if len(r.Skipped) == 0 {
			fmt.Fprintf(w, "%s: no test skipped\n", r.Label)
			continue
		}
		fmt.Fprintf(w, "%s: %d skipped\n", r.Label, len(r.Skipped))
		for _, s := range r.Skipped {
			fmt.Fprintf(w, "  %s %s\n", s.Package, s.Test)
			if len(s.Reason) == 0 {
				fmt.Fprintf(w, "      (no reason given)\n")
			}
			for _, line := range s.Reason {
				fmt.Fprintf(w, "      %s\n", line)
			}
		}
	}
}
