package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/tiktoken-go/tokenizer"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turn/agent"
	"github.com/turnstile-go/turnstile/turn/chatcompletion"
)

// The conversation every measurement runs: a support thread in which each turn's user asks
// about an order, the model looks it up with a tool (and, every fifth turn, queues a
// notification through the outbox, a deferred tool), then answers. The customer's facts are
// given only in turns 1 to 5, each on a line that starts with "FACT:"; the scripted
// summarizer keeps those lines, so what reaches the model at turn 1,000 shows the pipeline,
// not a model's skill.

// facts are the lines given in turns 1 to 5.
var facts = [...]string{
	"FACT: the customer is Dana Whitfield, account C-20417",
	"FACT: the order in question is A-10001, a standing desk paid 640 EUR on 2 November",
	"FACT: the delivery address is 14 Rue des Tanneurs, 69002 Lyon, France",
	"FACT: the customer wants updates by email only, never by phone",
	"FACT: the desk arrived with a cracked leg; a replacement leg was promised within ten days",
}

// notifyEvery is how often a turn queues a notification (a deferred tool call).
const notifyEvery = 5

// order returns the order a turn asks about.
func order(i int) string { return fmt.Sprintf("A-%05d", 10000+i) }

// userText returns turn i's message.
func userText(i int) string {
	s := fmt.Sprintf("turn %d: Hello again. Could you check order %s for me? It should have arrived by %s, "+
		"and the tracking page has not moved for two days. Please also confirm which address it is going to.",
		i, order(i), day(i))
	if i <= len(facts) {
		s += "\n" + facts[i-1]
	}
	return s
}

// day returns a date a few days after turn i's order.
func day(i int) string {
	return time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, i%60+3).Format("Monday 2 January")
}

// lookupOutput returns the lookup tool's output for an order: a JSON record of about 400
// bytes, as an order system would return it.
func lookupOutput(orderID string) string {
	out, _ := json.Marshal(map[string]any{
		"order": orderID, "status": "in_transit", "carrier": "DHL Express", "tracking": "JD0146" + strings.ReplaceAll(orderID, "-", "") + "7731",
		"eta": "2026-12-09", "last_scan": "2026-12-04T17:21:00Z Lyon-Saint-Exupery hub",
		"items":   []map[string]any{{"sku": "DSK-STAND-160", "name": "Standing desk 160x80, oak", "qty": 1}, {"sku": "LEG-REPL-01", "name": "Replacement leg", "qty": 1}},
		"address": "14 Rue des Tanneurs, 69002 Lyon, France", "notes": "customer prefers email",
	})
	return string(out)
}

// answerText returns the final answer of turn i.
func answerText(i int) string {
	return fmt.Sprintf("Order %s is in transit with DHL Express; the last scan was at the Lyon hub on 4 December and the carrier "+
		"now expects to deliver it on 9 December. It is going to 14 Rue des Tanneurs in Lyon, the address on file. I will "+
		"email you when it is out for delivery (turn %d).", order(i), i)
}

// The tools of the scripted agent.
type lookupArgs struct {
	Order string `json:"order" jsonschema:"description=the order id, like A-10001"`
}

type notifyArgs struct {
	Order    string `json:"order" jsonschema:"description=the order id"`
	Template string `json:"template" jsonschema:"description=the message template"`
}

func tools() []agent.Tool {
	return []agent.Tool{
		agent.NewTool("lookup_order", "Looks an order up in the order system: status, carrier, tracking, items, address.",
			func(_ context.Context, _ agent.Call, a lookupArgs) (string, error) { return lookupOutput(a.Order), nil }),
		agent.NewDeferred("notify_customer", "Queues an email to the customer from a template.",
			func(context.Context, string, notifyArgs) error { return nil }),
	}
}

// turnOf returns the turn number of the last user message of msgs (0 when there is none).
func turnOf(msgs []agent.Message) int {
	for k := len(msgs) - 1; k >= 0; k-- {
		if msgs[k].Role == agent.RoleUser {
			var n int
			if _, err := fmt.Sscanf(msgs[k].Text, "turn %d:", &n); err == nil {
				return n
			}
			return 0
		}
	}
	return 0
}

// summaryTurns is how many of the latest folded turns the scripted summary names.
const summaryTurns = 20

