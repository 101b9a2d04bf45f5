package turn_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turn/agent"
	"github.com/turnstile-go/turnstile/turn/anthropic"
	"github.com/turnstile-go/turnstile/turn/chatcompletion"
)

// longModel is the script of a long conversation, behind either provider's protocol: a
// request with the summarization instruction as its system prompt gets the "FACT:" lines of
// its transcript back (a scripted summarizer: the test checks the pipeline, not a model's
// skill); a turn's first model call gets a call of the lookup tool, its second the answer.
type longModel struct {
	t      *testing.T
	budget int

	mu        sync.Mutex
	requests  int
	summaries int
	largest   int               // the largest request, in estimated tokens
	systems   map[string]string // a turn's user text -> the system prompt its first call had
}

// genericMessage is a request's message in either protocol, reduced to what the script reads.
type genericMessage struct {
	role    string
	text    string
	results int // tool results it carries
}

// answer returns the reply of the script to a request: a summary, a tool call (with the
// turn number) or the final text.
func (m *longModel) answer(system string, msgs []genericMessage, tokens int) (text string, call string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests++
	m.largest = max(m.largest, tokens)
	require.LessOrEqual(m.t, tokens, m.budget, "a model request over the context budget")
	if system == turn.DefaultSummaryInstruction {
		m.summaries++
		var facts []string
		for _, l := range strings.Split(msgs[len(msgs)-1].text, "\n") {
			if i := strings.Index(l, "FACT:"); i >= 0 {
				facts = append(facts, l[i:])
			}
		}
		return "summary\n" + strings.Join(facts, "\n"), ""
	}
	last := msgs[len(msgs)-1]
	if last.role == "user" && last.results == 0 {
		m.systems[last.text] = system
		var n int
		_, err := fmt.Sscanf(last.text, "turn %d:", &n)
		require.NoError(m.t, err)
		return "", fmt.Sprint(n)
	}
	return "done", ""
}

// estimate counts a request's strings as turn.EstimateTokens does, with 4 tokens of framing
// per message: what the server was sent, in the Runner's own measure.
func estimate(v any) int {
	switch v := v.(type) {
	case string:
		return turn.EstimateTokens(v)
	case []any:
		n := 0
		for _, e := range v {
			n += estimate(e)
		}
		return n
	case map[string]any:
		n := 0
		for k, e := range v {
			if k == "model" || k == "role" || k == "type" {
				continue
			}
			n += estimate(e)
		}
		if _, ok := v["role"]; ok {
			n += 4
		}
		return n
	}
	return 0
}

// openAI serves the script as a chat-completions server.
func (m *longModel) openAI(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Messages []struct {
			Role       string `json:"role"`
			Content    any    `json:"content"`
			ToolCallID string `json:"tool_call_id"`
		} `json:"messages"`
	}
	data, _ := io.ReadAll(r.Body)
	var raw any
	if json.Unmarshal(data, &req) != nil || json.Unmarshal(data, &raw) != nil {
		http.Error(w, "bad json", http.StatusBadRequest)
		return
	}
	var system string
	var msgs []genericMessage
	for _, msg := range req.Messages {
		text, _ := msg.Content.(string)
		if parts, ok := msg.Content.([]any); ok {
			for _, p := range parts {
				if p, ok := p.(map[string]any); ok {
					s, _ := p["text"].(string)
					text += s
				}
			}
		}
		switch {
		case msg.Role == "system" || msg.Role == "developer":
			system = text
		case msg.Role == "tool":
			msgs = append(msgs, genericMessage{role: "user", results: 1})
		default:
			msgs = append(msgs, genericMessage{role: msg.Role, text: text})
		}
	}
	text, call := m.answer(system, msgs, estimate(raw))
	w.Header().Set("Content-Type", "application/json")
	if call != "" {
		fmt.Fprintf(w, `{"id":"chatcmpl-l","object":"chat.completion","created":1,"model":"scripted","choices":[{"index":0,"finish_reason":"tool_calls",
			"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_%s","type":"function","function":{"name":"lookup","arguments":"{\"n\":%s}"}}]}}]}`, call, call)
		return
	}
	fmt.Fprintf(w, `{"id":"chatcmpl-l","object":"chat.completion","created":1,"model":"scripted","choices":[{"index":0,"finish_reason":"stop",
		"message":{"role":"assistant","content":%q}}]}`, text)
}

