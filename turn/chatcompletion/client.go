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
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
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
	// SystemPrompt, when not empty, is sent as the first message of every request.
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
}

// Validate reports the first field that is missing or out of range, wrapping
// ErrInvalidConfig.
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
	return nil
}

// Client is a turn.ModelClient that calls a chat-completions server. Make one with New; it is
// safe for concurrent use.
type Client struct {
	cfg         Config
	completions openai.ChatCompletionService
}

var _ turn.ModelClient = (*Client)(nil)

// New returns a Client for cfg, or an error wrapping ErrInvalidConfig that names the bad
// field. It makes no request: a wrong key or model shows on the first turn (as a permanent
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
	return &Client{cfg: cfg, completions: openai.NewChatCompletionService(opts...)}, nil
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

// Respond sends the turn's messages (see the package doc for their order and mapping) and
// returns the first choice of the reply as one assistant event. Errors are mapped onto
// turnstile's kinds as the package doc's table says: turn.RetryAfter for HTTP 429,
// turn.Permanent for other 4xx but 408 and 409, ErrTimeout for an expired Config.Timeout, the
// context's error when ctx ended, and a plain error (a failed attempt) otherwise.
func (c *Client) Respond(ctx context.Context, in turn.Input) (turn.Output, error) {
	rctx := ctx
	if c.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeoutCause(ctx, c.cfg.Timeout, ErrTimeout)
		defer cancel()
	}
	var raw *http.Response
	resp, err := c.completions.New(rctx, c.params(in), option.WithResponseInto(&raw))
	if err != nil {
		return turn.Output{}, c.mapError(ctx, err, raw)
	}
	if len(resp.Choices) == 0 {
		return turn.Output{}, fmt.Errorf("chatcompletion: model %s: reply has no choices", c.cfg.Model)
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
	text := choice.Message.Content
	if text == "" && choice.Message.Refusal != "" {
		text, data.Refusal = choice.Message.Refusal, true
	}
	if text == "" {
		return turn.Output{}, fmt.Errorf("chatcompletion: model %s: empty reply (finish_reason %q)", c.cfg.Model, choice.FinishReason)
	}
	encoded, err := json.Marshal(data)
	if err != nil {
		return turn.Output{}, fmt.Errorf("chatcompletion: encode reply data: %w", err)
	}
	return turn.Output{Events: []session.Event{{Author: "assistant", Text: text, Data: encoded}}}, nil
}

// params builds the request body of one turn.
func (c *Client) params(in turn.Input) openai.ChatCompletionNewParams {
	p := openai.ChatCompletionNewParams{
		Model:    c.cfg.Model,
		Messages: Messages(c.cfg.SystemPrompt, in.Session.Events, in.Request.Text),
	}
	if c.cfg.Temperature != nil {
		p.Temperature = openai.Float(*c.cfg.Temperature)
	}
	if c.cfg.MaxTokens > 0 {
		p.MaxTokens = openai.Int(int64(c.cfg.MaxTokens))
	}
	return p
}

// Messages returns the message list of one turn: the system prompt (when not empty), one
// message per history event with a non-empty Text, mapped by Author as the package doc says,
// then text as the final user message. Respond uses it; it is exported for hosts that build
// their own request around the same history.
func Messages(systemPrompt string, history []session.Event, text string) []openai.ChatCompletionMessageParamUnion {
	msgs := make([]openai.ChatCompletionMessageParamUnion, 0, len(history)+2)
	if systemPrompt != "" {
		msgs = append(msgs, openai.SystemMessage(systemPrompt))
	}
	for _, e := range history {
		if e.Text == "" {
			continue
		}
		switch e.Author {
		case "user":
			msgs = append(msgs, openai.UserMessage(e.Text))
		case "assistant", "": // "" is the Runner's default author, "assistant"
			msgs = append(msgs, openai.AssistantMessage(e.Text))
		case "system":
			msgs = append(msgs, openai.SystemMessage(e.Text))
		default:
			msgs = append(msgs, openai.UserMessage("["+e.Author+"] "+e.Text))
		}
	}
	return append(msgs, openai.UserMessage(text))
}
