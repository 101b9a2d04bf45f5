package anthropic_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turn/agent"
	"github.com/turnstile-go/turnstile/turn/anthropic"
	"github.com/turnstile-go/turnstile/turn/internal/journaltest"
)

// block is a content block as the fake server reads it.
type block struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	IsError   bool            `json:"is_error"`
	Content   []block         `json:"content"`
}

type message struct {
	Role    string  `json:"role"`
	Content []block `json:"content"`
}

type request struct {
	Model     string    `json:"model"`
	MaxTokens int       `json:"max_tokens"`
	System    []block   `json:"system"`
	Messages  []message `json:"messages"`
	Tools     []struct {
		Name        string         `json:"name"`
		InputSchema map[string]any `json:"input_schema"`
	} `json:"tools"`
	APIKey, Auth string `json:"-"`
}

// validAnthropic reports what breaks the Messages API's rules: roles alternate starting with
// the user; each tool_use id is answered by a tool_result in the next user message; the
// tool_result blocks come first in their message and answer only the message before.
func validAnthropic(msgs []message) error {
	for i, m := range msgs {
		want := "user"
		if i%2 == 1 {
			want = "assistant"
		}
		if m.Role != want {
			return fmt.Errorf("message %d: role %s, want %s", i, m.Role, want)
		}
		if len(m.Content) == 0 {
			return fmt.Errorf("message %d: no content", i)
		}
		uses := map[string]bool{}
		if i > 0 {
			for _, b := range msgs[i-1].Content {
				if b.Type == "tool_use" {
					uses[b.ID] = true
				}
			}
		}
		results := true
		for _, b := range m.Content {
			switch {
			case b.Type == "text" && b.Text == "":
				return fmt.Errorf("message %d: empty text block", i)
			case b.Type == "tool_use" && (b.ID == "" || len(b.Input) == 0 || b.Input[0] != '{'):
				return fmt.Errorf("message %d: bad tool_use %+v", i, b)
			case b.Type == "tool_result":
				if !results {
					return fmt.Errorf("message %d: tool_result after another block", i)
				}
				if !uses[b.ToolUseID] {
					return fmt.Errorf("message %d: tool_result for %q, not a tool_use of the message before", i, b.ToolUseID)
				}
				delete(uses, b.ToolUseID)
			default:
				results = false
			}
		}
		if len(uses) > 0 && m.Role == "user" {
			return fmt.Errorf("message %d: tool_use %v not answered", i, uses)
		}
		if i == len(msgs)-1 && m.Role != "user" {
			return fmt.Errorf("the last message is the assistant's")
		}
	}
	return nil
}

// script is a fake Messages API: it checks each request and answers the n-th model call of a
// turn (the assistant messages after the last user text) with replies[n]; fail may answer
// instead.
type script struct {
	t       *testing.T
	replies []string
	fail    func(n int, w http.ResponseWriter) bool

	mu   sync.Mutex
	reqs []request
}

func (s *script) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req request
	data, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(data, &req); err != nil || r.URL.Path != "/v1/messages" {
		s.t.Errorf("fake server: %s %v", r.URL.Path, err)
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	if err := validAnthropic(req.Messages); err != nil {
		s.t.Errorf("fake server: invalid request: %v\n%s", err, data)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req.APIKey, req.Auth = r.Header.Get("X-Api-Key"), r.Header.Get("Authorization")
	s.mu.Lock()
	s.reqs = append(s.reqs, req)
	s.mu.Unlock()
	n := 0
	for _, m := range req.Messages {
		if m.Role == "assistant" {
			n++
		} else if m.Content[len(m.Content)-1].Type == "text" {
			n = 0
		}
	}
	if s.fail != nil && s.fail(n, w) {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, s.replies[min(n, len(s.replies)-1)])
}

func (s *script) requests() []request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]request(nil), s.reqs...)
}

// text is a final Messages API reply.
func text(t string) string {
	return fmt.Sprintf(`{"id":"msg_1","type":"message","role":"assistant","model":"claude-test","stop_reason":"end_turn",
		"content":[{"type":"text","text":%q}],"usage":{"input_tokens":31,"output_tokens":9}}`, t)
}

