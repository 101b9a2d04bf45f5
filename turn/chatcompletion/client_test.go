package chatcompletion_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turn/chatcompletion"
)

// wireRequest is the part of a chat-completions request body the tests look at.
type wireRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
	Temperature *float64 `json:"temperature"`
	MaxTokens   *int     `json:"max_tokens"`
}

// seen is one request as the fake server received it.
type seen struct {
	Method, Path, Auth string
	Body               wireRequest
}

// fakeServer speaks the chat-completions protocol at /v1/chat/completions and answers with
// the handler it was given.
type fakeServer struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []seen
}

func newFakeServer(t *testing.T, reply http.HandlerFunc) *fakeServer {
	t.Helper()
	f := &fakeServer{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := seen{Method: r.Method, Path: r.URL.Path, Auth: r.Header.Get("Authorization")}
		data, err := io.ReadAll(r.Body)
		if err == nil {
			err = json.Unmarshal(data, &s.Body)
		}
		if err != nil {
			http.Error(w, "fake server: bad request body: "+err.Error(), http.StatusTeapot)
			return
		}
		f.mu.Lock()
		f.reqs = append(f.reqs, s)
		f.mu.Unlock()
		if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
			http.NotFound(w, r)
			return
		}
		reply(w, r)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeServer) requests() []seen {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]seen(nil), f.reqs...)
}

