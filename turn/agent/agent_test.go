package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turn/agent"
	"github.com/turnstile-go/turnstile/turn/internal/journaltest"
)

// scripted is a Provider that answers the n-th model call of a turn with the n-th reply of its
// script (the last one repeats), after checking the request is a valid conversation.
type scripted struct {
	t       *testing.T
	mu      sync.Mutex
	script  []func(req agent.Request) (agent.Reply, error)
	reqs    []agent.Request
	counter int
}

func (s *scripted) Complete(_ context.Context, req agent.Request) (agent.Reply, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	checkConversation(s.t, req.Messages)
	s.reqs = append(s.reqs, req)
	// The reply is chosen by the model calls the turn made before this one: the tool
	// messages after the last user message.
	n := 0
	for _, m := range req.Messages {
		switch m.Role {
		case agent.RoleUser:
			n = 0
		case agent.RoleTool:
			n++
		}
	}
	step := s.script[min(n, len(s.script)-1)]
	s.counter++
	return step(req)
}

func (s *scripted) calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counter
}

// checkConversation fails the test unless every assistant tool call is answered, in order, by
// the tool message right after it, and the conversation ends with a user or tool message.
func checkConversation(t *testing.T, msgs []agent.Message) {
	t.Helper()
	for i, m := range msgs {
		switch m.Role {
		case agent.RoleAssistant:
			if len(m.ToolCalls) == 0 {
				continue
			}
			if i+1 >= len(msgs) || msgs[i+1].Role != agent.RoleTool || len(msgs[i+1].Results) != len(m.ToolCalls) {
				t.Errorf("message %d: tool calls not answered by the next message: %+v", i, msgs)
				return
			}
			for k, c := range m.ToolCalls {
				if msgs[i+1].Results[k].CallID != c.ID {
					t.Errorf("message %d: call %s answered by %s", i, c.ID, msgs[i+1].Results[k].CallID)
				}
			}
		case agent.RoleTool:
			if i == 0 || len(msgs[i-1].ToolCalls) == 0 {
				t.Errorf("message %d: tool results without a tool call before", i)
			}
		}
	}
	if last := msgs[len(msgs)-1].Role; last != agent.RoleUser && last != agent.RoleTool {
		t.Errorf("conversation ends with %s", last)
	}
}

func reply(text string, calls ...agent.ToolCall) func(agent.Request) (agent.Reply, error) {
	return func(agent.Request) (agent.Reply, error) {
		return agent.Reply{Text: text, ToolCalls: calls, Data: json.RawMessage(`{"model":"scripted"}`)}, nil
	}
}

func call(id, name, args string) agent.ToolCall {
	return agent.ToolCall{ID: id, Name: name, Arguments: json.RawMessage(args)}
}

type orderArgs struct {
	Order string `json:"order" jsonschema:"description=the order id"`
}

// recorder counts a tool's calls and keeps their keys.
type recorder struct {
	mu   sync.Mutex
	keys []string
	fail func(n int) error // the n-th call's error (1-based), or nil
}

func (r *recorder) tool(name string) agent.Tool {
	return agent.NewTool(name, "does "+name, func(_ context.Context, c agent.Call, a orderArgs) (string, error) {
		r.mu.Lock()
		r.keys = append(r.keys, c.Key)
		n := len(r.keys)
		r.mu.Unlock()
		if r.fail != nil {
			if err := r.fail(n); err != nil {
				return "", err
			}
		}
		return name + " " + a.Order + " done", nil
	})
}

func (r *recorder) calls() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.keys...)
}

func input(text string, history ...session.Event) turn.Input {
	return turn.Input{
		Request: turn.Request{Schema: turn.SchemaVersion, ID: uuid.NewString(), ConversationID: "c-1", UserID: "u-1", Text: text},
		Session: session.Session{Key: session.Key{App: "test", User: "u-1", Conversation: "c-1"}, Events: history},
	}
}

