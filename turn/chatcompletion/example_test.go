package chatcompletion_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turn/chatcompletion"
)

// A Client pointed at a chat-completions server answers one turn. The httptest server stands
// in for Ollama; against a real one, use chatcompletion.OllamaBaseURL.
func Example() {
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// r.URL.Path is "/v1/chat/completions": the client appends "/chat/completions".
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1764478800,
			"model":"llama3.2","choices":[{"index":0,"finish_reason":"stop",
			"message":{"role":"assistant","content":"Your refund was issued on Monday."}}],
			"usage":{"prompt_tokens":31,"completion_tokens":9,"total_tokens":40}}`)
	}))
	defer server.Close()

	model, err := chatcompletion.New(chatcompletion.Config{
		BaseURL:      server.URL + "/v1",
		Model:        "llama3.2",
		SystemPrompt: "You are a helpful support agent.",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	out, err := model.Respond(context.Background(), turn.Input{
		Request: turn.Request{Text: "Where is my refund?"},
		Session: session.Session{Events: []session.Event{
			{Author: "user", Text: "I was charged twice."},
			{Author: "assistant", Text: "I have refunded the second charge."},
		}},
	})
	if err != nil {
		fmt.Println(turn.Classify(err), err)
		return
	}
	fmt.Println(out.Events[0].Author+":", out.Events[0].Text)
	fmt.Println(string(out.Events[0].Data))
	// Output:
	// assistant: Your refund was issued on Monday.
	// {"id":"chatcmpl-1","model":"llama3.2","finish_reason":"stop","usage":{"prompt_tokens":31,"completion_tokens":9,"total_tokens":40}}
}
