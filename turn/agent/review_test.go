package agent_test

// The TestReview tests are regression tests of the bugs a review of the step journal, the
// outbox and the agent loop found on 2026-12-02: each comment describes a bug as it was found;
// the test asserts the behaviour of its fix.

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turn/agent"
)

// normalize's doc promises every tool call "an id unique in the turn", but it dedups ids within
// one reply only: a server that numbers its calls per reply ("1", "2", ... as some
// OpenAI-compatible servers do) gives two model steps of one turn the same id, and the turn's
// events (and the next turn's history, sent to Anthropic, which wants unique tool_use ids)
// hold two calls with one id.
func TestReviewToolCallIDsRepeatAcrossModelSteps(t *testing.T) {
	t.Parallel()
	type noArgs struct{}
	echo := agent.NewTool("echo", "Echo.", func(context.Context, agent.Call, noArgs) (string, error) { return "hi", nil })
	n := 0
	a, err := agent.New(agent.Config{Tools: []agent.Tool{echo}, Provider: agent.ProviderFunc(func(context.Context, agent.Request) (agent.Reply, error) {
		n++
		if n <= 2 {
			return agent.Reply{ToolCalls: []agent.ToolCall{{ID: "1", Name: "echo", Arguments: json.RawMessage(`{}`)}}}, nil
		}
		return agent.Reply{Text: "done"}, nil
	})})
	require.NoError(t, err)
	out, err := a.Respond(context.Background(), turn.Input{Request: turn.Request{ID: "r", Text: "go"}})
	require.NoError(t, err)
	seen := map[string]bool{}
	for _, e := range out.Events {
		var d agent.ToolCallsData
		if e.Author != agent.AuthorAssistant || len(e.Data) == 0 || json.Unmarshal(e.Data, &d) != nil {
			continue
		}
		for _, c := range d.ToolCalls {
			require.False(t, seen[c.ID], "tool-call id %q appears twice in one turn", c.ID)
			seen[c.ID] = true
		}
	}
}
