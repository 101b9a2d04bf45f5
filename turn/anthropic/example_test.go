package anthropic_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turn/agent"
	"github.com/turnstile-go/turnstile/turn/anthropic"
)

// A Client runs a turn's tool loop over the Messages API. The httptest server stands in for
// Anthropic: it asks for the order's status, then answers with it. The same tools work with
// turn/chatcompletion's Client.
func Example() {
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		if !strings.Contains(string(body), "tool_result") {
			_, _ = io.WriteString(w, `{"id":"msg_1","type":"message","role":"assistant","model":"claude-test",
				"stop_reason":"tool_use","usage":{"input_tokens":20,"output_tokens":10},
				"content":[{"type":"tool_use","id":"toolu_1","name":"order_status","input":{"order":"o-17"}}]}`)
			return
		}
		_, _ = io.WriteString(w, `{"id":"msg_2","type":"message","role":"assistant","model":"claude-test",
			"stop_reason":"end_turn","usage":{"input_tokens":40,"output_tokens":12},
			"content":[{"type":"text","text":"Your order o-17 shipped on Monday."}]}`)
	}))
	defer server.Close()

	type statusArgs struct {
		Order string `json:"order" jsonschema:"description=the order id"`
	}
	status := agent.NewTool("order_status", "Looks up an order's status.",
		func(_ context.Context, _ agent.Call, args statusArgs) (string, error) {
			return "order " + args.Order + " shipped on Monday", nil
		})
	model, err := anthropic.New(anthropic.Config{
		BaseURL: server.URL, // "" for anthropic.DefaultBaseURL
		APIKey:  "sk-ant-example",
		Model:   "claude-test",
		Tools:   []agent.Tool{status},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	out, err := model.Respond(context.Background(), turn.Input{Request: turn.Request{Text: "Where is o-17?"}})
	if err != nil {
		fmt.Println(turn.Classify(err), err)
		return
	}
	for _, e := range out.Events {
		fmt.Printf("%s: %q\n", e.Author, e.Text)
	}
	fmt.Println(string(out.Events[len(out.Events)-1].Data))
	// Output:
	// assistant: ""
	// tool: "order o-17 shipped on Monday"
	// assistant: "Your order o-17 shipped on Monday."
	// {"id":"msg_2","model":"claude-test","stop_reason":"end_turn","usage":{"input_tokens":40,"output_tokens":12}}
}
