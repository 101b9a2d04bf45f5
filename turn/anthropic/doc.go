// Package anthropic is a turn.ModelClient for Anthropic's Messages API
// (https://docs.anthropic.com/en/api/messages), built on the official SDK,
// github.com/anthropics/anthropic-sdk-go/v2. It runs the tool loop of package agent with the
// same agent.Tool values as turn/chatcompletion, so a host switches providers by changing one
// constructor: anthropic.New instead of chatcompletion.New.
//
// # One turn
//
// Each model call is one POST to BaseURL + "/v1/messages" (a step of the turn's journal) with
// Config.SystemPrompt as "system", MaxTokens as "max_tokens", Config.Tools as "tools" (name,
// description, the arguments' JSON schema as "input_schema"), and the messages of
// agent.History (the session's recent events) plus the request's text, mapped by Messages:
// an assistant's tool calls are tool_use blocks, the tools' outputs tool_result blocks (with
// is_error for a failed tool) in the next user message, first in it, all the results of one
// reply in one message; roles alternate, starting with the user. A reply's tool_use blocks
// (several for a parallel call) run in parallel. The final answer is the turn's last event:
// Author "assistant", Text the reply's text blocks, Data a JSON ReplyData.
//
// The SDK's anthropic.NewClient reads the environment (ANTHROPIC_API_KEY,
// ANTHROPIC_AUTH_TOKEN, ANTHROPIC_BASE_URL, profiles, custom headers); this client never
// does: it builds the SDK's message service from its Config alone, sending Config.APIKey as
// "x-api-key".
//
// # Errors and retries
//
// The SDK's own retries are off (turnstile's consumer owns retries and rate-limit pauses).
// Respond maps the outcome of each request onto turnstile's error kinds (turn.Classify),
// following Anthropic's errors guide (https://docs.anthropic.com/en/api/errors):
//
//	HTTP 429 rate_limit_error,    turn.RetryAfter(d, err): pause, no attempt spent. d comes
//	HTTP 529 overloaded_error     from retry-after-ms, else Retry-After (RFC 9110 section
//	(or either error type)        10.2.3); 0 when absent, which leaves the delay to the
//	                              consumer's backoff
//	HTTP 408, 409                 plain error: a failed attempt
//	other HTTP 4xx                turn.Permanent(err): dead-lettered at once (400
//	                              invalid_request_error, 401 authentication_error, 403
//	                              permission_error, 404 not_found_error, 413
//	                              request_too_large). A 4xx with "x-should-retry: true" is a
//	                              failed attempt instead.
//	connection refused, DNS       turn.Unavailable(err): the request was never sent
//	HTTP 5xx (500 api_error),     plain error: a failed attempt
//	other network errors
//	Config.Timeout or the         ErrTimeout: a failed attempt
//	HTTPClient's Timeout expired
//	ctx ended                     the context's error, unchanged: the caller abandoned the turn
//
// Errors carrying an HTTP status wrap the SDK's *anthropic.Error, so errors.As reaches its
// StatusCode, Type and Response.
package anthropic