// toolUse is a reply that calls tools: pairs of id and "name {json}".
func toolUse(calls ...string) string {
	parts := []string{`{"type":"text","text":"Let me check."}`}
	for i := 0; i+1 < len(calls); i += 2 {
		name, args, _ := strings.Cut(calls[i+1], " ")
		parts = append(parts, fmt.Sprintf(`{"type":"tool_use","id":%q,"name":%q,"input":%s}`, calls[i], name, args))
	}
	return `{"id":"msg_t","type":"message","role":"assistant","model":"claude-test","stop_reason":"tool_use",
		"content":[` + strings.Join(parts, ",") + `],"usage":{"input_tokens":5,"output_tokens":5}}`
}

func errorReply(status int, typ string, headers ...string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		for i := 0; i+1 < len(headers); i += 2 {
			w.Header().Set(headers[i], headers[i+1])
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = fmt.Fprintf(w, `{"type":"error","error":{"type":%q,"message":"%s happened"}}`, typ, typ)
	}
}

func newClient(t *testing.T, s *script, tools *journaltest.Tools, edit ...func(*anthropic.Config)) *anthropic.Client {
	t.Helper()
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	cfg := anthropic.Config{BaseURL: srv.URL, APIKey: "sk-ant-test", Model: "claude-test", Tools: tools.List()}
	for _, e := range edit {
		e(&cfg)
	}
	c, err := anthropic.New(cfg)
	require.NoError(t, err)
	return c
}

func TestToolLoopWithParallelCalls(t *testing.T) {
	t.Parallel()
	tools := &journaltest.Tools{Fail: func(name string, _ int) error {
		if name == "refund" {
			return errors.New("card declined")
		}
		return nil
	}}
	s := &script{t: t, replies: []string{
		toolUse("toolu_a", `lookup {"order":"o-1"}`),
		toolUse("toolu_b", `refund {"order":"o-1"}`, "toolu_c", `notify {"to":"ann@example.com"}`),
		text("The refund was declined; I emailed you."),
	}}
	c := newClient(t, s, tools, func(cfg *anthropic.Config) { cfg.SystemPrompt = "Be kind." })
	ib, store := journaltest.New(), session.NewMemoryStore()
	ctx := context.Background()
	history := []session.Event{{Author: "assistant", Text: "cut off"}, {Author: "user", Text: "hi"}, {Author: "system", Text: "VIP"}}
	_, err := store.Create(ctx, session.Key{App: turn.DefaultApp, User: "u-1", Conversation: "c-1"}, nil)
	require.NoError(t, err)
	_, err = store.Append(ctx, session.Key{App: turn.DefaultApp, User: "u-1", Conversation: "c-1"}, 0,
		session.Turn{RequestID: "old", Events: history})
	require.NoError(t, err)

	res, err := journaltest.Runner(c, ib, store).Run(ctx, journaltest.Request("c-1", "refund o-1"))
	require.NoError(t, err)
	require.Equal(t, "The refund was declined; I emailed you.", res.Text)

	reqs := s.requests()
	require.Len(t, reqs, 3)
	require.Equal(t, "sk-ant-test", reqs[0].APIKey)
	require.Empty(t, reqs[0].Auth)
	require.Equal(t, anthropic.DefaultMaxTokens, reqs[0].MaxTokens)
	require.Equal(t, "Be kind.", reqs[0].System[0].Text)
	require.Len(t, reqs[0].Tools, 3)
	require.Equal(t, "object", reqs[0].Tools[1].InputSchema["type"])
	require.Equal(t, []any{"order"}, reqs[0].Tools[1].InputSchema["required"])
	first := reqs[0].Messages
	require.Len(t, first, 1, "the leading assistant message is dropped; user texts merge")
	require.Equal(t, []string{"hi", "[system] VIP", "refund o-1"}, []string{first[0].Content[0].Text, first[0].Content[1].Text, first[0].Content[2].Text})
	last := reqs[2].Messages
	require.Len(t, last, 5)
	results := last[4].Content
	require.Len(t, results, 2, "the parallel pair's results are in one user message")
	require.Equal(t, "toolu_b", results[0].ToolUseID)
	require.True(t, results[0].IsError, "a tool's error goes back with is_error")
	require.Equal(t, "error: card declined", results[0].Content[0].Text)
	require.False(t, results[1].IsError)
	require.Contains(t, results[1].Content[0].Text, "queued")
	require.Empty(t, tools.Keys("notify"), "a deferred tool is not called in the turn")
	intents, err := ib.Intents(ctx, inbox.IntentFilter{})
	require.NoError(t, err)
	require.Len(t, intents, 1)
	require.NoError(t, agent.Deliverer(tools.List()...)(ctx, intents[0]))
	require.Len(t, tools.Keys("notify"), 1)

	// The next turn's request, built from the events the first turn stored, is valid too.
	s.replies = []string{text("You're welcome.")}
	res, err = journaltest.Runner(c, ib, store).Run(ctx, journaltest.Request("c-1", "thanks"))
	require.NoError(t, err)
	require.Equal(t, "You're welcome.", res.Text)
	next := s.requests()[3].Messages
	require.Len(t, next, 7)
	require.Equal(t, "thanks", next[6].Content[0].Text)
}