// replyJSON answers with a status and a JSON body.
func replyJSON(status int, body string, headers ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		for i := 0; i+1 < len(headers); i += 2 {
			w.Header().Set(headers[i], headers[i+1])
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

// completion is a chat.completion body with one choice.
func completion(content, finish string) string {
	return fmt.Sprintf(`{"id":"chatcmpl-1","object":"chat.completion","created":1764478800,"model":"test-model-2026",
		"choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":%q}],
		"usage":{"prompt_tokens":31,"completion_tokens":9,"total_tokens":40}}`, content, finish)
}

// errorBody is an OpenAI-style error body.
func errorBody(message, typ, code string) string {
	return fmt.Sprintf(`{"error":{"message":%q,"type":%q,"param":null,"code":%q}}`, message, typ, code)
}

// setup starts a fake server with reply and a Client pointing at it; edit changes the config.
func setup(t *testing.T, reply http.HandlerFunc, edit ...func(*chatcompletion.Config)) (*fakeServer, *chatcompletion.Client) {
	t.Helper()
	f := newFakeServer(t, reply)
	cfg := chatcompletion.Config{BaseURL: f.URL + "/v1", Model: "test-model"}
	for _, e := range edit {
		e(&cfg)
	}
	c, err := chatcompletion.New(cfg)
	require.NoError(t, err)
	return f, c
}

func input(text string, history ...session.Event) turn.Input {
	return turn.Input{
		Request: turn.Request{Schema: turn.SchemaVersion, ID: uuid.NewString(), ConversationID: "c-1", UserID: "u-1", Text: text},
		Session: session.Session{Key: session.Key{App: "test", User: "u-1", Conversation: "c-1"}, Events: history, EventCount: int64(len(history))},
		Attempt: 1,
	}
}

func TestRespondSendsHistoryAndReturnsEvent(t *testing.T) {
	t.Parallel()
	f, c := setup(t, replyJSON(http.StatusOK, completion("Your refund r-1 was issued on Monday.", "stop")),
		func(cfg *chatcompletion.Config) {
			cfg.APIKey = "sk-test"
			cfg.SystemPrompt = "You are a support agent."
			cfg.Temperature = new(0.0) // zero must still be sent
			cfg.MaxTokens = 64
		})
	in := input("where is my refund?",
		session.Event{Author: "user", Text: "I was charged twice"},
		session.Event{Author: "tool", Text: "refund r-1 issued", Data: json.RawMessage(`{"refund":"r-1"}`)},
		session.Event{Author: "assistant", Text: "I refunded the second charge."},
		session.Event{Author: "tool", Data: json.RawMessage(`{"call":"lookup"}`)}, // no text: skipped
		session.Event{Author: "system", Text: "The customer is a VIP."},
		session.Event{Author: "billing-bot", Text: "invoice 7 paid"},
	)

	out, err := c.Respond(context.Background(), in)
	require.NoError(t, err)

	reqs := f.requests()
	require.Len(t, reqs, 1)
	got := reqs[0]
	require.Equal(t, http.MethodPost, got.Method)
	require.Equal(t, "/v1/chat/completions", got.Path)
	require.Equal(t, "Bearer sk-test", got.Auth)
	require.Equal(t, "test-model", got.Body.Model)
	require.NotNil(t, got.Body.Temperature)
	require.Equal(t, 0.0, *got.Body.Temperature)
	require.NotNil(t, got.Body.MaxTokens)
	require.Equal(t, 64, *got.Body.MaxTokens)
	var msgs []string
	for _, m := range got.Body.Messages {
		msgs = append(msgs, m.Role+": "+m.Content)
	}
	require.Equal(t, []string{
		"system: You are a support agent.",
		"user: I was charged twice",
		"user: [tool] refund r-1 issued",
		"assistant: I refunded the second charge.",
		"system: The customer is a VIP.",
		"user: [billing-bot] invoice 7 paid",
		"user: where is my refund?",
	}, msgs)

	require.Len(t, out.Events, 1)
	ev := out.Events[0]
	require.Equal(t, "assistant", ev.Author)
	require.Equal(t, "Your refund r-1 was issued on Monday.", ev.Text)
	var data chatcompletion.ReplyData
	require.NoError(t, json.Unmarshal(ev.Data, &data))
	require.Equal(t, chatcompletion.ReplyData{
		ID: "chatcmpl-1", Model: "test-model-2026", FinishReason: "stop",
		Usage: chatcompletion.Usage{PromptTokens: 31, CompletionTokens: 9, TotalTokens: 40},
	}, data)
	require.Nil(t, out.State)
}

func TestRespondMinimalRequest(t *testing.T) {
	t.Parallel()
	f, c := setup(t, replyJSON(http.StatusOK, completion("hi", "stop")))
	_, err := c.Respond(context.Background(), input("hello"))
	require.NoError(t, err)
	got := f.requests()[0]
	require.Empty(t, got.Auth, "no key, no Authorization header")
	require.Nil(t, got.Body.Temperature)
	require.Nil(t, got.Body.MaxTokens)
	require.Len(t, got.Body.Messages, 1)
	require.Equal(t, "user", got.Body.Messages[0].Role)
}

// TestRespondIgnoresEnvironment cannot run in parallel: it sets the environment the SDK's
// NewClient would read.
func TestRespondIgnoresEnvironment(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-from-env")
	t.Setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
	f, c := setup(t, replyJSON(http.StatusOK, completion("hi", "stop")))
	_, err := c.Respond(context.Background(), input("hello"))
	require.NoError(t, err)
	require.Empty(t, f.requests()[0].Auth)
}

func TestRespondRefusal(t *testing.T) {
	t.Parallel()
	_, c := setup(t, replyJSON(http.StatusOK, `{"id":"x","object":"chat.completion","created":1,"model":"m",
		"choices":[{"index":0,"message":{"role":"assistant","content":null,"refusal":"I can't help with that."},"finish_reason":"stop"}]}`))
	out, err := c.Respond(context.Background(), input("hello"))
	require.NoError(t, err)
	require.Equal(t, "I can't help with that.", out.Events[0].Text)
	var data chatcompletion.ReplyData
	require.NoError(t, json.Unmarshal(out.Events[0].Data, &data))
	require.True(t, data.Refusal)
}

func TestRespondEmptyReplyIsAttempt(t *testing.T) {
	t.Parallel()
	for name, body := range map[string]string{
		"no choices":    `{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[]}`,
		"empty content": completion("", "length"),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, c := setup(t, replyJSON(http.StatusOK, body))
			_, err := c.Respond(context.Background(), input("hello"))
			require.Error(t, err)
			require.Equal(t, turn.KindAttempt, turn.Classify(err), "%v", err)
		})
	}
}

func TestRespondRateLimited(t *testing.T) {
	t.Parallel()
	rateLimit := errorBody("Rate limit reached for requests", "requests", "rate_limit_exceeded")
	cases := []struct {
		name    string
		headers []string
		min     time.Duration
		max     time.Duration
	}{
		{name: "seconds", headers: []string{"Retry-After", "2"}, min: 2 * time.Second, max: 2 * time.Second},
		{name: "http date", headers: []string{"Retry-After", time.Now().Add(30 * time.Second).UTC().Format(http.TimeFormat)},
			min: 25 * time.Second, max: 30 * time.Second},
		{name: "milliseconds first", headers: []string{"Retry-After-Ms", "1500", "Retry-After", "2"},
			min: 1500 * time.Millisecond, max: 1500 * time.Millisecond},
		{name: "absent", min: 0, max: 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f, c := setup(t, replyJSON(http.StatusTooManyRequests, rateLimit, tc.headers...))
			_, err := c.Respond(context.Background(), input("hello"))
			require.Error(t, err)
			require.Equal(t, turn.KindRateLimited, turn.Classify(err), "%v", err)
			d, ok := turn.RetryDelay(err)
			require.True(t, ok)
			require.GreaterOrEqual(t, d, tc.min)
			require.LessOrEqual(t, d, tc.max)
			var apiErr *openai.Error
			require.ErrorAs(t, err, &apiErr)
			require.Equal(t, http.StatusTooManyRequests, apiErr.StatusCode)
			require.Equal(t, "rate_limit_exceeded", apiErr.Code)
			require.Len(t, f.requests(), 1, "the SDK must not retry")
		})
	}
}

