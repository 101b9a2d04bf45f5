package chatcompletion

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
	"github.com/tiktoken-go/tokenizer"

	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turn/agent"
)

// Base URLs of common servers, for Config.BaseURL. Each ends before "/chat/completions".
const (
	// OpenAIBaseURL is OpenAI's API.
	OpenAIBaseURL = "https://api.openai.com/v1"
	// OllamaBaseURL is a local Ollama server on its default port.
	OllamaBaseURL = "http://localhost:11434/v1"
)

// ErrInvalidConfig is wrapped by the errors of New and Config.Validate, which name the field.
var ErrInvalidConfig = errors.New("chatcompletion: invalid config")

// ErrTimeout is wrapped by the error of a request that ran past Config.Timeout or the
// Timeout of Config.HTTPClient while the caller's context was still live. It counts as a
// failed attempt (turn.KindAttempt). It does not wrap context.DeadlineExceeded, so that no
// caller mistakes the model's timeout for the end of its own context.
var ErrTimeout = errors.New("chatcompletion: model request timed out")

// Config configures a Client. BaseURL and Model are required; the zero value of every other
// field means "the server's default" or "none".
type Config struct {
	// BaseURL is the API root, up to but not including "/chat/completions": OllamaBaseURL,
	// OpenAIBaseURL, "http://vllm:8000/v1". An absolute http or https URL.
	BaseURL string
	// APIKey is sent as "Authorization: Bearer APIKey"; empty sends no Authorization header
	// (Ollama and llama.cpp need none). The environment is never read: OPENAI_API_KEY and the
	// other OPENAI_* variables the SDK's NewClient picks up do not apply to this client.
	APIKey string
	// Model is the model name the server knows ("gpt-4o-mini", "llama3.2", ...).
	Model string
	// SystemPrompt, when not empty, is sent as the first message of every request, before the
	// request's own system prompt (agent.Request.System: the conversation's summary, or the
	// summarization instruction), in one system message.
	SystemPrompt string
	// Temperature is the sampling temperature in [0, 2], OpenAI's range; nil leaves it to the
	// server.
	Temperature *float64
	// MaxTokens bounds the tokens of the reply, sent as "max_tokens", the field every
	// compatible server reads (OpenAI's reasoning models want "max_completion_tokens"
	// instead: leave MaxTokens 0 for them). 0 leaves it to the server.
	MaxTokens int
	// HTTPClient makes the requests; nil means a client with http.DefaultTransport and no
	// timeout of its own. Its Timeout, if set, behaves like Timeout.
	HTTPClient *http.Client
	// Timeout bounds each request, reply body included; 0 leaves it to the caller's context
	// (the Runner's whole-turn deadline). A request that runs past it fails its attempt with
	// ErrTimeout. Keep it below the Runner's TurnTimeout, or it never fires.
	Timeout time.Duration
	// Tools are the tools the model may call (agent.NewTool, agent.NewDeferred), sent as the
	// request's "tools" with their JSON schemas; none sends no tools. Names are unique.
	Tools []agent.Tool
	// MaxModelSteps bounds the model calls of one turn (agent.Config.MaxModelSteps); 0 means
	// agent.DefaultMaxModelSteps.
	MaxModelSteps int
}

// Validate reports the first field that is missing or out of range, wrapping
// ErrInvalidConfig; an invalid tool's error wraps agent.ErrInvalidTool too.
func (c Config) Validate() error {
	invalid := func(field, problem string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalidConfig, field, fmt.Sprintf(problem, args...))
	}
	if strings.TrimSpace(c.BaseURL) == "" {
		return invalid("BaseURL", "empty (for Ollama use %s)", OllamaBaseURL)
	}
	u, err := url.Parse(c.BaseURL)
	switch {
	case err != nil:
		return invalid("BaseURL", "%v", err)
	case u.Scheme != "http" && u.Scheme != "https":
		return invalid("BaseURL", "%q is not an http or https URL", c.BaseURL)
	case u.Host == "":
		return invalid("BaseURL", "%q has no host", c.BaseURL)
	case u.RawQuery != "" || u.Fragment != "":
		return invalid("BaseURL", "%q has a query or fragment", c.BaseURL)
	}
	if strings.TrimSpace(c.Model) == "" {
		return invalid("Model", "empty")
	}
	if t := c.Temperature; t != nil && (math.IsNaN(*t) || *t < 0 || *t > 2) {
		return invalid("Temperature", "%v is outside [0, 2]", *t)
	}
	if c.MaxTokens < 0 {
		return invalid("MaxTokens", "negative (%d); use 0 for the server's default", c.MaxTokens)
	}
	if c.Timeout < 0 {
		return invalid("Timeout", "negative (%s); use 0 for none", c.Timeout)
	}
	if c.MaxModelSteps < 0 {
		return invalid("MaxModelSteps", "negative (%d); use 0 for %d", c.MaxModelSteps, agent.DefaultMaxModelSteps)
	}
	if err := agent.ValidateTools(c.Tools); err != nil {
		return fmt.Errorf("%w: Tools: %w", ErrInvalidConfig, err)
	}
	return nil
}