func TestToolLoopReplaysAfterAKill(t *testing.T) {
	t.Parallel()
	tools := &journaltest.Tools{Fail: func(name string, n int) error {
		if name == "refund" && n == 1 { // a turn-level error: the turn ends after the lookup step
			return turn.RetryAfter(time.Millisecond, errors.New("payments rate limited"))
		}
		return nil
	}}
	s := &script{t: t, replies: []string{
		toolUse("toolu_a", `lookup {"order":"o-1"}`),
		toolUse("toolu_b", `refund {"order":"o-1"}`),
		text("Refunded."),
	}}
	c := newClient(t, s, tools)
	ib, store := journaltest.New(), session.NewMemoryStore()
	req := journaltest.Request("c-1", "refund o-1")
	ctx := context.Background()

	_, err := journaltest.Runner(c, ib, store).Run(ctx, req)
	require.Equal(t, turn.KindRateLimited, turn.Classify(err), "%v", err)
	require.Len(t, s.requests(), 2)
	res, err := journaltest.Runner(c, ib, store).Run(ctx, req) // a fresh Runner on the same stores
	require.NoError(t, err)
	require.Equal(t, "Refunded.", res.Text)
	require.Len(t, s.requests(), 3, "the completed model steps were not sent again")
	require.Len(t, tools.Keys("lookup"), 1, "the completed tool step did not run again")
	refunds := tools.Keys("refund")
	require.Len(t, refunds, 2, "the step in flight ran again")
	require.Equal(t, refunds[0], refunds[1], "with the same key")
}

func TestErrorKinds(t *testing.T) {
	t.Parallel()
	cases := []struct {
		status  int
		typ     string
		headers []string
		kind    turn.Kind
		delay   time.Duration
	}{
		{429, "rate_limit_error", []string{"Retry-After", "7"}, turn.KindRateLimited, 7 * time.Second},
		{429, "rate_limit_error", nil, turn.KindRateLimited, 0},
		{529, "overloaded_error", []string{"Retry-After", "2"}, turn.KindRateLimited, 2 * time.Second},
		{500, "overloaded_error", nil, turn.KindRateLimited, 0},
		{500, "api_error", nil, turn.KindAttempt, 0},
		{502, "api_error", nil, turn.KindAttempt, 0},
		{400, "invalid_request_error", nil, turn.KindPermanent, 0},
		{401, "authentication_error", nil, turn.KindPermanent, 0},
		{404, "not_found_error", nil, turn.KindPermanent, 0},
		{413, "request_too_large", nil, turn.KindPermanent, 0},
		{400, "invalid_request_error", []string{"X-Should-Retry", "true"}, turn.KindAttempt, 0},
		{408, "timeout_error", nil, turn.KindAttempt, 0},
	}
	for i, tc := range cases {
		t.Run(fmt.Sprintf("%d_%d_%s", i, tc.status, tc.typ), func(t *testing.T) {
			t.Parallel()
			s := &script{t: t, fail: func(_ int, w http.ResponseWriter) bool {
				errorReply(tc.status, tc.typ, tc.headers...)(w)
				return true
			}}
			c := newClient(t, s, &journaltest.Tools{})
			_, err := c.Respond(context.Background(), input("hello"))
			require.Equal(t, tc.kind, turn.Classify(err), "%v", err)
			require.ErrorContains(t, err, tc.typ+" happened")
			require.ErrorContains(t, err, "claude-test")
			var apiErr *sdk.Error
			require.ErrorAs(t, err, &apiErr)
			require.Equal(t, tc.status, apiErr.StatusCode)
			if tc.kind == turn.KindRateLimited {
				d, ok := turn.RetryDelay(err)
				require.True(t, ok)
				require.Equal(t, tc.delay, d)
			}
			require.Len(t, s.requests(), 1, "the SDK must not retry")
		})
	}
}

