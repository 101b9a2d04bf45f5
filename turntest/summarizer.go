package turntest

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/turnstile-go/turnstile/turn"
)

// FactPrefix marks the lines of a test conversation that a FactSummarizer keeps.
const FactPrefix = "FACT:"

// FactSummarizer is a scripted turn.Summarizer for tests of long conversations: its summary
// is a first line naming the range it covers, then the distinct lines of the previous summary
// and of the folded events that start with FactPrefix, in order of first appearance. It keeps
// what a test marks as facts and nothing else, so a test checks compaction's pipeline
// (stored, carried, seen by the model at turn 1,000), not a model's skill; and its summary
// stays small however long the conversation, as a real model's does under the instruction,
// which a test double that echoes its input (as the Runner's default summarizer would make
// of it) does not. Set it as Runner.Summarizer. Safe for concurrent use.
type FactSummarizer struct {
	calls atomic.Int64
}

var _ turn.Summarizer = (*FactSummarizer)(nil)

// Summarize implements turn.Summarizer; it never fails.
func (s *FactSummarizer) Summarize(_ context.Context, in turn.SummaryInput) (string, error) {
	s.calls.Add(1)
	var b strings.Builder
	if len(in.Events) > 0 {
		fmt.Fprintf(&b, "summary through seq %d", in.Events[len(in.Events)-1].Seq)
	}
	seen := map[string]bool{}
	add := func(text string) {
		for line := range strings.Lines(text) {
			line = strings.TrimSpace(line)
			if i := strings.Index(line, FactPrefix); i >= 0 && !seen[line[i:]] {
				seen[line[i:]] = true
				b.WriteString("\n" + line[i:])
			}
		}
	}
	add(in.Previous)
	for _, e := range in.Events {
		add(e.Text)
	}
	return b.String(), nil
}

// Calls returns how many summaries s wrote.
func (s *FactSummarizer) Calls() int64 { return s.calls.Load() }