func TestLoopRunsToolsInParallelAndRecordsEvents(t *testing.T) {
	t.Parallel()
	var lookup, refund recorder
	p := &scripted{t: t, script: []func(agent.Request) (agent.Reply, error){
		reply("Let me look.", call("a", "lookup", `{"order":"o-1"}`)),
		reply("", call("b", "refund", `{"order":"o-1"}`), call("c", "lookup", `{"order":"o-2"}`), call("d", "nope", `{}`)),
		reply("Refunded o-1."),
	}}
	a, err := agent.New(agent.Config{Provider: p, System: "be nice", Tools: []agent.Tool{lookup.tool("lookup"), refund.tool("refund")}})
	require.NoError(t, err)

	in := input("refund o-1", session.Event{Author: "user", Text: "hi"}, session.Event{Author: "assistant", Text: "hello"})
	out, err := a.Respond(context.Background(), in)
	require.NoError(t, err)

	var got []string
	for _, e := range out.Events {
		got = append(got, e.Author+": "+e.Text)
	}
	require.Equal(t, []string{
		"assistant: Let me look.",
		"tool: lookup o-1 done",
		"assistant: ",
		"tool: refund o-1 done",
		"tool: lookup o-2 done",
		`tool: error: unknown tool "nope"; the tools are the ones in this request's tool list`,
		"assistant: Refunded o-1.",
	}, got)
	require.JSONEq(t, `{"tool_calls":[{"id":"a","name":"lookup","arguments":{"order":"o-1"}}]}`, string(out.Events[0].Data))
	require.JSONEq(t, `{"tool_call_id":"d","name":"nope","is_error":true}`, string(out.Events[5].Data))
	require.JSONEq(t, `{"model":"scripted"}`, string(out.Events[6].Data))
	require.Len(t, lookup.calls(), 2)
	require.Len(t, refund.calls(), 1)
	keys := append(lookup.calls(), refund.calls()...)
	require.Len(t, map[string]bool{keys[0]: true, keys[1]: true, keys[2]: true}, 3, "each step has its own key")
	require.Equal(t, in.ToolKey("tool:lookup#2"), lookup.calls()[0], "the key is the step's: name and ordinal")

	require.Len(t, p.reqs, 3)
	require.Equal(t, "be nice", p.reqs[0].System)
	require.Len(t, p.reqs[0].Tools, 2)
	require.Equal(t, "lookup", p.reqs[0].Tools[0].Name)
	require.Equal(t, "object", p.reqs[0].Tools[0].Schema["type"])
	require.Len(t, p.reqs[2].Messages, 3+4) // hi, hello, refund o-1; two assistant+tool pairs
	// The model calls are steps 1, 3 and 6 (lookup is 2; refund and lookup 4 and 5; the
	// unknown tool takes none): the provider gets each one's step.
	var ordinals []int
	for _, r := range p.reqs {
		require.Equal(t, agent.ModelStep, r.Step.Name)
		require.Equal(t, in.ToolKey(fmt.Sprintf("model#%d", r.Step.Ordinal)), r.Step.Key)
		ordinals = append(ordinals, r.Step.Ordinal)
	}
	require.Equal(t, []int{1, 3, 6}, ordinals)

	// The next turn's history, from the events this turn returned (after its user message).
	history := append([]session.Event{{Author: "user", Text: "refund o-1"}}, out.Events...)
	msgs := agent.History(history)
	checkConversation(t, append(msgs, agent.Message{Role: agent.RoleUser, Text: "thanks"}))
	require.Len(t, msgs, 6)
	require.Equal(t, agent.RoleTool, msgs[4].Role)
	require.Len(t, msgs[4].Results, 3)
	require.True(t, msgs[4].Results[2].IsError)
}

func TestToolErrorGoesBackToTheModel(t *testing.T) {
	t.Parallel()
	flaky := recorder{fail: func(int) error { return errors.New("card declined") }}
	p := &scripted{t: t, script: []func(agent.Request) (agent.Reply, error){
		reply("", call("a", "refund", `{"order":"o-1"}`)),
		reply("", call("b", "refund", `"not an object"`)),
		func(req agent.Request) (agent.Reply, error) {
			last := req.Messages[len(req.Messages)-1]
			return agent.Reply{Text: fmt.Sprintf("saw %v: %s", last.Results[0].IsError, last.Results[0].Output)}, nil
		},
	}}
	a, err := agent.New(agent.Config{Provider: p, Tools: []agent.Tool{flaky.tool("refund")}})
	require.NoError(t, err)
	out, err := a.Respond(context.Background(), input("refund"))
	require.NoError(t, err)
	require.Contains(t, out.Events[1].Text, "card declined")
	require.JSONEq(t, `{"tool_call_id":"a","name":"refund","is_error":true}`, string(out.Events[1].Data))
	require.Contains(t, out.Events[len(out.Events)-1].Text, "saw true: error: agent: invalid tool arguments")
	require.Len(t, flaky.calls(), 1, "arguments that do not decode never reach the handler")
}

