package agent_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turn/agent"
)

// An Agent runs a turn's tool loop over any Provider: here a scripted one that asks for the
// order's status once, then answers with the tool's output. turn/chatcompletion and
// turn/anthropic build the same loop over their protocols.
func Example() {
	type statusArgs struct {
		Order string `json:"order" jsonschema:"description=the order id"`
	}
	status := agent.NewTool("order_status", "Looks up an order's status.",
		func(_ context.Context, call agent.Call, args statusArgs) (string, error) {
			// call.Key is the step's idempotency key, the same on every run of the turn.
			return "order " + args.Order + " shipped on Monday", nil
		})
	model := agent.ProviderFunc(func(_ context.Context, req agent.Request) (agent.Reply, error) {
		last := req.Messages[len(req.Messages)-1]
		if last.Role == agent.RoleTool {
			return agent.Reply{Text: "Good news: your " + last.Results[0].Output + "."}, nil
		}
		return agent.Reply{ToolCalls: []agent.ToolCall{
			{ID: "call_1", Name: "order_status", Arguments: json.RawMessage(`{"order":"o-17"}`)},
		}}, nil
	})
	a, err := agent.New(agent.Config{Provider: model, Tools: []agent.Tool{status}})
	if err != nil {
		fmt.Println(err)
		return
	}
	out, err := a.Respond(context.Background(), turn.Input{Request: turn.Request{Text: "Where is o-17?"}})
	if err != nil {
		fmt.Println(turn.Classify(err), err)
		return
	}
	for _, e := range out.Events {
		fmt.Printf("%s: %s %s\n", e.Author, e.Text, e.Data)
	}
	// Output:
	// assistant:  {"tool_calls":[{"id":"call_1","name":"order_status","arguments":{"order":"o-17"}}]}
	// tool: order o-17 shipped on Monday {"tool_call_id":"call_1","name":"order_status","is_error":false}
	// assistant: Good news: your order o-17 shipped on Monday.
}
