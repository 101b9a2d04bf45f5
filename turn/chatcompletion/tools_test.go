package chatcompletion_test

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

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turn/chatcompletion"
	"github.com/turnstile-go/turnstile/turn/internal/journaltest"
)

// oaMessage is a chat-completions message as the fake server reads it.
type oaMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCallID string          `json:"tool_call_id"`
	ToolCalls  []struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

type oaRequest struct {
	Messages []oaMessage `json:"messages"`
	Tools    []struct {
		Type     string `json:"type"`
		Function struct {
			Name       string         `json:"name"`
			Parameters map[string]any `json:"parameters"`
		} `json:"function"`
	} `json:"tools"`
}

// text returns a message's content as text.
func (m oaMessage) text() string {
	var s string
	_ = json.Unmarshal(m.Content, &s)
	return s
}

// validOpenAI reports what breaks the protocol's tool rules: every assistant tool_call id is
// answered by a following "tool" message with that id before the next assistant or user
// message, and no "tool" message answers a call that is not pending.
func validOpenAI(msgs []oaMessage) error {
	pending := map[string]bool{}
	for i, m := range msgs {
		if m.Role != "tool" && len(pending) > 0 {
			return fmt.Errorf("message %d (%s): tool calls %v not answered", i, m.Role, pending)
		}
		switch m.Role {
		case "assistant":
			for _, c := range m.ToolCalls {
				if c.ID == "" || c.Type != "function" || !json.Valid([]byte(c.Function.Arguments)) {
					return fmt.Errorf("message %d: bad tool call %+v", i, c)
				}
				pending[c.ID] = true
			}
		case "tool":
			if !pending[m.ToolCallID] {
				return fmt.Errorf("message %d: tool message answers %q, which is not pending", i, m.ToolCallID)
			}
			delete(pending, m.ToolCallID)
		}
	}
	if len(pending) > 0 {
		return fmt.Errorf("tool calls %v not answered at the end", pending)
	}
	return nil
}

// oaScript is a fake chat-completions server: it checks each request and answers the n-th
// model call of a turn (n counted from the tool messages after the last user message) with
// replies[n]; fail, when set, may answer instead.
type oaScript struct {
	t       *testing.T
	replies []string
	fail    func(n int, w http.ResponseWriter) bool

	mu   sync.Mutex
	reqs []oaRequest
}

func (s *oaScript) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req oaRequest
	data, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(data, &req); err != nil {
		s.t.Errorf("fake server: %v", err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if err := validOpenAI(req.Messages); err != nil {
		s.t.Errorf("fake server: invalid request: %v\n%s", err, data)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.reqs = append(s.reqs, req)
	s.mu.Unlock()
	n := 0
	for _, m := range req.Messages {
		switch m.Role {
		case "user":
			n = 0
		case "assistant":
			n++
		}
	}
	if s.fail != nil && s.fail(n, w) {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, s.replies[min(n, len(s.replies)-1)])
}

func (s *oaScript) requests() []oaRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]oaRequest(nil), s.reqs...)
}

// toolReply is a chat.completion whose message calls tools: pairs of id and "name {json}".
func toolReply(calls ...string) string {
	var parts []string
	for i := 0; i+1 < len(calls); i += 2 {
		name, args, _ := strings.Cut(calls[i+1], " ")
		parts = append(parts, fmt.Sprintf(`{"id":%q,"type":"function","function":{"name":%q,"arguments":%q}}`, calls[i], name, args))
	}
	return `{"id":"chatcmpl-t","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"finish_reason":"tool_calls",
		"message":{"role":"assistant","content":null,"tool_calls":[` + strings.Join(parts, ",") + `]}}]}`
}

func newToolClient(t *testing.T, s *oaScript, tools *journaltest.Tools) *chatcompletion.Client {
	t.Helper()
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	c, err := chatcompletion.New(chatcompletion.Config{BaseURL: srv.URL + "/v1", Model: "test-model", Tools: tools.List()})
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
	s := &oaScript{t: t, replies: []string{
		toolReply("call_a", `lookup {"order":"o-1"}`),
		toolReply("call_b", `refund {"order":"o-1"}`, "call_c", `notify {"to":"ann@example.com"}`),
		completion("The refund was declined; I emailed you.", "stop"),
	}}
	c := newToolClient(t, s, tools)
	ib, store := journaltest.New(), session.NewMemoryStore()
	ctx := context.Background()

	res, err := journaltest.Runner(c, ib, store).Run(ctx, journaltest.Request("c-1", "refund o-1"))
	require.NoError(t, err)
	require.Equal(t, "The refund was declined; I emailed you.", res.Text)

	reqs := s.requests()
	require.Len(t, reqs, 3)
	require.Len(t, reqs[0].Tools, 3)
	require.Equal(t, "lookup", reqs[0].Tools[0].Function.Name)
	require.Equal(t, "object", reqs[0].Tools[0].Function.Parameters["type"])
	last := reqs[2].Messages
	require.Len(t, last, 6) // user, assistant+tool, assistant+tool+tool
	require.Equal(t, "shipped o-1", last[2].text())
	require.Equal(t, "call_b", last[4].ToolCallID)
	require.Equal(t, "error: card declined", last[4].text(), "a tool's error goes back as its output")
	require.Equal(t, "call_c", last[5].ToolCallID)
	require.Contains(t, last[5].text(), "queued")
	require.Len(t, tools.Keys("lookup"), 1)
	require.Len(t, tools.Keys("refund"), 1)
	require.Empty(t, tools.Keys("notify"), "a deferred tool is not called in the turn")
	intents, err := ib.Intents(ctx, inbox.IntentFilter{})
	require.NoError(t, err)
	require.Len(t, intents, 1)
	it, err := turn.DecodeIntent(intents[0].Payload)
	require.NoError(t, err)
	require.Equal(t, "notify", it.Tool)
	require.JSONEq(t, `{"to":"ann@example.com"}`, string(it.Args))

	// The next turn's history, built from the session events the first turn stored, is valid.
	s.replies = []string{completion("You're welcome.", "stop")}
	res, err = journaltest.Runner(c, ib, store).Run(ctx, journaltest.Request("c-1", "thanks"))
	require.NoError(t, err)
	require.Equal(t, "You're welcome.", res.Text)
	next := s.requests()[3].Messages
	require.Len(t, next, 8)
	require.Equal(t, "user", next[7].Role)
	require.Equal(t, "call_a", next[1].ToolCalls[0].ID)
}