// anthropicMessages serves the script as a Messages API server.
func (m *longModel) anthropicMessages(w http.ResponseWriter, r *http.Request) {
	var req struct {
		System   any `json:"system"`
		Messages []struct {
			Role    string `json:"role"`
			Content any    `json:"content"`
		} `json:"messages"`
	}
	data, _ := io.ReadAll(r.Body)
	var raw any
	if json.Unmarshal(data, &req) != nil || json.Unmarshal(data, &raw) != nil {
		http.Error(w, "bad json", http.StatusBadRequest)
		return
	}
	system, _ := req.System.(string)
	if blocks, ok := req.System.([]any); ok {
		for _, b := range blocks {
			if b, ok := b.(map[string]any); ok {
				s, _ := b["text"].(string)
				system += s
			}
		}
	}
	var msgs []genericMessage
	for _, msg := range req.Messages {
		g := genericMessage{role: msg.Role}
		if s, ok := msg.Content.(string); ok {
			g.text = s
		}
		if blocks, ok := msg.Content.([]any); ok {
			for _, b := range blocks {
				b, _ := b.(map[string]any)
				switch b["type"] {
				case "text":
					s, _ := b["text"].(string)
					g.text += s
				case "tool_result":
					g.results++
				}
			}
		}
		msgs = append(msgs, g)
	}
	text, call := m.answer(system, msgs, estimate(raw))
	w.Header().Set("Content-Type", "application/json")
	if call != "" {
		fmt.Fprintf(w, `{"id":"msg_l","type":"message","role":"assistant","model":"claude-scripted","stop_reason":"tool_use",
			"content":[{"type":"tool_use","id":"toolu_%s","name":"lookup","input":{"n":%s}}],"usage":{"input_tokens":1,"output_tokens":1}}`, call, call)
		return
	}
	fmt.Fprintf(w, `{"id":"msg_l","type":"message","role":"assistant","model":"claude-scripted","stop_reason":"end_turn",
		"content":[{"type":"text","text":%q}],"usage":{"input_tokens":1,"output_tokens":1}}`, text)
}

// lookupTool answers a turn's lookup with a line naming the turn.
func lookupTool() agent.Tool {
	type args struct {
		N int `json:"n" jsonschema:"the turn number"`
	}
	return agent.NewTool("lookup", "Looks a turn up.", func(_ context.Context, _ agent.Call, a args) (string, error) {
		return fmt.Sprintf("turn %d looked up", a.N), nil
	})
}

// TestThousandTurnConversation runs a conversation of 1,000 turns with a tool call each
// through turn/agent, over each shipped client against a scripted server speaking its
// protocol, under a small context budget: every model request stays under the budget, the
// facts given only in turns 1 to 5 reach the model's input at turn 1,000 through the
// summaries, and the store still returns all 1,000 turns.
func TestThousandTurnConversation(t *testing.T) {
	t.Parallel()
	const turns, budget = 1000, 3000
	if testing.Short() {
		t.Skip("1,000 turns per provider; run without -short")
	}
	for _, provider := range []string{"chatcompletion", "anthropic"} {
		t.Run(provider, func(t *testing.T) {
			t.Parallel()
			m := &longModel{t: t, budget: budget, systems: map[string]string{}}
			var model turn.ModelClient
			switch provider {
			case "chatcompletion":
				srv := httptest.NewServer(http.HandlerFunc(m.openAI))
				t.Cleanup(srv.Close)
				c, err := chatcompletion.New(chatcompletion.Config{BaseURL: srv.URL + "/v1", Model: "scripted", Tools: []agent.Tool{lookupTool()}})
				require.NoError(t, err)
				model = c
			case "anthropic":
				srv := httptest.NewServer(http.HandlerFunc(m.anthropicMessages))
				t.Cleanup(srv.Close)
				c, err := anthropic.New(anthropic.Config{BaseURL: srv.URL, APIKey: "sk-ant-test", Model: "claude-scripted", Tools: []agent.Tool{lookupTool()}})
				require.NoError(t, err)
				model = c
			}
			sessions := session.NewMemoryStore()
			r := &turn.Runner{Model: model, Sessions: sessions, Inbox: inbox.NewMemoryInbox(),
				TurnTimeout: 30 * time.Second, ContextBudget: budget, InlineModel: true}
			ctx := context.Background()
			ids := make([]string, turns)
			for i := 1; i <= turns; i++ {
				text := fmt.Sprintf("turn %d: a message of the conversation", i)
				if i <= 5 {
					text += fmt.Sprintf("\nFACT: the customer's detail number %d is D-%d", i, 4710+i)
				}
				req := turn.Request{Schema: turn.SchemaVersion, ID: uuid.NewString(), ConversationID: "conv-" + provider, UserID: "u-1", Text: text}
				ids[i-1] = req.ID
				res, err := r.Run(ctx, req)
				require.NoError(t, err, "turn %d", i)
				require.Equal(t, "done", res.Text)
			}
			m.mu.Lock()
			last := m.systems[fmt.Sprintf("turn %d: a message of the conversation", turns)]
			t.Logf("%s: %d model requests, %d summaries, the largest request %d of %d tokens", provider, m.requests, m.summaries, m.largest, budget)
			require.Positive(t, m.summaries)
			m.mu.Unlock()
			for i := 1; i <= 5; i++ {
				require.Contains(t, last, fmt.Sprintf("FACT: the customer's detail number %d is D-%d", i, 4710+i), "turn 1,000 sees the fact of turn %d", i)
			}
			key := r.Key(turn.Request{UserID: "u-1", ConversationID: "conv-" + provider})
			for i, id := range ids {
				events, err := sessions.FindTurn(ctx, key, id)
				require.NoError(t, err, "turn %d", i+1)
				require.Equal(t, "done", events[len(events)-1].Text)
			}
			sess, err := sessions.Get(ctx, key, 0)
			require.NoError(t, err)
			require.Equal(t, int64(turns), sess.Version, "all 1,000 turns are stored")
			require.Equal(t, int64(4*turns+m.summaries), sess.EventCount, "user, tool call, tool output and answer per turn, and the checkpoints")
		})
	}
}