// summarize is the scripted summarizer: the "FACT:" lines of the previous summary and of the
// transcript, in order, then one line for each of the latest summaryTurns turns folded.
func summarize(transcript string) string {
	var factLines, turnLines []string
	seen := map[string]bool{}
	for _, l := range strings.Split(transcript, "\n") {
		if i := strings.Index(l, "FACT:"); i >= 0 && !seen[l[i:]] {
			seen[l[i:]] = true
			factLines = append(factLines, l[i:])
		}
		var n int
		if strings.HasPrefix(l, "- turn ") {
			turnLines = append(turnLines, l)
		} else if i := strings.Index(l, "user: turn "); i >= 0 {
			if _, err := fmt.Sscanf(l[i:], "user: turn %d:", &n); err == nil {
				turnLines = append(turnLines, fmt.Sprintf("- turn %d: asked about order %s; it is in transit, due 9 December; answered", n, order(n)))
			}
		}
	}
	turnLines = turnLines[max(0, len(turnLines)-summaryTurns):]
	return "Customer support thread.\n" + strings.Join(factLines, "\n") + "\nLatest turns:\n" + strings.Join(turnLines, "\n")
}

// script returns the scripted model's reply to req: a summary when req is a summarization
// (its system prompt is the instruction), tool calls when the turn's user message is the
// last message, the answer after the tool results.
func script(req agent.Request) agent.Reply {
	if req.System == turn.DefaultSummaryInstruction {
		return agent.Reply{Text: summarize(req.Messages[len(req.Messages)-1].Text)}
	}
	n := turnOf(req.Messages)
	if last := req.Messages[len(req.Messages)-1]; last.Role == agent.RoleUser {
		args, _ := json.Marshal(lookupArgs{Order: order(n)})
		calls := []agent.ToolCall{{ID: fmt.Sprintf("call_%d_1", n), Name: "lookup_order", Arguments: args}}
		if n%notifyEvery == 0 {
			args, _ := json.Marshal(notifyArgs{Order: order(n), Template: "delivery_update"})
			calls = append(calls, agent.ToolCall{ID: fmt.Sprintf("call_%d_2", n), Name: "notify_customer", Arguments: args})
		}
		return agent.Reply{ToolCalls: calls}
	}
	return agent.Reply{Text: answerText(n)}
}

// inputStats is what one turn's model requests took: the largest request (in tokens as the
// Runner counts them, and in bytes of the HTTP request body when the model is called over
// HTTP), and whether the turn's first request held every fact.
type inputStats struct {
	Tokens   int  `json:"tokens"`
	Bytes    int  `json:"bytes,omitempty"`
	AllFacts bool `json:"all_facts"`
}

// counter counts tokens with tiktoken's o200k_base (gpt-4o's encoding, as
// turn/chatcompletion counts for it), through a cache when it has one, or with
// turn.EstimateTokens when estimate is set.
type counter struct {
	codec    tokenizer.Codec
	estimate bool
	mu       sync.Mutex
	cache    map[string]int // nil: no cache
}

func newCounter(cache, estimate bool) (*counter, error) {
	codec, err := tokenizer.Get(tokenizer.O200kBase)
	if err != nil {
		return nil, err
	}
	c := &counter{codec: codec, estimate: estimate}
	if cache {
		c.cache = map[string]int{}
	}
	return c, nil
}

// CountTokens implements turn.TokenCounter.
func (c *counter) CountTokens(text string) int {
	if c.estimate {
		return turn.EstimateTokens(text)
	}
	if c.cache != nil {
		c.mu.Lock()
		n, ok := c.cache[text]
		c.mu.Unlock()
		if ok {
			return n
		}
	}
	n, err := c.codec.Count(text)
	if err != nil {
		n = turn.EstimateTokens(text)
	}
	if c.cache != nil {
		c.mu.Lock()
		c.cache[text] = n
		c.mu.Unlock()
	}
	return n
}

// meterProvider gives the meter (an Agent whose RequestTokens measures a request) its
// counter; it is never called.
type meterProvider struct{ *counter }

func (meterProvider) Complete(context.Context, agent.Request) (agent.Reply, error) {
	return agent.Reply{}, errors.New("the meter calls no model")
}

// provider is the scripted model behind turn/agent, an agent.Provider and a turn.TokenCounter
// (the Runner and the Agent count with it): in process, or over HTTP through
// turn/chatcompletion against a chat-completions server it serves. It records what each turn
// sent, measured in o200k tokens by a cached counter of its own (so that measuring adds
// little to the Runner's time) and in bytes of the HTTP request body.
type provider struct {
	*counter                        // the Runner's and the Agent's
	meter    *agent.Agent           // measures requests
	client   *chatcompletion.Client // nil: in process
	server   *httptest.Server

	mu        sync.Mutex
	next      []byte // the server's next response
	bodyBytes int    // the last request body's size

	turns              map[int]*inputStats
	modelCalls         int
	summaries          int
	summaryInputTokens int64
}

