package demo

import (
	"fmt"
	"io"
)

// Check is one PASS/FAIL line of a run's report.
type Check struct {
	// Name says what was checked.
	Name string
	// OK is true when the check passed.
	OK bool
	// Detail gives the evidence: counts, or the first offender.
	Detail string
}

// Checks are a run's checks, in order.
type Checks []Check

// Add appends a check whose detail is format applied to args.
func (c *Checks) Add(ok bool, name, format string, args ...any) {
	*c = append(*c, Check{Name: name, OK: ok, Detail: fmt.Sprintf(format, args...)})
}

// OK reports whether there is at least one check and every check passed.
func (c Checks) OK() bool {
	for _, ch := range c {
		if !ch.OK {
			return false
		}
	}
	return len(c) > 0
}

// Names returns the checks' names, in order.
func (c Checks) Names() []string {
	names := make([]string, len(c))
	for i, ch := range c {
		names[i] = ch.Name
	}
	return names
}

// Print writes the checks under a "checks" heading, one PASS or FAIL line each, and a last
// line saying whether all passed.
func (c Checks) Print(out io.Writer) {
	fmt.Fprintf(out, "\nchecks\n")
	for _, ch := range c {
		mark := "PASS"
		if !ch.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(out, "  %s  %s (%s)\n", mark, ch.Name, ch.Detail)
	}
	if c.OK() {
		fmt.Fprintf(out, "\nall checks passed\n")
	} else {
		fmt.Fprintf(out, "\nsome checks FAILED\n")
	}
}
