// Package chatcompletion is a turn.ModelClient for servers that speak OpenAI's
// chat-completions protocol: Ollama, vLLM, the llama.cpp server, OpenAI itself and the many
// gateways that copy it. It is built on the official SDK, github.com/openai/openai-go/v3.
//
// # One turn
//
// Respond runs the tool loop of package agent over this protocol: one POST to BaseURL +
// "/chat/completions" per model call (agent.Provider's Complete), each a step of the turn's
// journal, until the model answers without tool calls (or Config.MaxModelSteps calls). The
// first call sends these messages, in order:
//
//  1. Config.SystemPrompt as a system message, when it is set;
//  2. the session's recent events (turn.Input.Session.Events, oldest first), as agent.History
//     maps them;
//  3. the request's text (turn.Input.Request.Text) as the final user message.
//
// A history event becomes a message by its Author:
//
//	"user"       user message, Text as is
//	"assistant"  assistant message, Text as is ("" too: the Runner's default author); with
//	             tool calls in Data (agent.AssistantEvent), an assistant message with
//	             "tool_calls" ({"id","type":"function","function":{"name","arguments"}})
//	"tool"       with agent.ToolEvent's Data: a "tool" message with its "tool_call_id",
//	             right after the assistant message that made the call (a tool output whose
//	             call the Runner's HistoryLimit cut off is dropped; a call whose output is
//	             missing gets an error output, so every tool_call is answered)
//	"system"     system message, Text as is, in its place in the history
//	anything else, and a host's own "tool" event without agent.ToolEvent's Data:
//	             user message "[author] Text"
//
// Events with an empty Text are skipped, except tool calls and tool outputs. Some chat
// templates (served by vLLM or llama.cpp) reject a system message that is not first: keep
// "system" events out of the history for those models.
//
// Config.Tools are sent as "tools" (type "function", with the JSON schema of their arguments
// as "parameters"). A reply's tool calls (several at once for a parallel call) run in
// parallel; the next call sends the assistant message with its "tool_calls" and a "tool"
// message per call, in call order, with the call's "tool_call_id" and the tool's output (or
// its error text) as content. Tool-call ids stay the server's within a turn, because the
// journal replays a recorded model call; the tools' idempotency keys come from the journal's
// steps, never from those ids (see package agent).
//
// The final answer becomes the turn's last event, Author "assistant", Text the first choice's
// content (or its refusal), Data a JSON ReplyData (model, finish_reason, token usage). A reply
// without choices, or whose first choice has neither content, refusal nor tool calls, is a
// failed attempt.
//
// # Errors and retries
//
// The SDK's own retries are off: turnstile's consumer owns retries and rate-limit pauses, and
// an SDK retry inside a turn would spend the whole-turn deadline while the partition waits.
// Respond maps the outcome of its single HTTP request onto turnstile's error kinds
// (turn.Classify):
//
//	HTTP 429                      turn.RetryAfter(d, err): pause, no attempt spent. d comes
//	                              from retry-after-ms, else Retry-After (delay-seconds or an
//	                              HTTP-date, RFC 9110 section 10.2.3); 0 when absent, which
//	                              leaves the delay to the consumer's backoff. The consumer
//	                              dead-letters a request rate limited too often
//	                              (consumer.Config.MaxRateLimits).
//	HTTP 429 "Request too large"  turn.Permanent(err): the request alone exceeds a per-minute
//	                              limit (tokens per min), so no wait lets it through
//	HTTP 429 insufficient_quota   plain error: a failed attempt; waiting does not restore a
//	                              spent quota
//	HTTP 408, 409                 plain error: a failed attempt (timeout; conflict, which
//	                              OpenAI's SDKs retry too)
//	other HTTP 4xx                turn.Permanent(err): dead-lettered at once. A 4xx that says
//	                              "x-should-retry: true" is a failed attempt instead.
//	HTTP 503                      turn.RetryAfter(d, err) when Retry-After says d, else
//	                              turn.Unavailable(err): retried, no attempt spent
//	connection refused, DNS       turn.Unavailable(err): the request was never sent
//	other HTTP 5xx, other         plain error: a failed attempt (the request may be the
//	network errors                cause: a model that crashes on it, a gateway timing out)
//	Config.Timeout or the         ErrTimeout: a failed attempt
//	HTTPClient's Timeout expired
//	ctx ended                     the context's error, unchanged: the caller abandoned the turn
//
// The split follows OpenAI's error codes guide (https://platform.openai.com/docs/guides/error-codes):
// 400, 401, 403, 404 and 422 describe a request or a setup that sending again cannot fix, 429
// is a rate limit, 5xx and 503 "slow down" are the server's trouble. Two consequences a host
// should know: a wrong API key (401) or model name (404) dead-letters every request until it
// is fixed, so check the configuration at start-up; and OpenAI's 429 "insufficient_quota"
// pauses the consumer like any rate limit (nothing is dead-lettered while the bill is unpaid).
//
// Errors carrying an HTTP status wrap the SDK's *openai.Error, so errors.As reaches its
// StatusCode, Code, Message and Response.
package chatcompletion
