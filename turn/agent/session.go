package agent

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
)

// Authors of the session events the loop writes and reads.
const (
	// AuthorUser is the user's messages' author (the Runner writes them).
	AuthorUser = "user"
	// AuthorAssistant is the author of the assistant's messages: its final answers, and its
	// tool-call messages (Data: ToolCallsData).
	AuthorAssistant = "assistant"
	// AuthorTool is the author of a tool's output (Data: ToolResultData).
	AuthorTool = "tool"
	// AuthorSystem is the author of a host's system instruction in the history.
	AuthorSystem = "system"
)

// ToolCallsData is the Data of an assistant event that called tools:
//
//	{"tool_calls":[{"id":"call_1","name":"refund","arguments":{"order":"o-1"}}]}
type ToolCallsData struct {
	ToolCalls []ToolCall `json:"tool_calls"`
}

// ToolResultData is the Data of a tool's output event, whose Text is the output:
//
//	{"tool_call_id":"call_1","name":"refund","is_error":false}
type ToolResultData struct {
	ToolCallID string `json:"tool_call_id"`
	Name       string `json:"name"`
	IsError    bool   `json:"is_error"`
}

// AssistantEvent returns the session event of an assistant message that called tools:
// Author "assistant", Text the message's text, Data a ToolCallsData. Errors: arguments that
// are not JSON (see RawArguments).
func AssistantEvent(text string, calls []ToolCall) (session.Event, error) {
	data, err := json.Marshal(ToolCallsData{ToolCalls: calls})
	if err != nil {
		return session.Event{}, fmt.Errorf("agent: encode tool calls: %w", err)
	}
	return session.Event{Author: AuthorAssistant, Text: text, Data: data}, nil
}

// ToolEvent returns the session event of a tool's output: Author "tool", Text the output,
// Data a ToolResultData.
func ToolEvent(r ToolResult) session.Event {
	data, _ := json.Marshal(ToolResultData{ToolCallID: r.CallID, Name: r.Name, IsError: r.IsError}) // strings and a bool
	return session.Event{Author: AuthorTool, Text: r.Output, Data: data}
}

// toolCalls returns the tool calls of an assistant event, or none.
func toolCalls(e session.Event) []ToolCall {
	if e.Author != AuthorAssistant && e.Author != "" || len(e.Data) == 0 {
		return nil
	}
	var d ToolCallsData
	if json.Unmarshal(e.Data, &d) != nil {
		return nil
	}
	return d.ToolCalls
}

// toolResult returns the result of a tool event that ToolEvent made; ok is false for another
// event (a host's own "tool" event has no tool_call_id).
func toolResult(e session.Event) (ToolResult, bool) {
	if e.Author != AuthorTool || len(e.Data) == 0 {
		return ToolResult{}, false
	}
	var d ToolResultData
	if json.Unmarshal(e.Data, &d) != nil || d.ToolCallID == "" {
		return ToolResult{}, false
	}
	return ToolResult{CallID: d.ToolCallID, Name: d.Name, Output: e.Text, IsError: d.IsError}, true
}

// missingResult is the output of a tool call whose result is not in the history.
const missingResult = "error: this call's result is not in the conversation history"

// History returns the provider-neutral messages of a session's events, oldest first, valid
// for both protocols:
//
//   - an assistant event with tool calls (AssistantEvent) becomes an assistant message with
//     its calls, followed by one RoleTool message with a result per call, in call order,
//     taken from the tool events (ToolEvent) right after it; a call without its result gets
//     an error result saying so, and a tool event that answers no call of the assistant
//     message before it (an orphan, as when HistoryLimit cut that message off) is dropped;
//   - "user" becomes a user message (with the note listing its attachments, when the Runner
//     stored their references with it: turn.UserEvent); "assistant" (and "", the Runner's default author) an
//     assistant message; "system" a RoleSystem message;
//   - any other author, and a host's own "tool" event (without ToolResultData), becomes a
//     user message "[author] Text", which keeps it in the model's context without giving
//     it the authority of the model's own words.
//
// Events with an empty Text are skipped, except tool calls and tool outputs.
func History(events []session.Event) []Message {
	msgs := make([]Message, 0, len(events))
	for i := 0; i < len(events); i++ {
		e := events[i]
		if calls := toolCalls(e); len(calls) > 0 {
			results := make([]ToolResult, len(calls))
			index := make(map[string]int, len(calls))
			for k, c := range calls {
				results[k] = ToolResult{CallID: c.ID, Name: c.Name, Output: missingResult, IsError: true}
				index[c.ID] = k
			}
			answered := make(map[string]bool, len(calls))
			for i+1 < len(events) {
				r, ok := toolResult(events[i+1])
				if !ok {
					break
				}
				i++
				if k, ok := index[r.CallID]; ok && !answered[r.CallID] {
					answered[r.CallID] = true
					results[k] = r
				}
			}
			msgs = append(msgs,
				Message{Role: RoleAssistant, Text: e.Text, ToolCalls: calls},
				Message{Role: RoleTool, Results: results})
			continue
		}
		if _, ok := toolResult(e); ok {
			continue // an orphan: its tool-call message is not in the history
		}
		if e.Text == "" {
			continue
		}
		switch e.Author {
		case AuthorUser:
			msgs = append(msgs, Message{Role: RoleUser, Text: e.Text + attachmentNote(turn.AttachmentsOf(e), false)})
		case AuthorAssistant, "":
			msgs = append(msgs, Message{Role: RoleAssistant, Text: e.Text})
		case AuthorSystem:
			msgs = append(msgs, Message{Role: RoleSystem, Text: e.Text})
		default:
			msgs = append(msgs, Message{Role: RoleUser, Text: "[" + e.Author + "] " + e.Text})
		}
	}
	return msgs
}

// isJSONObject reports whether raw is a JSON object.
func isJSONObject(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && raw[0] == '{' && json.Valid(raw)
}

// ObjectArguments returns a call's arguments as a JSON object, for a protocol whose tool
// call input must be one (Anthropic's tool_use "input"): the arguments when they are an
// object, {} when empty, and otherwise {"arguments": the value} (arguments an OpenAI model
// sent that are not an object, carried over to Anthropic).
func ObjectArguments(raw json.RawMessage) json.RawMessage {
	switch {
	case isJSONObject(raw):
		return bytes.TrimSpace(raw)
	case len(bytes.TrimSpace(raw)) == 0 || !json.Valid(raw):
		return json.RawMessage("{}")
	}
	wrapped, _ := json.Marshal(map[string]json.RawMessage{"arguments": raw})
	return wrapped
}
