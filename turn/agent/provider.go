package agent

import (
	"github.com/turnstile-go/turnstile/turn"

	"bytes"
	"context"
	"encoding/json"
)

// Provider is one model call in a provider's protocol (turn/chatcompletion's OpenAI chat
// completions, turn/anthropic's Messages API): the conversation so far in, the assistant's
// next message out. The loop (Agent) owns everything else: the history, the tools, the
// journal.
type Provider interface {
	// Complete sends one request and returns the assistant's reply: its text, its tool calls
	// (several for a parallel call), and the provider's metadata for the final answer's event
	// (Reply.Data). It makes no retries of its own; its errors are mapped onto turnstile's
	// kinds (turn.RetryAfter for a rate limit, turn.Permanent for a request no retry fixes,
	// a plain error for a failed attempt), and it returns when ctx ends.
	Complete(ctx context.Context, req Request) (Reply, error)
}

// Request is what a Provider sends in one model call.
type Request struct {
	// System is the system prompt; "" for none.
	System string
	// Messages is the conversation, oldest first, ending with a user message or with the
	// tool results of the last assistant message. It is valid for both protocols: every
	// assistant tool call is answered by the RoleTool message right after it, one result per
	// call, in call order.
	Messages []Message
	// Tools are the tools the model may call; none sends no tools.
	Tools []ToolSpec
	// Step is the model call's step in the turn's journal (ordinal, name "model", key): the
	// same on every run of the turn, for a provider that logs it or sends the key to a
	// gateway that dedups requests.
	Step turn.Step
}

// Role is who a Message is from.
type Role string

// The roles of a Message.
const (
	// RoleUser: Text is the user's (or a labelled host event's) text.
	RoleUser Role = "user"
	// RoleAssistant: Text (may be "" when ToolCalls is not empty) and ToolCalls.
	RoleAssistant Role = "assistant"
	// RoleSystem: Text is a system instruction in its place in the history (a session event
	// of Author "system"). Providers without a system role in the conversation (Anthropic)
	// send it as a user message "[system] Text".
	RoleSystem Role = "system"
	// RoleTool: Results answers the tool calls of the assistant message before it.
	RoleTool Role = "tool"
)

// Message is one provider-neutral message of the conversation.
type Message struct {
	Role      Role
	Text      string
	ToolCalls []ToolCall
	Results   []ToolResult
}

// ToolCall is one tool call of an assistant message.
type ToolCall struct {
	// ID is the provider's id of the call; a tool result names it in CallID.
	ID string `json:"id"`
	// Name is the tool's name.
	Name string `json:"name"`
	// Arguments is the call's arguments, a JSON value (an object for a valid call; see
	// RawArguments for what the model sent that is not JSON).
	Arguments json.RawMessage `json:"arguments"`
}

// ToolResult is a tool's output, answering a ToolCall.
type ToolResult struct {
	// CallID is the ToolCall.ID it answers.
	CallID string
	// Name is the tool's name.
	Name string
	// Output is what the model reads: the tool's output or error text.
	Output string
	// IsError is true when Output is an error (a failed tool, an unknown tool, arguments that
	// do not decode); Anthropic's tool_result has is_error, OpenAI's tool message has none.
	IsError bool
}

// ToolSpec is a tool's definition as a provider sends it.
type ToolSpec struct {
	// Name matches ^[a-zA-Z0-9_-]{1,64}$.
	Name string
	// Description tells the model what the tool does and when to call it.
	Description string
	// Schema is the JSON schema of the arguments, an object schema.
	Schema map[string]any
}

// Reply is the assistant's message from one model call, as the loop records it in the
// journal (as JSON) and replays it on a run that finds the model step recorded.
type Reply struct {
	// Text is the assistant's text; the final answer when ToolCalls is empty.
	Text string `json:"text,omitempty"`
	// ToolCalls are the tools the model asks to call, in its order; the loop runs them in
	// parallel.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// Data is the provider's metadata of the reply (its id, model, stop reason, usage), as
	// JSON; the final answer's event carries it as its Data. nil for none.
	Data json.RawMessage `json:"data,omitempty"`
	// Usage counts the call's tokens, as the provider reports them.
	Usage Usage `json:"usage"`
}

// Usage counts the tokens of one model call, as the provider's tokenizer counts them.
type Usage struct {
	// InputTokens counts the tokens sent: system prompt, history, tool definitions.
	InputTokens int64 `json:"input_tokens"`
	// OutputTokens counts the tokens of the reply.
	OutputTokens int64 `json:"output_tokens"`
}

// RawArguments returns a tool call's arguments as the model sent them in a string (OpenAI's
// "function.arguments"), as a JSON value: the text itself when it is JSON, "{}" when it is
// blank, and otherwise the text as a JSON string, which does not decode into an argument
// struct, so the tool answers the model with an error.
func RawArguments(s string) json.RawMessage {
	b := bytes.TrimSpace([]byte(s))
	switch {
	case len(b) == 0:
		return json.RawMessage("{}")
	case json.Valid(b):
		return json.RawMessage(b)
	}
	quoted, _ := json.Marshal(s) // a string always encodes
	return quoted
}

// ProviderFunc adapts a function to Provider (a host's own protocol, a scripted test model).
type ProviderFunc func(ctx context.Context, req Request) (Reply, error)

// Complete calls f.
func (f ProviderFunc) Complete(ctx context.Context, req Request) (Reply, error) { return f(ctx, req) }
