package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turn/agent"
)

// DefaultBaseURL is Anthropic's API, Config.BaseURL's default.
const DefaultBaseURL = "https://api.anthropic.com"

// DefaultMaxTokens is Config.MaxTokens' default. The Messages API requires max_tokens.
const DefaultMaxTokens = 1024

// ErrInvalidConfig is wrapped by the errors of New and Config.Validate, which name the field.
var ErrInvalidConfig = errors.New("anthropic: invalid config")

// ErrTimeout is wrapped by the error of a request that ran past Config.Timeout or the
// Timeout of Config.HTTPClient while the caller's context was still live. It counts as a
// failed attempt (turn.KindAttempt). It does not wrap context.DeadlineExceeded, so that no
// caller mistakes the model's timeout for the end of its own context.
var ErrTimeout = errors.New("anthropic: model request timed out")

// Config configures a Client. Model is required; the zero value of every other field means
// its default or "none". It mirrors turn/chatcompletion's Config, so a host switches
// providers by changing one constructor.
type Config struct {
	// BaseURL is the API root, up to but not including "/v1/messages"; "" means
	// DefaultBaseURL. An absolute http or https URL (a gateway, a test server).
	BaseURL string
	// APIKey is sent as the "x-api-key" header (Anthropic's authentication,
	// https://docs.anthropic.com/en/api/overview); empty sends none (a gateway that adds its
	// own). The environment is never read: ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN,
	// ANTHROPIC_BASE_URL and the other ANTHROPIC_* variables the SDK's NewClient picks up do
	// not apply to this client.
	APIKey string
	// Model is the model name ("claude-sonnet-4-5", ...).
	Model string
	// SystemPrompt, when not empty, is sent as the request's "system", before the request's
	// own system prompt (agent.Request.System: the conversation's summary, or the
	// summarization instruction).
	SystemPrompt string
	// MaxTokens bounds the tokens of each reply ("max_tokens", which the API requires); 0
	// means DefaultMaxTokens.
	MaxTokens int
	// HTTPClient makes the requests; nil means a client with http.DefaultTransport and no
	// timeout of its own. Its Timeout, if set, behaves like Timeout.
	HTTPClient *http.Client
	// Timeout bounds each request, reply body included; 0 leaves it to the caller's context
	// (the Runner's whole-turn deadline). A request that runs past it fails its attempt with
	// ErrTimeout. Keep it below the Runner's TurnTimeout, or it never fires.
	Timeout time.Duration
	// Tools are the tools the model may call (agent.NewTool, agent.NewDeferred), sent as the
	// request's "tools" with their JSON schemas as "input_schema"; names are unique.
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
	if c.BaseURL != "" {
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
	}
	if strings.TrimSpace(c.Model) == "" {
		return invalid("Model", "empty")
	}
	if c.MaxTokens < 0 {
		return invalid("MaxTokens", "negative (%d); use 0 for %d", c.MaxTokens, DefaultMaxTokens)
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

// Client is a turn.ModelClient (and an agent.Provider) that calls Anthropic's Messages API.
// Make one with New; it is safe for concurrent use.
type Client struct {
	cfg      Config
	messages sdk.MessageService
	loop     *agent.Agent
}

var (
	_ turn.ModelClient = (*Client)(nil)
	_ agent.Provider   = (*Client)(nil)
)

// New returns a Client for cfg, or an error wrapping ErrInvalidConfig that names the bad field
// (and agent.ErrInvalidTool for a bad tool). It makes no request: a wrong key or model shows
// on the first turn (as a permanent error, see the package doc).
func New(cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultBaseURL
	}
	if cfg.MaxTokens == 0 {
		cfg.MaxTokens = DefaultMaxTokens
	}
	httpClient := cfg.HTTPClient
	if httpClient == nil {
		httpClient = &http.Client{}
	}
	opts := []option.RequestOption{
		option.WithBaseURL(cfg.BaseURL),
		option.WithHTTPClient(httpClient),
		option.WithMaxRetries(0), // the consumer retries and pauses, see the package doc
		// The SDK's own per-request timeout (10 minutes, and a refusal of a large max_tokens
		// without streaming) is replaced: Config.Timeout and the caller's context bound it.
		option.WithRequestTimeout(cmpOr(cfg.Timeout, 24*time.Hour)),
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithHeader("x-api-key", cfg.APIKey))
	}
	// sdk.NewClient would prepend sdk.DefaultClientOptions: ANTHROPIC_API_KEY,
	// ANTHROPIC_AUTH_TOKEN, profiles, ANTHROPIC_BASE_URL and ANTHROPIC_CUSTOM_HEADERS from
	// the environment. The service alone takes only the options given here.
	c := &Client{cfg: cfg, messages: sdk.NewMessageService(opts...)}
	loop, err := agent.New(agent.Config{Provider: c, Tools: cfg.Tools, MaxModelSteps: cfg.MaxModelSteps})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	c.loop = loop
	return c, nil
}

func cmpOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// Model returns the configured model name.
func (c *Client) Model() string { return c.cfg.Model }

// ReplyData is the JSON in the Data of the final answer's event.
//
//	{"id":"msg_01","model":"claude-sonnet-4-5","stop_reason":"end_turn",
//	 "usage":{"input_tokens":31,"output_tokens":9}}
type ReplyData struct {
	// ID is the API's id of the message.
	ID string `json:"id,omitempty"`
	// Model is the model that answered, as the API names it.
	Model string `json:"model"`
	// StopReason is why generation stopped: "end_turn", "max_tokens", "stop_sequence",
	// "tool_use", "refusal", ...
	StopReason string `json:"stop_reason"`
	// Usage counts the tokens of the request, as the API reports them.
	Usage Usage `json:"usage"`
}

// Usage counts the tokens of one request.
type Usage struct {
	// InputTokens counts the tokens sent (system prompt, history, tools), cache reads and
	// writes not included.
	InputTokens int64 `json:"input_tokens"`
	// OutputTokens counts the tokens of the reply.
	OutputTokens int64 `json:"output_tokens"`
}

// Respond runs the turn's tool loop (agent.Agent) over the Messages API: it sends the turn's
// messages (see the package doc for their mapping), runs the tools the model asks for with
// tool_use blocks, and sends their outputs back as tool_result blocks, until the model
// answers without tools. The Output's events are the assistant's tool-call messages and the
// tools' outputs (see package agent), then the final answer last: Author "assistant", Text
// the reply's text blocks, Data a JSON ReplyData. Errors are mapped onto turnstile's kinds as
// the package doc's table says; plus the loop's (agent.Agent.Respond).
func (c *Client) Respond(ctx context.Context, in turn.Input) (turn.Output, error) {
	return c.loop.Respond(ctx, in)
}

// Complete sends one Messages API request (agent.Provider) and returns the reply: its text
// blocks joined by newlines as Text, its tool_use blocks as tool calls, a JSON ReplyData as
// Data. Errors: Respond's mapping; a failed attempt for a reply with neither text nor
// tool_use blocks.
func (c *Client) Complete(ctx context.Context, req agent.Request) (agent.Reply, error) {
	rctx := ctx
	if c.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeoutCause(ctx, c.cfg.Timeout, ErrTimeout)
		defer cancel()
	}
	var raw *http.Response
	msg, err := c.messages.New(rctx, c.params(req), option.WithResponseInto(&raw))
	if err != nil {
		return agent.Reply{}, c.mapError(ctx, err, raw)
	}
	reply := agent.Reply{Usage: agent.Usage{InputTokens: msg.Usage.InputTokens, OutputTokens: msg.Usage.OutputTokens}}
	var texts []string
	for _, b := range msg.Content {
		switch b.Type {
		case "text":
			if b.Text != "" {
				texts = append(texts, b.Text)
			}
		case "tool_use":
			reply.ToolCalls = append(reply.ToolCalls, agent.ToolCall{ID: b.ID, Name: b.Name, Arguments: agent.ObjectArguments(b.Input)})
		}
	}
	reply.Text = strings.Join(texts, "\n")
	if reply.Text == "" && len(reply.ToolCalls) == 0 {
		return agent.Reply{}, fmt.Errorf("anthropic: model %s: empty reply (stop_reason %q)", c.cfg.Model, msg.StopReason)
	}
	data := ReplyData{ID: msg.ID, Model: msg.Model, StopReason: string(msg.StopReason),
		Usage: Usage{InputTokens: msg.Usage.InputTokens, OutputTokens: msg.Usage.OutputTokens}}
	if reply.Data, err = json.Marshal(data); err != nil {
		return agent.Reply{}, fmt.Errorf("anthropic: encode reply data: %w", err)
	}
	return reply, nil
}