func TestRespondStatusKinds(t *testing.T) {
	t.Parallel()
	cases := []struct {
		status  int
		body    string
		headers []string
		want    turn.Kind
	}{
		{status: 400, body: errorBody("'messages' is too long", "invalid_request_error", "context_length_exceeded"), want: turn.KindPermanent},
		{status: 401, body: errorBody("Incorrect API key provided", "invalid_request_error", "invalid_api_key"), want: turn.KindPermanent},
		{status: 403, body: errorBody("Country not supported", "invalid_request_error", "unsupported_country"), want: turn.KindPermanent},
		{status: 404, body: errorBody(`model "nope" not found, try pulling it first`, "api_error", ""), want: turn.KindPermanent},
		{status: 422, body: errorBody("unprocessable", "invalid_request_error", ""), want: turn.KindPermanent},
		{status: 400, body: errorBody("try again", "invalid_request_error", ""), headers: []string{"X-Should-Retry", "true"}, want: turn.KindAttempt},
		{status: 408, body: errorBody("request timed out", "timeout", ""), want: turn.KindAttempt},
		{status: 409, body: errorBody("conflict", "conflict", ""), want: turn.KindAttempt},
		{status: 500, body: errorBody("The server had an error", "server_error", ""), want: turn.KindAttempt},
		{status: 502, body: `<html>bad gateway</html>`, want: turn.KindAttempt},
		{status: 503, body: errorBody("Slow Down", "server_error", ""), want: turn.KindUnavailable},
		{status: 503, body: errorBody("Slow Down", "server_error", ""), headers: []string{"Retry-After", "3"}, want: turn.KindRateLimited},
		// vLLM's error body has no "error" object.
		{status: 400, body: `{"object":"error","message":"max_tokens is too large","type":"BadRequestError","param":null,"code":400}`, want: turn.KindPermanent},
		// A plain-text body, as a proxy in front of the server may send.
		{status: 400, body: "bad request", want: turn.KindPermanent},
		{status: 500, body: "", want: turn.KindAttempt},
		// Ollama's native error shape, which the SDK cannot decode into its *openai.Error.
		{status: 404, body: `{"error":"model \"nope\" not found"}`, want: turn.KindPermanent},
		{status: 429, body: `{"error":"slow down"}`, headers: []string{"Retry-After", "1"}, want: turn.KindRateLimited},
	}
	for i, tc := range cases {
		t.Run(fmt.Sprintf("%d_%d", i, tc.status), func(t *testing.T) {
			t.Parallel()
			f, c := setup(t, replyJSON(tc.status, tc.body, tc.headers...))
			_, err := c.Respond(context.Background(), input("hello"))
			require.Error(t, err)
			require.Equal(t, tc.want, turn.Classify(err), "%v", err)
			require.Contains(t, err.Error(), fmt.Sprint(tc.status))
			require.Contains(t, err.Error(), "test-model")
			var apiErr *openai.Error
			require.ErrorAs(t, err, &apiErr)
			require.Equal(t, tc.status, apiErr.StatusCode)
			require.Len(t, f.requests(), 1, "the SDK must not retry")
		})
	}
}

func TestRespondQuotesServerMessage(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		reply http.HandlerFunc
		want  string
	}{
		"OpenAI": {replyJSON(http.StatusBadRequest, errorBody("This model's maximum context length is 8192 tokens", "invalid_request_error", "context_length_exceeded")),
			"maximum context length is 8192 tokens"},
		"vLLM": {replyJSON(http.StatusBadRequest, `{"object":"error","message":"max_tokens is too large","type":"BadRequestError","param":null,"code":400}`),
			"max_tokens is too large"},
		"Ollama native": {replyJSON(http.StatusNotFound, `{"error":"model \"nope\" not found, try pulling it first"}`),
			`model "nope" not found, try pulling it first`},
		"plain text": {func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "no such\nmodel", http.StatusNotFound) },
			"no such model"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, c := setup(t, tc.reply)
			_, err := c.Respond(context.Background(), input("hello"))
			require.Equal(t, turn.KindPermanent, turn.Classify(err), "%v", err)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// A connection cut during the exchange may be the request's doing (a server that crashes on