func TestTurnLevelToolErrorsFailTheTurn(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		err  error
		kind turn.Kind
	}{
		"permanent":  {turn.Permanent(errors.New("account closed")), turn.KindPermanent},
		"rate limit": {turn.RetryAfter(time.Second, errors.New("slow down")), turn.KindRateLimited},
		"canceled":   {context.Canceled, turn.KindAttempt},
		"abandoned":  {turn.ErrAbandoned, turn.KindAbandoned},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := recorder{fail: func(int) error { return tc.err }}
			p := &scripted{t: t, script: []func(agent.Request) (agent.Reply, error){reply("", call("a", "refund", `{}`)), reply("done")}}
			a, err := agent.New(agent.Config{Provider: p, Tools: []agent.Tool{r.tool("refund")}})
			require.NoError(t, err)
			_, err = a.Respond(context.Background(), input("x"))
			require.ErrorIs(t, err, tc.err)
			require.Equal(t, tc.kind, turn.Classify(err), "%v", err)
			require.Equal(t, 1, p.calls())
		})
	}
}

func TestToolPanicFailsTheAttempt(t *testing.T) {
	t.Parallel()
	p := &scripted{t: t, script: []func(agent.Request) (agent.Reply, error){reply("", call("a", "boom", `{}`))}}
	boom := agent.NewTool("boom", "panics", func(context.Context, agent.Call, struct{}) (string, error) { panic("kaboom") })
	a, err := agent.New(agent.Config{Provider: p, Tools: []agent.Tool{boom}})
	require.NoError(t, err)
	_, err = a.Respond(context.Background(), input("x"))
	var pe *turn.PanicError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, turn.KindAttempt, turn.Classify(err))
}

func TestMaxModelSteps(t *testing.T) {
	t.Parallel()
	var r recorder
	p := &scripted{t: t, script: []func(agent.Request) (agent.Reply, error){reply("", call("", "lookup", `{}`))}}
	a, err := agent.New(agent.Config{Provider: p, Tools: []agent.Tool{r.tool("lookup")}, MaxModelSteps: 3})
	require.NoError(t, err)
	_, err = a.Respond(context.Background(), input("loop"))
	require.ErrorIs(t, err, agent.ErrTooManySteps)
	require.Equal(t, turn.KindPermanent, turn.Classify(err))
	require.ErrorContains(t, err, "3 model calls")
	require.Equal(t, 3, p.calls())
	require.Len(t, r.calls(), 2, "the tools of the last allowed call do not run")
}

func TestEmptyReplyAndProviderErrors(t *testing.T) {
	t.Parallel()
	p := &scripted{t: t, script: []func(agent.Request) (agent.Reply, error){reply("")}}
	a, err := agent.New(agent.Config{Provider: p})
	require.NoError(t, err)
	_, err = a.Respond(context.Background(), input("x"))
	require.Equal(t, turn.KindAttempt, turn.Classify(err), "%v", err)

	limited := turn.RetryAfter(time.Second, errors.New("429"))
	p = &scripted{t: t, script: []func(agent.Request) (agent.Reply, error){func(agent.Request) (agent.Reply, error) { return agent.Reply{}, limited }}}
	a, err = agent.New(agent.Config{Provider: p})
	require.NoError(t, err)
	_, err = a.Respond(context.Background(), input("x"))
	require.Equal(t, limited, err)
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	var r recorder
	ok := r.tool("ok")
	cases := map[string]agent.Config{
		"nil provider": {},
		"negative":     {Provider: &scripted{}, MaxModelSteps: -1},
		"bad name":     {Provider: &scripted{}, Tools: []agent.Tool{r.tool("has space")}},
		"long name":    {Provider: &scripted{}, Tools: []agent.Tool{r.tool(string(make([]byte, 65)))}},
		"duplicate":    {Provider: &scripted{}, Tools: []agent.Tool{ok, ok}},
		"zero tool":    {Provider: &scripted{}, Tools: []agent.Tool{{}}},
		"nil handler":  {Provider: &scripted{}, Tools: []agent.Tool{agent.NewTool[orderArgs]("x", "", nil)}},
		"nil deliver":  {Provider: &scripted{}, Tools: []agent.Tool{agent.NewDeferred[orderArgs]("x", "", nil)}},
		"not object":   {Provider: &scripted{}, Tools: []agent.Tool{agent.NewTool("x", "", func(context.Context, agent.Call, string) (string, error) { return "", nil })}},
		"channel":      {Provider: &scripted{}, Tools: []agent.Tool{agent.NewTool("x", "", func(context.Context, agent.Call, chan int) (string, error) { return "", nil })}},
	}
	for name, cfg := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			a, err := agent.New(cfg)
			require.Error(t, err)
			require.Nil(t, a)
			if cfg.Provider != nil && cfg.MaxModelSteps == 0 {
				require.ErrorIs(t, err, agent.ErrInvalidTool)
			} else {
				require.ErrorIs(t, err, agent.ErrInvalidConfig)
			}
		})
	}
}