// params builds the request body of one model call.
func (c *Client) params(req agent.Request) sdk.MessageNewParams {
	p := sdk.MessageNewParams{
		Model:     c.cfg.Model,
		MaxTokens: int64(c.cfg.MaxTokens),
		Messages:  Messages(req.Messages),
	}
	if system := agent.JoinSystem(c.cfg.SystemPrompt, req.System); system != "" {
		p.System = []sdk.TextBlockParam{{Text: system}}
	}
	for _, t := range req.Tools {
		p.Tools = append(p.Tools, sdk.ToolUnionParam{OfTool: toolParam(t)})
	}
	return p
}

// toolParam maps a tool's definition onto the API's custom tool: name, description and the
// arguments' JSON schema as input_schema (an object schema).
func toolParam(t agent.ToolSpec) *sdk.ToolParam {
	schema := sdk.ToolInputSchemaParam{ExtraFields: map[string]any{}}
	for k, v := range t.Schema {
		switch k {
		case "type":
		case "properties":
			schema.Properties = v
		case "required":
			if list, ok := v.([]any); ok {
				for _, name := range list {
					if s, ok := name.(string); ok {
						schema.Required = append(schema.Required, s)
					}
				}
			}
		default:
			schema.ExtraFields[k] = v
		}
	}
	p := &sdk.ToolParam{Name: t.Name, InputSchema: schema}
	if t.Description != "" {
		p.Description = sdk.String(t.Description)
	}
	return p
}

// Messages maps provider-neutral messages (agent.History's, then the turn's) onto the
// Messages API's, which its docs constrain (https://docs.anthropic.com/en/api/messages):
// roles alternate, starting with "user"; an assistant's tool calls are tool_use blocks and
// their results tool_result blocks (with is_error) in the next user message, before any other
// block of it. So consecutive messages of one side are merged into one message (a user's
// text after tool results joins their message, after them); a RoleSystem message becomes a
// user text block "[system] Text"; empty texts are left out; and leading messages before the
// first user message are dropped, with the tool results that answered them.
func Messages(msgs []agent.Message) []sdk.MessageParam {
	type turnMsg struct {
		user   bool
		blocks []sdk.ContentBlockParamUnion
		nres   int // the tool_result blocks at the start of blocks
	}
	var out []turnMsg
	add := func(user, result bool, b sdk.ContentBlockParamUnion) {
		if len(out) == 0 || out[len(out)-1].user != user {
			out = append(out, turnMsg{user: user})
		}
		m := &out[len(out)-1]
		if result { // tool_result blocks first in their message
			m.blocks = append(m.blocks[:m.nres], append([]sdk.ContentBlockParamUnion{b}, m.blocks[m.nres:]...)...)
			m.nres++
			return
		}
		m.blocks = append(m.blocks, b)
	}
	for _, m := range msgs {
		switch m.Role {
		case agent.RoleUser, agent.RoleSystem:
			text := m.Text
			if m.Role == agent.RoleSystem && text != "" {
				text = "[system] " + text
			}
			if text != "" {
				add(true, false, sdk.NewTextBlock(text))
			}
		case agent.RoleAssistant:
			if m.Text != "" {
				add(false, false, sdk.NewTextBlock(m.Text))
			}
			for _, tc := range m.ToolCalls {
				add(false, false, sdk.NewToolUseBlock(tc.ID, agent.ObjectArguments(tc.Arguments), tc.Name))
			}
		case agent.RoleTool:
			for _, r := range m.Results {
				add(true, true, sdk.NewToolResultBlock(r.CallID, r.Output, r.IsError))
			}
		}
	}
	// The conversation starts with the user: drop a leading assistant message, and the tool
	// results of the user message after it, which answered its calls.
	for len(out) > 0 && !out[0].user {
		out = out[1:]
		if len(out) > 0 {
			out[0].blocks, out[0].nres = out[0].blocks[out[0].nres:], 0
			if len(out[0].blocks) == 0 {
				out = out[1:]
			}
		}
	}
	params := make([]sdk.MessageParam, len(out))
	for i, m := range out {
		if m.user {
			params[i] = sdk.NewUserMessage(m.blocks...)
		} else {
			params[i] = sdk.NewAssistantMessage(m.blocks...)
		}
	}
	return params
}