// it): a failed attempt, unlike a refused connection (see TestServerDownIsNotAnAttempt).
func TestRespondNetworkErrorIsAttempt(t *testing.T) {
	t.Parallel()
	_, c := setup(t, func(w http.ResponseWriter, _ *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = conn.Close() // hang up without an answer
		}
	})
	_, err := c.Respond(context.Background(), input("hello"))
	require.Error(t, err)
	require.Equal(t, turn.KindAttempt, turn.Classify(err), "%v", err)
}

// blocking answers only when the request's context ends or release is closed.
func blocking(arrived chan<- struct{}, release <-chan struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}
}

func TestRespondContextCanceled(t *testing.T) {
	t.Parallel()
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	defer close(release)
	_, c := setup(t, blocking(arrived, release))
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-arrived
		cancel()
	}()
	_, err := c.Respond(ctx, input("hello"))
	// The caller's cancellation passes through unchanged; the Runner, which sees its own
	// context ended, marks the turn abandoned (turn.ErrAbandoned) so no attempt is spent.
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, chatcompletion.ErrTimeout)
}

func TestRespondTimeoutIsAttempt(t *testing.T) {
	t.Parallel()
	cases := map[string]func(*chatcompletion.Config){
		"Config.Timeout":     func(cfg *chatcompletion.Config) { cfg.Timeout = 50 * time.Millisecond },
		"HTTPClient.Timeout": func(cfg *chatcompletion.Config) { cfg.HTTPClient = &http.Client{Timeout: 50 * time.Millisecond} },
	}
	for name, edit := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			arrived, release := make(chan struct{}, 1), make(chan struct{})
			defer close(release)
			_, c := setup(t, blocking(arrived, release), edit)
			_, err := c.Respond(context.Background(), input("hello"))
			require.ErrorIs(t, err, chatcompletion.ErrTimeout)
			require.NotErrorIs(t, err, context.DeadlineExceeded)
			require.Equal(t, turn.KindAttempt, turn.Classify(err), "%v", err)
		})
	}
}

func TestNewValidatesConfig(t *testing.T) {
	t.Parallel()
	valid := chatcompletion.Config{BaseURL: chatcompletion.OllamaBaseURL, Model: "llama3.2"}
	cases := []struct {
		field string
		edit  func(*chatcompletion.Config)
	}{
		{"BaseURL", func(c *chatcompletion.Config) { c.BaseURL = "" }},
		{"BaseURL", func(c *chatcompletion.Config) { c.BaseURL = "localhost:11434/v1" }},
		{"BaseURL", func(c *chatcompletion.Config) { c.BaseURL = "ftp://example.com/v1" }},
		{"BaseURL", func(c *chatcompletion.Config) { c.BaseURL = "http:///v1" }},
		{"BaseURL", func(c *chatcompletion.Config) { c.BaseURL = "http://h/v1?x=1" }},
		{"BaseURL", func(c *chatcompletion.Config) { c.BaseURL = "http://h:port/v1" }},
		{"Model", func(c *chatcompletion.Config) { c.Model = " " }},
		{"Temperature", func(c *chatcompletion.Config) { c.Temperature = new(2.5) }},
		{"Temperature", func(c *chatcompletion.Config) { c.Temperature = new(-0.1) }},
		{"MaxTokens", func(c *chatcompletion.Config) { c.MaxTokens = -1 }},
		{"Timeout", func(c *chatcompletion.Config) { c.Timeout = -time.Second }},
	}
	for i, tc := range cases {
		t.Run(fmt.Sprintf("%d_%s", i, tc.field), func(t *testing.T) {
			t.Parallel()
			cfg := valid
			tc.edit(&cfg)
			c, err := chatcompletion.New(cfg)
			require.ErrorIs(t, err, chatcompletion.ErrInvalidConfig)
			require.ErrorContains(t, err, tc.field)
			require.Nil(t, c)
		})
	}
	c, err := chatcompletion.New(valid)
	require.NoError(t, err)
	require.Equal(t, "llama3.2", c.Model())
}