func TestSchema(t *testing.T) {
	t.Parallel()
	type args struct {
		Order  string   `json:"order" jsonschema:"description=the order id"`
		Amount int      `json:"amount,omitempty"`
		Tags   []string `json:"tags,omitempty"`
		Nested struct {
			Why string `json:"why"`
		} `json:"nested"`
	}
	tool := agent.NewTool("refund", "refunds", func(context.Context, agent.Call, args) (string, error) { return "", nil })
	require.NoError(t, tool.Err())
	data, err := json.Marshal(tool.Schema())
	require.NoError(t, err)
	require.JSONEq(t, `{"type":"object","additionalProperties":false,"required":["order","nested"],
		"properties":{"order":{"type":"string","description":"the order id"},"amount":{"type":"integer"},
		"tags":{"type":"array","items":{"type":"string"}},
		"nested":{"type":"object","additionalProperties":false,"required":["why"],"properties":{"why":{"type":"string"}}}}}`, string(data))
}

func TestHistoryDropsOrphansAndFillsMissingResults(t *testing.T) {
	t.Parallel()
	calls, err := agent.AssistantEvent("checking", []agent.ToolCall{call("x", "lookup", `{}`), call("y", "lookup", `{}`)})
	require.NoError(t, err)
	events := []session.Event{
		agent.ToolEvent(agent.ToolResult{CallID: "gone", Name: "lookup", Output: "orphan"}), // its call was cut off
		{Author: "assistant", Text: "final of a cut turn"},
		{Author: "user", Text: "again"},
		calls,
		agent.ToolEvent(agent.ToolResult{CallID: "y", Name: "lookup", Output: "y out"}),
		agent.ToolEvent(agent.ToolResult{CallID: "zz", Name: "lookup", Output: "not ours"}),
		{Author: "tool", Text: "host tool note"},
		{Author: "system", Text: "be brief"},
		{Author: "billing", Text: "paid"},
		{Author: "user"}, // empty: skipped
	}
	msgs := agent.History(events)
	require.Equal(t, []agent.Message{
		{Role: agent.RoleAssistant, Text: "final of a cut turn"},
		{Role: agent.RoleUser, Text: "again"},
		{Role: agent.RoleAssistant, Text: "checking", ToolCalls: []agent.ToolCall{call("x", "lookup", `{}`), call("y", "lookup", `{}`)}},
		{Role: agent.RoleTool, Results: []agent.ToolResult{
			{CallID: "x", Name: "lookup", Output: "error: this call's result is not in the conversation history", IsError: true},
			{CallID: "y", Name: "lookup", Output: "y out"},
		}},
		{Role: agent.RoleUser, Text: "[tool] host tool note"},
		{Role: agent.RoleSystem, Text: "be brief"},
		{Role: agent.RoleUser, Text: "[billing] paid"},
	}, msgs)
}

func TestArguments(t *testing.T) {
	t.Parallel()
	require.JSONEq(t, `{}`, string(agent.RawArguments("  ")))
	require.JSONEq(t, `{"a":1}`, string(agent.RawArguments(` {"a":1} `)))
	require.JSONEq(t, `"{broken"`, string(agent.RawArguments(`{broken`)))
	require.JSONEq(t, `{"a":1}`, string(agent.ObjectArguments(json.RawMessage(`{"a":1}`))))
	require.JSONEq(t, `{}`, string(agent.ObjectArguments(nil)))
	require.JSONEq(t, `{"arguments":"x"}`, string(agent.ObjectArguments(json.RawMessage(`"x"`))))
}

type mailArgs struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
}