func TestTimeoutAndCancel(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	defer close(release)
	s := &script{t: t, fail: func(int, http.ResponseWriter) bool { <-release; return true }}
	c := newClient(t, s, &journaltest.Tools{}, func(cfg *anthropic.Config) { cfg.Timeout = 50 * time.Millisecond })
	_, err := c.Respond(context.Background(), input("hello"))
	require.ErrorIs(t, err, anthropic.ErrTimeout)
	require.NotErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, turn.KindAttempt, turn.Classify(err))

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = c.Respond(ctx, input("hello"))
	require.ErrorIs(t, err, context.Canceled)
}

func TestServerDownIsUnavailable(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	c, err := anthropic.New(anthropic.Config{BaseURL: url, Model: "m"})
	require.NoError(t, err)
	_, err = c.Respond(context.Background(), input("hello"))
	require.Equal(t, turn.KindUnavailable, turn.Classify(err), "%v", err)
}

// TestIgnoresEnvironment cannot run in parallel: it sets the environment the SDK's NewClient
// would read.
func TestIgnoresEnvironment(t *testing.T) {
	t.Setenv("ANTHROPIC_API_KEY", "sk-from-env")
	t.Setenv("ANTHROPIC_AUTH_TOKEN", "tok-from-env")
	t.Setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:1")
	t.Setenv("ANTHROPIC_CUSTOM_HEADERS", "X-Leak: yes")
	s := &script{t: t, replies: []string{text("hi")}}
	c := newClient(t, s, &journaltest.Tools{}, func(cfg *anthropic.Config) { cfg.APIKey = "" })
	_, err := c.Respond(context.Background(), input("hello"))
	require.NoError(t, err)
	got := s.requests()[0]
	require.Empty(t, got.APIKey)
	require.Empty(t, got.Auth)
}

func TestNewValidatesConfig(t *testing.T) {
	t.Parallel()
	valid := anthropic.Config{Model: "claude-test"}
	cases := []struct {
		field string
		edit  func(*anthropic.Config)
	}{
		{"BaseURL", func(c *anthropic.Config) { c.BaseURL = "api.anthropic.com" }},
		{"BaseURL", func(c *anthropic.Config) { c.BaseURL = "ftp://h" }},
		{"BaseURL", func(c *anthropic.Config) { c.BaseURL = "http://h?x=1" }},
		{"Model", func(c *anthropic.Config) { c.Model = " " }},
		{"MaxTokens", func(c *anthropic.Config) { c.MaxTokens = -1 }},
		{"Timeout", func(c *anthropic.Config) { c.Timeout = -time.Second }},
		{"MaxModelSteps", func(c *anthropic.Config) { c.MaxModelSteps = -1 }},
		{"Tools", func(c *anthropic.Config) { c.Tools = []agent.Tool{{}} }},
	}
	for i, tc := range cases {
		t.Run(fmt.Sprintf("%d_%s", i, tc.field), func(t *testing.T) {
			t.Parallel()
			cfg := valid
			tc.edit(&cfg)
			c, err := anthropic.New(cfg)
			require.ErrorIs(t, err, anthropic.ErrInvalidConfig)
			require.ErrorContains(t, err, tc.field)
			require.Nil(t, c)
		})
	}
	c, err := anthropic.New(valid)
	require.NoError(t, err)
	require.Equal(t, "claude-test", c.Model())
}

func input(text string) turn.Input {
	return turn.Input{Request: journaltest.Request("c-1", text)}
}
