// Package agent is turnstile's provider-neutral tool loop: one owner of the loop that calls
// the model, runs the tools it asks for and calls it again with their outputs, used by every
// model client (turn/chatcompletion for OpenAI-compatible servers, turn/anthropic for
// Anthropic's Messages API). A host writes its tools once, as agent.Tool values, and switches
// providers by changing one constructor.
//
// # Tools
//
// NewTool makes a tool run inside the turn; NewDeferred a fire-and-forget tool whose call is
// queued to the outbox and delivered after the turn commits (Deliverer is the relay's
// delivery function). Their argument types give the JSON schemas the providers get, generated
// by github.com/invopop/jsonschema.
//
// # Steps and keys
//
// Each model call and each tool call is a step of the turn's journal (turn.Journal): a model
// call is the step "model", recording the assistant's Reply as JSON; a tool call is the step
// "tool:NAME", recording its output (or, for a deferred tool, its intent). When a request
// runs again after a crash, a revoke or a failed attempt, the steps that completed return
// their recorded outputs without running, and only the step in flight runs again.
//
// The tool-call ids a provider generates ("call_...", "toolu_...") change on every model
// call, even for the same conversation. They stay stable within a turn only because a
// recorded model step replays its recorded reply, ids included. Idempotency keys never come
// from them: a tool's Call.Key is its step's key (turn.Step.Key, derived from the step's
// ordinal and name in the turn and the turn's session), the same on every run of the turn.
// Pass it to the service a side-effecting tool calls.
//
// # Session events
//
// A turn's Output holds, per model call that asked for tools, an assistant event with the
// calls (AssistantEvent: Author "assistant", Data {"tool_calls":[{"id","name","arguments"}]})
// and an event per tool output (ToolEvent: Author "tool", Text the output, Data
// {"tool_call_id","name","is_error"}), then the final answer last (Author "assistant"). The
// next turn reads them back with History, which keeps the history valid for both protocols:
// tool outputs whose tool-call message the Runner's HistoryLimit cut off are dropped.
package agent