// Client is a turn.ModelClient that calls a chat-completions server. Make one with New; it is
// safe for concurrent use.
type Client struct {
	cfg         Config
	completions openai.ChatCompletionService
	loop        *agent.Agent
	codecOnce   sync.Once
	tokens      tokenizer.Codec // Config.Model's tokenizer, nil when tiktoken has none
	counted     *lru.Cache[tokenKey, int]
}

var (
	_ turn.ModelClient = (*Client)(nil)
	_ agent.Provider   = (*Client)(nil)
)

// New returns a Client for cfg, or an error wrapping ErrInvalidConfig that names the bad
// field (and agent.ErrInvalidTool for a bad tool). It makes no request: a wrong key or model shows on the first turn (as a permanent
// error, see the package doc).
func New(cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	opts := []option.RequestOption{
		option.WithBaseURL(cfg.BaseURL),
		option.WithMaxRetries(0), // the consumer retries and pauses, see the package doc
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}
	if cfg.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(cfg.HTTPClient))
	}
	// openai.NewClient would add the OPENAI_* environment variables (key, organization,
	// project, custom headers) to every request, sending an OpenAI key to whatever server
	// BaseURL names. The service alone takes only the options given here.
	c := &Client{cfg: cfg, completions: openai.NewChatCompletionService(opts...)}
	loop, err := agent.New(agent.Config{Provider: c, Tools: cfg.Tools, MaxModelSteps: cfg.MaxModelSteps})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	c.loop = loop
	return c, nil
}

// Model returns the configured model name.
func (c *Client) Model() string { return c.cfg.Model }

// ReplyData is the JSON in the Data of the event Respond returns.
//
//	{"id":"chatcmpl-123","model":"llama3.2","finish_reason":"stop",
//	 "usage":{"prompt_tokens":31,"completion_tokens":9,"total_tokens":40}}
type ReplyData struct {
	// ID is the server's id of the completion, when it gives one.
	ID string `json:"id,omitempty"`
	// Model is the model that answered, as the server names it (it may add a version).
	Model string `json:"model"`
	// FinishReason is why generation stopped: "stop", "length", "content_filter", ...
	FinishReason string `json:"finish_reason"`
	// Refusal is true when the text is the model's refusal rather than its content.
	Refusal bool `json:"refusal,omitempty"`
	// Usage counts the tokens of the request, as the server reports them (zeros when it
	// reports none).
	Usage Usage `json:"usage"`
}

// Usage counts the tokens of one request, as the server's tokenizer counts them.
type Usage struct {
	// PromptTokens counts the tokens of the messages sent, history and system prompt included.
	PromptTokens int64 `json:"prompt_tokens"`
	// CompletionTokens counts the tokens of the reply.
	CompletionTokens int64 `json:"completion_tokens"`
	// TotalTokens is their sum, as the server reports it.
	TotalTokens int64 `json:"total_tokens"`
}

// Respond runs the turn's tool loop (agent.Agent) over this server: it sends the turn's
// messages (see the package doc for their order and mapping), runs the tools the model asks
// for, and sends their outputs back, until the model answers without tools. The Output's
// events are the assistant's tool-call messages and the tools' outputs (see package agent),
// then the final answer last: Author "assistant", Text the first choice's content, Data a
// JSON ReplyData. Errors are mapped onto turnstile's kinds as the package doc's table says:
// turn.RetryAfter for HTTP 429, turn.Permanent for other 4xx but 408 and 409, ErrTimeout for
// an expired Config.Timeout, the context's error when ctx ended, and a plain error (a failed
// attempt) otherwise; plus the loop's (agent.Agent.Respond).
func (c *Client) Respond(ctx context.Context, in turn.Input) (turn.Output, error) {
	return c.loop.Respond(ctx, in)
}