func TestDeferredToolThroughRunnerAndDeliverer(t *testing.T) {
	t.Parallel()
	var delivered []string
	var mu sync.Mutex
	mail := agent.NewDeferred("send_email", "sends an email", func(_ context.Context, key string, a mailArgs) error {
		mu.Lock()
		defer mu.Unlock()
		delivered = append(delivered, key+" "+a.To+" "+a.Subject)
		return nil
	})
	p := &scripted{t: t, script: []func(agent.Request) (agent.Reply, error){
		reply("", call("m", "send_email", `{"to":"ann@example.com","subject":"refund"}`), call("n", "send_email", `{"to":1}`)),
		reply("Mail queued."),
	}}
	a, err := agent.New(agent.Config{Provider: p, Tools: []agent.Tool{mail}})
	require.NoError(t, err)
	ib := journaltest.New()
	r := &turn.Runner{Model: a, Sessions: session.NewMemoryStore(), Inbox: ib, TurnTimeout: 10 * time.Second}
	res, err := r.Run(context.Background(), input("mail me").Request)
	require.NoError(t, err)
	require.Equal(t, "Mail queued.", res.Text)
	require.Empty(t, delivered, "a deferred tool does not run in the turn")

	intents, err := ib.Intents(context.Background(), inbox.IntentFilter{})
	require.NoError(t, err)
	require.Len(t, intents, 1, "arguments that do not decode defer nothing")
	deliver := agent.Deliverer(mail)
	require.NoError(t, deliver(context.Background(), intents[0]))
	require.Len(t, delivered, 1)
	it, err := turn.DecodeIntent(intents[0].Payload)
	require.NoError(t, err)
	require.Equal(t, it.Key+" ann@example.com refund", delivered[0])

	for name, payload := range map[string]string{
		"unknown tool": `{"tool":"fax","args":{},"key":"k"}`,
		"bad args":     `{"tool":"send_email","args":{"to":1},"key":"k"}`,
		"not intent":   `nope`,
	} {
		err := deliver(context.Background(), inbox.Intent{ID: "i", Payload: []byte(payload)})
		var perm interface{ Permanent() bool }
		require.ErrorAs(t, err, &perm, name)
		require.True(t, perm.Permanent(), name)
		require.Equal(t, turn.KindPermanent, turn.Classify(err), name)
	}
	err = deliver(context.Background(), inbox.Intent{ID: "i", Payload: []byte(`{"tool":"fax","args":{},"key":"k"}`)})
	require.ErrorIs(t, err, agent.ErrUnknownTool)
}

func TestDeferredWithoutOutboxFailsPermanently(t *testing.T) {
	t.Parallel()
	mail := agent.NewDeferred("send_email", "", func(context.Context, string, mailArgs) error { return nil })
	p := &scripted{t: t, script: []func(agent.Request) (agent.Reply, error){reply("", call("m", "send_email", `{}`))}}
	a, err := agent.New(agent.Config{Provider: p, Tools: []agent.Tool{mail}})
	require.NoError(t, err)
	// A Runner whose inbox has no outbox (the memory inbox behind a type that hides it).
	r := &turn.Runner{Model: a, Sessions: session.NewMemoryStore(), Inbox: struct{ inbox.Inbox }{inbox.NewMemoryInbox()}}
	_, err = r.Run(context.Background(), input("x").Request)
	require.ErrorIs(t, err, turn.ErrNoOutbox)
	require.Equal(t, turn.KindPermanent, turn.Classify(err))
}

// A turn killed after its first tool step runs again on a fresh Runner over the same stores:
// the completed model and tool steps do not run again; the step in flight does, with its key.
func TestKillBetweenStepsReplays(t *testing.T) {
	t.Parallel()
	var lookup, refund recorder
	refund.fail = func(n int) error {
		if n == 1 {
			return errors.New("connection reset") // recorded as an error output: not the kill
		}
		return nil
	}
	crash := true
	var mu sync.Mutex
	p := &scripted{t: t, script: []func(agent.Request) (agent.Reply, error){
		reply("", call("a", "lookup", `{"order":"o-1"}`)),
		func(agent.Request) (agent.Reply, error) {
			mu.Lock()
			defer mu.Unlock()
			if crash {
				crash = false
				return agent.Reply{}, errors.New("model server died")
			}
			return agent.Reply{ToolCalls: []agent.ToolCall{call("b", "refund", `{"order":"o-1"}`)}}, nil
		},
		reply("done"),
	}}
	a, err := agent.New(agent.Config{Provider: p, Tools: []agent.Tool{lookup.tool("lookup"), refund.tool("refund")}})
	require.NoError(t, err)
	ib, store := journaltest.New(), session.NewMemoryStore()
	req := input("refund").Request

	_, err = (&turn.Runner{Model: a, Sessions: store, Inbox: ib, TurnTimeout: 10 * time.Second}).Run(context.Background(), req)
	require.Error(t, err)
	require.Equal(t, 2, p.calls())
	require.Len(t, lookup.calls(), 1)
	require.Len(t, journaltest.Steps(t, ib, req), 2, "model and lookup recorded")

	res, err := (&turn.Runner{Model: a, Sessions: store, Inbox: ib, TurnTimeout: 10 * time.Second}).Run(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, "done", res.Text)
	require.Equal(t, 4, p.calls(), "the first model step was not repaid; the one in flight ran again")
	require.Len(t, lookup.calls(), 1, "the completed tool step did not run again")
	require.Len(t, refund.calls(), 1)
	require.Len(t, journaltest.Steps(t, ib, req), 5)
}