func TestToolLoopReplaysAfterAKill(t *testing.T) {
	t.Parallel()
	// The refund's first call ends the turn as a rate limit would (a turn-level error): the
	// turn fails after the lookup step and the second model step completed.
	tools := &journaltest.Tools{Fail: func(name string, n int) error {
		if name == "refund" && n == 1 {
			return turn.RetryAfter(time.Millisecond, errors.New("payments rate limited"))
		}
		return nil
	}}
	var served sync.Mutex
	killed := false
	s := &oaScript{t: t, replies: []string{
		toolReply("call_a", `lookup {"order":"o-1"}`),
		toolReply("call_b", `refund {"order":"o-1"}`),
		completion("Refunded.", "stop"),
	}, fail: func(n int, w http.ResponseWriter) bool {
		served.Lock()
		defer served.Unlock()
		if n == 2 && !killed { // the final model call fails once too: a 5xx is a failed attempt
			killed = true
			replyJSON(http.StatusInternalServerError, errorBody("boom", "server_error", ""))(w, nil)
			return true
		}
		return false
	}}
	c := newToolClient(t, s, tools)
	ib, store := journaltest.New(), session.NewMemoryStore()
	req := journaltest.Request("c-1", "refund o-1")
	ctx := context.Background()

	_, err := journaltest.Runner(c, ib, store).Run(ctx, req)
	require.Equal(t, turn.KindRateLimited, turn.Classify(err), "%v", err)
	require.Len(t, s.requests(), 2)
	_, err = journaltest.Runner(c, ib, store).Run(ctx, req)
	require.Equal(t, turn.KindAttempt, turn.Classify(err), "%v", err)
	require.Len(t, s.requests(), 3, "the two completed model steps were not sent again")
	res, err := journaltest.Runner(c, ib, store).Run(ctx, req)
	require.NoError(t, err)
	require.Equal(t, "Refunded.", res.Text)

	require.Len(t, s.requests(), 4)
	require.Len(t, tools.Keys("lookup"), 1, "the completed tool step did not run again")
	refunds := tools.Keys("refund")
	require.Len(t, refunds, 2, "the step in flight ran again")
	require.Equal(t, refunds[0], refunds[1], "with the same key")
	require.Equal(t, "call_b", s.requests()[3].Messages[3].ToolCalls[0].ID, "replayed ids")
}

func TestToolLoopErrors(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		status  int
		headers []string
		kind    turn.Kind
	}{
		"429 Retry-After": {http.StatusTooManyRequests, []string{"Retry-After", "7"}, turn.KindRateLimited},
		"500":             {http.StatusInternalServerError, nil, turn.KindAttempt},
		"400":             {http.StatusBadRequest, nil, turn.KindPermanent},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tools := &journaltest.Tools{}
			s := &oaScript{t: t, replies: []string{toolReply("call_a", `lookup {"order":"o-1"}`)},
				fail: func(n int, w http.ResponseWriter) bool {
					if n == 1 {
						replyJSON(tc.status, errorBody("no", "x", ""), tc.headers...)(w, nil)
					}
					return n == 1
				}}
			c := newToolClient(t, s, tools)
			_, err := c.Respond(context.Background(), input("refund"))
			require.Equal(t, tc.kind, turn.Classify(err), "%v", err)
			if tc.kind == turn.KindRateLimited {
				d, _ := turn.RetryDelay(err)
				require.Equal(t, 7*time.Second, d)
			}
			require.Len(t, tools.Keys("lookup"), 1)
		})
	}
}

func TestNewRejectsBadTools(t *testing.T) {
	t.Parallel()
	tools := (&journaltest.Tools{}).List()
	_, err := chatcompletion.New(chatcompletion.Config{BaseURL: chatcompletion.OllamaBaseURL, Model: "m", Tools: append(tools, tools[0])})
	require.ErrorIs(t, err, chatcompletion.ErrInvalidConfig)
	require.ErrorContains(t, err, `"lookup"`)
	_, err = chatcompletion.New(chatcompletion.Config{BaseURL: chatcompletion.OllamaBaseURL, Model: "m", MaxModelSteps: -1})
	require.ErrorIs(t, err, chatcompletion.ErrInvalidConfig)
}
