package turntest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turntest"
)

// compactingAgent is a two-step turn (model, tool) whose model, like turn/agent's Agent,
// summarizes through its provider and counts tokens itself. Its summary is a paid call
// under the compaction step's key (fx, "summarize ..."), and it keeps every user message it
// folds, so a summary loses nothing. When plain, it is neither a turn.Summarizer nor a
// turn.TokenCounter (plainAgent) and the Runner's own Summarizer summarizes.
type compactingAgent struct{ fx *turntest.Effects }

func (a compactingAgent) Respond(ctx context.Context, in turn.Input) (turn.Output, error) {
	plan, err := in.Step(ctx, "model", func(context.Context, string) ([]byte, error) {
		return fmt.Appendf(nil, "%q", fmt.Sprintf("seen %d events after a summary of %d bytes", len(in.Session.Events), len(in.Summary))), nil
	})
	if err != nil {
		return turn.Output{}, err
	}
	if _, err := in.Step(ctx, "tool:refund", func(_ context.Context, key string) ([]byte, error) {
		a.fx.Do(key, "refund 5 for "+in.Request.ID)
		return []byte(`"refunded"`), nil
	}); err != nil {
		return turn.Output{}, err
	}
	return turn.Output{Events: []session.Event{{Author: "assistant", Text: "done: " + string(plan)}}}, nil
}

func (a compactingAgent) Summarize(_ context.Context, in turn.SummaryInput) (string, error) {
	a.fx.Do(in.Step.Key, fmt.Sprintf("summarize seqs %d to %d for %s", in.Checkpoint.From, in.Checkpoint.Through, in.Request.ID))
	return keepUserLines(in), nil
}

func (a compactingAgent) CountTokens(text string) int { return len(strings.Fields(text)) + 1 }

// plainAgent is compactingAgent's turn without its summarizer and counter.
type plainAgent struct{ a compactingAgent }

func (p plainAgent) Respond(ctx context.Context, in turn.Input) (turn.Output, error) {
	return p.a.Respond(ctx, in)
}

// keepUserLines is a summary that keeps the previous one and the first two words of each
// folded user message ("message 2"), one a line: a summary that loses no message and stays
// small.
func keepUserLines(in turn.SummaryInput) string {
	lines := []string{}
	if in.Previous != "" {
		lines = append(lines, in.Previous)
	}
	for _, e := range in.Events {
		if e.Author == "user" {
			lines = append(lines, strings.Join(strings.Fields(e.Text)[:2], " "))
		}
	}
	return strings.Join(lines, "\n")
}

// Kill -9 during and after a compaction, and during and after the steps after it: every
// request of a conversation compacts (a history turn first, then HistoryLimit 1, or a context
// budget that two turns pass), as the first step of its turn; the harness crashes at every
// point, step points included, and checks that no finished compaction runs again (the
// summarizer is called again only when the process died before its record landed), that
// each turn that compacted stored its one checkpoint (none lost, none doubled), that the
// checkpoints chain from seq 1 in whole turns, and that each model call saw the latest
// summary and every event after its range (none uncovered). The summarizer is the model's
// own, as turn/agent's is, or the Runner's.
func TestCrashHarnessCompaction(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("the order number and the complaint, at length; ", 6)
	for _, tc := range []struct {
		name   string
		model  func(fx *turntest.Effects) turn.ModelClient
		runner func(r *turn.Runner)
		text   string
	}{
		{name: "model's summarizer, history limit",
			model:  func(fx *turntest.Effects) turn.ModelClient { return compactingAgent{fx} },
			runner: func(r *turn.Runner) { r.HistoryLimit = 1 }},
		{name: "runner's summarizer, history limit",
			model: func(fx *turntest.Effects) turn.ModelClient { return plainAgent{compactingAgent{fx}} },
			runner: func(r *turn.Runner) {
				r.HistoryLimit = 1
				r.Summarizer = turn.SummarizerFunc(func(_ context.Context, in turn.SummaryInput) (string, error) { return keepUserLines(in), nil })
			}},
		{name: "model's summarizer, context budget", text: long,
			model:  func(fx *turntest.Effects) turn.ModelClient { return compactingAgent{fx} },
			runner: func(r *turn.Runner) { r.ContextBudget = 200 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const conv, user = "compacting-conversation", "compacting-user"
			history := []turn.Request{turntest.NewRequest(conv, user, "message 1 "+tc.text)}
			var reqs []turn.Request
			for i := range 3 {
				reqs = append(reqs, turntest.NewRequest(conv, user, fmt.Sprintf("message %d %s", i+2, tc.text)))
			}
			reports := turntest.CheckCrashes(t, turntest.CrashConfig{
				NewModel: tc.model, Runner: tc.runner, History: history, Requests: reqs,
				Steps: 3, // the compaction, the model, the refund
			})
			require.Len(t, reports, len(turntest.CrashPointsFor(3)))
			for _, r := range reports {
				require.True(t, r.OK(), r.String())
				for _, req := range reqs {
					want := 1
					if r.Point == turntest.DuringStep(1) {
						want = 2 // the process died before the compaction's record landed
					}
					require.Equal(t, map[int]int{1: want}, r.SummarizerCalls[req.ID], "%s: request %s: the summarizer's calls, by step", r.Point, req.ID)
					require.Equal(t, want, r.StepRuns[req.ID][1], "%s: request %s: runs of the compaction step", r.Point, req.ID)
				}
				require.NotContains(t, r.SummarizerCalls, history[0].ID, "the first turn has nothing to compact")
			}
		})
	}
}