// newProvider returns a provider whose count (the Runner's) is cached when cache is set and
// turn.EstimateTokens when estimate is set; over HTTP when overHTTP is set.
func newProvider(cache, estimate, overHTTP bool) (*provider, error) {
	c, err := newCounter(cache, estimate)
	if err != nil {
		return nil, err
	}
	m, err := newCounter(true, false)
	if err != nil {
		return nil, err
	}
	meter, err := agent.New(agent.Config{Provider: meterProvider{m}, Tools: tools()})
	if err != nil {
		return nil, err
	}
	p := &provider{counter: c, meter: meter, turns: map[int]*inputStats{}}
	if overHTTP {
		p.server = httptest.NewServer(http.HandlerFunc(p.serve))
		p.client, err = chatcompletion.New(chatcompletion.Config{BaseURL: p.server.URL + "/v1", Model: "gpt-4o", Tools: tools()})
		if err != nil {
			p.server.Close()
			return nil, err
		}
	}
	return p, nil
}

// Close stops the server, if any.
func (p *provider) Close() {
	if p.server != nil {
		p.server.Close()
	}
}

// Complete implements agent.Provider.
func (p *provider) Complete(ctx context.Context, req agent.Request) (agent.Reply, error) {
	reply := script(req)
	tokens := p.meter.RequestTokens(req)
	bytes := 0
	if p.client != nil {
		body, err := openAIResponse(reply)
		if err != nil {
			return agent.Reply{}, err
		}
		p.mu.Lock()
		p.next = body
		p.mu.Unlock()
		if reply, err = p.client.Complete(ctx, req); err != nil {
			return agent.Reply{}, err
		}
		p.mu.Lock()
		bytes = p.bodyBytes
		p.mu.Unlock()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if req.System == turn.DefaultSummaryInstruction {
		p.summaries++
		p.summaryInputTokens += int64(tokens)
		return reply, nil
	}
	p.modelCalls++
	n := turnOf(req.Messages)
	st := p.turns[n]
	if st == nil {
		st = &inputStats{AllFacts: holdsFacts(req)}
		p.turns[n] = st
	}
	st.Tokens, st.Bytes = max(st.Tokens, tokens), max(st.Bytes, bytes)
	return reply, nil
}

// holdsFacts reports whether req's system prompt and messages hold every fact.
func holdsFacts(req agent.Request) bool {
	var b strings.Builder
	b.WriteString(req.System)
	for _, m := range req.Messages {
		b.WriteString("\n" + m.Text)
	}
	all := b.String()
	for _, f := range facts {
		if !strings.Contains(all, f) {
			return false
		}
	}
	return true
}

// serve is the chat-completions server: it reads the request, notes its size, and sends
// the response Complete prepared.
func (p *provider) serve(w http.ResponseWriter, r *http.Request) {
	n, err := io.Copy(io.Discard, r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	p.mu.Lock()
	p.bodyBytes = int(n)
	body := p.next
	p.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}

// openAIResponse encodes reply as a chat-completions response.
func openAIResponse(reply agent.Reply) ([]byte, error) {
	type function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	}
	type toolCall struct {
		ID       string   `json:"id"`
		Type     string   `json:"type"`
		Function function `json:"function"`
	}
	msg := map[string]any{"role": "assistant", "content": reply.Text}
	finish := "stop"
	if len(reply.ToolCalls) > 0 {
		var calls []toolCall
		for _, c := range reply.ToolCalls {
			calls = append(calls, toolCall{ID: c.ID, Type: "function", Function: function{Name: c.Name, Arguments: string(c.Arguments)}})
		}
		msg = map[string]any{"role": "assistant", "content": nil, "tool_calls": calls}
		finish = "tool_calls"
	}
	return json.Marshal(map[string]any{
		"id": "chatcmpl-scripted", "object": "chat.completion", "created": 1, "model": "gpt-4o",
		"choices": []any{map[string]any{"index": 0, "finish_reason": finish, "message": msg}},
	})
}

// strategy is what the model is given of a long conversation.
type strategy string

const (
	// whole: the whole history every turn (a Runner whose budget and window never bind).
	whole strategy = "whole history"
	// window: the last 50 events, as the Runner did before compaction (its HistoryLimit).
	window strategy = "last 50 events"
	// compaction: the Runner's context budget (DefaultContextBudget) and compaction.
	compaction strategy = "compaction"
)

// strategies lists them in the order of the tables and the plot.
var strategies = []strategy{whole, window, compaction}

// windowEvents is the window strategy's event count: the Runner's DefaultHistoryLimit.
const windowEvents = turn.DefaultHistoryLimit

// unbounded is a budget and a history limit that never bind.
const unbounded = 1 << 40

// conversation is one long conversation of a strategy.
type conversation struct {
	strategy strategy
	runner   *turn.Runner
	provider *provider
	key      string
}

// conversationOptions configures newConversation.
type conversationOptions struct {
	// Sessions and Inbox default to memory stores.
	Sessions session.Store
	Inbox    inbox.Inbox
	// Budget is the compaction strategy's ContextBudget; 0: DefaultContextBudget.
	Budget int
	// OverHTTP calls the model through turn/chatcompletion and a local server.
	OverHTTP bool
	// CacheTokens caches the Runner's token counts by text, as turn/chatcompletion's Client
	// does; EstimateTokens makes it count with turn.EstimateTokens.
	CacheTokens, EstimateTokens bool
	// Conversation is the conversation id; default the strategy's name.
	Conversation string
}

// newConversation returns the conversation of s.
func newConversation(s strategy, o conversationOptions) (*conversation, error) {
	p, err := newProvider(o.CacheTokens, o.EstimateTokens, o.OverHTTP)
	if err != nil {
		return nil, err
	}
	a, err := agent.New(agent.Config{Provider: p, Tools: tools()})
	if err != nil {
		p.Close()
		return nil, err
	}
	if o.Sessions == nil {
		o.Sessions = session.NewMemoryStore()
	}
	if o.Inbox == nil {
		o.Inbox = inbox.NewMemoryInbox()
	}
	r := &turn.Runner{Sessions: o.Sessions, Inbox: o.Inbox, TurnTimeout: 10 * time.Minute}
	switch s {
	case compaction:
		r.Model, r.ContextBudget = a, o.Budget
	case whole, window:
		// The Model is not the Agent itself, so that the Runner does not count tokens with
		// its tokenizer (the plain Runner never did); the Agent still checks its requests.
		r.Model = turn.ModelFunc(func(ctx context.Context, in turn.Input) (turn.Output, error) {
			if s == window {
				in.Session.Events = in.Session.Events[max(0, len(in.Session.Events)-windowEvents):]
			}
			return a.Respond(ctx, in)
		})
		r.ContextBudget, r.HistoryLimit = unbounded, unbounded
	default:
		p.Close()
		return nil, fmt.Errorf("unknown strategy %q", s)
	}
	if err := r.Validate(); err != nil {
		p.Close()
		return nil, err
	}
	return &conversation{strategy: s, runner: r, provider: p, key: cmp.Or(o.Conversation, strings.ReplaceAll(string(s), " ", "-"))}, nil
}

// Close releases the conversation's server, if any.
func (c *conversation) Close() { c.provider.Close() }

// run runs turn i of the conversation.
func (c *conversation) run(ctx context.Context, i int) error {
	req := turn.Request{Schema: turn.SchemaVersion, ID: requestID(c.key, i), ConversationID: c.key, UserID: "u-1", Text: userText(i)}
	res, err := c.runner.Run(ctx, req)
	if err != nil {
		return fmt.Errorf("%s: turn %d: %w", c.strategy, i, err)
	}
	if res.Text != answerText(i) {
		return fmt.Errorf("%s: turn %d: answered %q", c.strategy, i, res.Text)
	}
	return nil
}

// requestID returns a request id of conversation key's turn i, a UUID.
func requestID(key string, i int) string {
	h := uint32(2166136261)
	for _, c := range []byte(key) {
		h = (h ^ uint32(c)) * 16777619
	}
	return fmt.Sprintf("%08x-0000-4000-8000-%012d", h, i)
}

// stats returns turn i's input stats.
func (c *conversation) stats(i int) (inputStats, error) {
	c.provider.mu.Lock()
	defer c.provider.mu.Unlock()
	st, ok := c.provider.turns[i]
	if !ok {
		return inputStats{}, errors.New("no model request recorded")
	}
	return *st, nil
}