// Complete sends one chat-completions request (agent.Provider): req's system prompt, messages
// and tools, mapped as the package doc says, and returns the first choice: its content (or
// refusal) as Text, its function tool calls, and a JSON ReplyData as Data. Errors: Respond's
// mapping; a failed attempt for a reply without choices, or whose first choice has neither
// content, refusal nor tool calls.
func (c *Client) Complete(ctx context.Context, req agent.Request) (agent.Reply, error) {
	rctx := ctx
	if c.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeoutCause(ctx, c.cfg.Timeout, ErrTimeout)
		defer cancel()
	}
	var raw *http.Response
	resp, err := c.completions.New(rctx, c.params(req), option.WithResponseInto(&raw))
	if err != nil {
		return agent.Reply{}, c.mapError(ctx, err, raw)
	}
	if len(resp.Choices) == 0 {
		return agent.Reply{}, fmt.Errorf("chatcompletion: model %s: reply has no choices", c.cfg.Model)
	}
	choice := resp.Choices[0]
	data := ReplyData{
		ID: resp.ID, Model: resp.Model, FinishReason: choice.FinishReason,
		Usage: Usage{
			PromptTokens:     resp.Usage.PromptTokens,
			CompletionTokens: resp.Usage.CompletionTokens,
			TotalTokens:      resp.Usage.TotalTokens,
		},
	}
	reply := agent.Reply{
		Text:  choice.Message.Content,
		Usage: agent.Usage{InputTokens: resp.Usage.PromptTokens, OutputTokens: resp.Usage.CompletionTokens},
	}
	if reply.Text == "" && choice.Message.Refusal != "" {
		reply.Text, data.Refusal = choice.Message.Refusal, true
	}
	for _, tc := range choice.Message.ToolCalls {
		if tc.Type != "function" && tc.Type != "" { // custom tools are not sent, so not called
			continue
		}
		reply.ToolCalls = append(reply.ToolCalls, agent.ToolCall{
			ID: tc.ID, Name: tc.Function.Name, Arguments: agent.RawArguments(tc.Function.Arguments),
		})
	}
	if reply.Text == "" && len(reply.ToolCalls) == 0 {
		return agent.Reply{}, fmt.Errorf("chatcompletion: model %s: empty reply (finish_reason %q)", c.cfg.Model, choice.FinishReason)
	}
	if reply.Data, err = json.Marshal(data); err != nil {
		return agent.Reply{}, fmt.Errorf("chatcompletion: encode reply data: %w", err)
	}
	return reply, nil
}

// params builds the request body of one model call.
func (c *Client) params(req agent.Request) openai.ChatCompletionNewParams {
	p := openai.ChatCompletionNewParams{
		Model:    c.cfg.Model,
		Messages: messages(agent.JoinSystem(c.cfg.SystemPrompt, req.System), req.Messages),
	}
	for _, t := range req.Tools {
		def := shared.FunctionDefinitionParam{Name: t.Name, Parameters: shared.FunctionParameters(t.Schema)}
		if t.Description != "" {
			def.Description = openai.String(t.Description)
		}
		p.Tools = append(p.Tools, openai.ChatCompletionFunctionTool(def))
	}
	if c.cfg.Temperature != nil {
		p.Temperature = openai.Float(*c.cfg.Temperature)
	}
	if c.cfg.MaxTokens > 0 {
		p.MaxTokens = openai.Int(int64(c.cfg.MaxTokens))
	}
	return p
}

// Messages returns the message list of one turn's first model call: the system prompt (when
// not empty), the history's messages (agent.History: tool calls and tool outputs in the
// protocol's own form, other events mapped by Author as the package doc says), then text as
// the final user message. Respond uses the same mapping; it is exported for hosts that build
// their own request around the same history.
func Messages(systemPrompt string, history []session.Event, text string) []openai.ChatCompletionMessageParamUnion {
	return messages(systemPrompt, append(agent.History(history), agent.Message{Role: agent.RoleUser, Text: text}))
}

// messages maps provider-neutral messages onto the protocol's: an assistant message with its
// tool_calls, and one "tool" message per tool result, with its tool_call_id.
func messages(systemPrompt string, msgs []agent.Message) []openai.ChatCompletionMessageParamUnion {
	out := make([]openai.ChatCompletionMessageParamUnion, 0, len(msgs)+1)
	if systemPrompt != "" {
		out = append(out, openai.SystemMessage(systemPrompt))
	}
	for _, m := range msgs {
		switch m.Role {
		case agent.RoleUser:
			out = append(out, openai.UserMessage(m.Text))
		case agent.RoleSystem:
			out = append(out, openai.SystemMessage(m.Text))
		case agent.RoleAssistant:
			if len(m.ToolCalls) == 0 {
				out = append(out, openai.AssistantMessage(m.Text))
				continue
			}
			msg := openai.ChatCompletionAssistantMessageParam{}
			if m.Text != "" {
				msg.Content.OfString = openai.String(m.Text)
			}
			for _, tc := range m.ToolCalls {
				msg.ToolCalls = append(msg.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
						ID:       tc.ID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: tc.Name, Arguments: string(tc.Arguments)},
					},
				})
			}
			out = append(out, openai.ChatCompletionMessageParamUnion{OfAssistant: &msg})
		case agent.RoleTool:
			for _, r := range m.Results {
				out = append(out, openai.ToolMessage(r.Output, r.CallID))
			}
		}
	}
	return out
}
