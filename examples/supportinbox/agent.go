package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turn/agent"
)

// The agent's tools, by name.
const (
	toolOpenCase     = "open_case"
	toolLookupRefund = "lookup_refund"
	toolRefund       = "refund"
	toolSendEmail    = "send_email"
)

// caseState is the session state the host keeps for a conversation: the case the model opened
// on the first email (its open_case call), and when that email was written.
type caseState struct {
	Order        string    `json:"order"`
	Issue        string    `json:"issue"` // "double_charge" or "late_parcel"
	Cents        int64     `json:"cents,omitempty"`
	FirstEmailAt time.Time `json:"first_email_at"`
}

// The tools' arguments, whose JSON schemas the model gets.
type (
	openCaseArgs struct {
		Order string `json:"order" jsonschema:"description=the order id the email is about"`
		Issue string `json:"issue" jsonschema:"enum=double_charge,enum=late_parcel"`
		Cents int64  `json:"cents,omitempty" jsonschema:"description=the amount charged twice, in cents"`
	}
	orderArgs struct {
		Order string `json:"order" jsonschema:"description=the order id"`
	}
	refundArgs struct {
		Order string `json:"order" jsonschema:"description=the order id"`
		Cents int64  `json:"cents" jsonschema:"description=the amount to refund, in cents"`
	}
	emailArgs struct {
		To      string `json:"to"`
		Subject string `json:"subject"`
		Body    string `json:"body"`
	}
)

// The tools' outputs, JSON the model reads.
type (
	lookupOutput struct {
		Order    string `json:"order"`
		Refunded bool   `json:"refunded"`
		RefundID string `json:"refund_id,omitempty"`
	}
	refundOutput struct {
		RefundID string `json:"refund_id"`
		Order    string `json:"order"`
		Cents    int64  `json:"cents"`
	}
)

// stepRun is one run of a step of the agent loop: which member ran it, and the step's
// ordinal in its turn (and, for a tool, its name and idempotency key).
type stepRun struct {
	Member    string
	Ordinal   int
	Name, Key string
}

// recorder counts the runs of the agent's steps per request: each model call (Provider
// Complete) and each tool call. A step the journal answers on a re-run is not run, so it is
// not counted again.
type recorder struct {
	mu    sync.Mutex
	model map[string][]stepRun // request id -> model calls, in order
	tools map[string][]stepRun // request id -> tool calls, in order
}

func (r *recorder) add(to map[string][]stepRun, id string, s stepRun) {
	r.mu.Lock()
	defer r.mu.Unlock()
	to[id] = append(to[id], s)
}

// modelCalls returns the model calls made for request id.
func (r *recorder) modelCalls(id string) []stepRun {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]stepRun(nil), r.model[id]...)
}

// toolCalls returns the tool calls made for request id.
func (r *recorder) toolCalls(id string) []stepRun {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]stepRun(nil), r.tools[id]...)
}

// totals returns the model calls and the tool calls per tool name, over every request.
func (r *recorder) totals() (model int, tools map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	tools = map[string]int{}
	for _, calls := range r.model {
		model += len(calls)
	}
	for _, calls := range r.tools {
		for _, c := range calls {
			tools[c.Name]++
		}
	}
	return model, tools
}

// turnInfo is what the host's wrapper (desk) puts in a turn's context for the provider and
// the tools: the member running the turn and the request.
type turnInfo struct {
	member  string
	request string
}

type turnInfoKey struct{}

func infoOf(ctx context.Context) turnInfo {
	ti, _ := ctx.Value(turnInfoKey{}).(turnInfo)
	return ti
}

// support is the support platform's agent: one agent.Agent (the provider-neutral loop) over
// a scripted LLM and four tools, shared by the members, each of which wraps it in a desk.
type support struct {
	agent *agent.Agent
	llm   *llm
	rec   *recorder
	tools []agent.Tool // the relay delivers the deferred ones (agent.Deliverer)
}

// heldTurn says which member holds the interrupted turn, and the refund it already issued.
type heldTurn struct {
	member string
	refund string
}

// newSupport returns the agent over the payment and mail services: a fake LLM whose context
// window is contextWindow bytes and which holds request hold's model call after its refund.
func newSupport(p *payments, m *mail, contextWindow int, hold string) (*support, error) {
	rec := &recorder{model: map[string][]stepRun{}, tools: map[string][]stepRun{}}
	s := &support{rec: rec, llm: &llm{contextWindow: contextWindow, hold: hold, held: make(chan heldTurn, 1), rec: rec}}
	record := func(ctx context.Context, call agent.Call) {
		rec.add(rec.tools, infoOf(ctx).request, stepRun{Member: infoOf(ctx).member, Ordinal: call.Ordinal, Name: call.Name, Key: call.Key})
	}
	s.tools = []agent.Tool{
		agent.NewTool(toolOpenCase, "Opens the support case of a new email: the order it is about, the issue, and for a double charge the amount.",
			func(ctx context.Context, call agent.Call, args openCaseArgs) (string, error) {
				record(ctx, call)
				if args.Order == "" || (args.Issue != "double_charge" && args.Issue != "late_parcel") {
					return "", fmt.Errorf("open_case needs an order and an issue (double_charge or late_parcel), got %+v", args)
				}
				return fmt.Sprintf("case opened: order %s, %s", args.Order, args.Issue), nil
			}),
		agent.NewTool(toolLookupRefund, "Asks the payment service whether an order was refunded already, and by which refund.",
			func(ctx context.Context, call agent.Call, args orderArgs) (string, error) {
				record(ctx, call)
				r, ok, err := p.Lookup(ctx, args.Order)
				if err != nil {
					return "", err
				}
				out, _ := json.Marshal(lookupOutput{Order: args.Order, Refunded: ok, RefundID: r.ID}) // strings and a bool
				return string(out), nil
			}),
		agent.NewTool(toolRefund, "Refunds an amount on an order through the payment service. Call it once per refund.",
			func(ctx context.Context, call agent.Call, args refundArgs) (string, error) {
				record(ctx, call)
				// call.Key is the step's key, the same on every run of the turn: the payment
				// service's idempotency key.
				r, err := p.Refund(ctx, call.Key, args.Order, args.Cents)
				if err != nil {
					return "", err
				}
				out, _ := json.Marshal(refundOutput{RefundID: r.ID, Order: r.Order, Cents: r.Cents}) // strings and an int
				return string(out), nil
			}),
		// Deferred: the email goes out through the outbox once the turn has committed, so a
		// turn cut mid-loop (or run twice) never emails the customer about a turn that is not
		// in the session; the relay passes the step's key to the mail service.
		agent.NewDeferred(toolSendEmail, "Sends the customer an email once this turn completes.",
			func(ctx context.Context, key string, args emailArgs) error {
				_, err := m.Send(ctx, key, args.To, args.Subject, args.Body)
				return err
			}),
	}
	a, err := agent.New(agent.Config{
		Provider: s.llm,
		System:   "You are the support agent of a web shop. Open a case on a customer's first email; refund a double charge once, after checking it was not refunded already, and email the customer a confirmation.",
		Tools:    s.tools,
	})
	if err != nil {
		return nil, err
	}
	s.agent = a
	return s, nil
}

// desk returns the agent as the ModelClient of one member: the host's wrapper around the
// loop, which does what the loop leaves to the host. It puts the member and the request in
// the turn's context (for the counts), shows the model the case file from the session state
// as a system note, and after a first email sets Output.State from the model's open_case call
// (the loop's Output carries events only).
func (s *support) desk(member string) turn.ModelClient {
	return turn.ModelFunc(func(ctx context.Context, in turn.Input) (turn.Output, error) {
		ctx = context.WithValue(ctx, turnInfoKey{}, turnInfo{member: member, request: in.Request.ID})
		var st caseState
		if len(in.Session.State) > 0 {
			if err := json.Unmarshal(in.Session.State, &st); err != nil {
				return turn.Output{}, turn.Permanent(fmt.Errorf("session state: %w", err))
			}
			note, _ := json.Marshal(caseFile{Order: st.Order, Issue: st.Issue, Cents: st.Cents, Customer: in.Request.UserID,
				Opened: in.Request.CreatedAt.Sub(st.FirstEmailAt).String() + " before this email"}) // strings and an int
			events := append(append([]session.Event(nil), in.Session.Events...), session.Event{Author: agent.AuthorSystem, Text: caseFilePrefix + string(note)})
			in.Session.Events = events
		}
		out, err := s.agent.Respond(ctx, in)
		if err != nil || st.Order != "" {
			return out, err
		}
		for _, e := range out.Events {
			var d agent.ToolCallsData
			if e.Author != agent.AuthorAssistant || len(e.Data) == 0 || json.Unmarshal(e.Data, &d) != nil {
				continue
			}
			for _, c := range d.ToolCalls {
				var args openCaseArgs
				if c.Name == toolOpenCase && json.Unmarshal(c.Arguments, &args) == nil {
					out.State, err = json.Marshal(caseState{Order: args.Order, Issue: args.Issue, Cents: args.Cents, FirstEmailAt: in.Request.CreatedAt})
				}
			}
		}
		return out, err
	})
}

// caseFile is the system note the desk gives the model on a case's later emails.
type caseFile struct {
	Order    string `json:"order"`
	Issue    string `json:"issue"`
	Cents    int64  `json:"cents,omitempty"`
	Customer string `json:"customer"`
	Opened   string `json:"opened"`
}

const caseFilePrefix = "case file: "

// llm is a scripted, deterministic stand-in for a real model (an agent.Provider): it reads
// the messages it is given (the system note with the case file, the conversation from the
// session, this turn's tool calls and results) and decides what to do next, as a model with
// tools would. On a first email it opens the case; on the second email of a double charge it
// looks the refund up, refunds, emails the customer and answers; on a late parcel it answers.
type llm struct {
	// contextWindow is the largest prompt, in bytes, the model takes; a longer one fails.
	contextWindow int
	// hold is the request whose model call after its refund waits until its context ends,
	// reporting on held, the first time: the turn a redeploy interrupts.
	hold string
	held chan heldTurn
	once sync.Once
	rec  *recorder
}

var orderRe = regexp.MustCompile(`order ([AB]-\d{5})`)
var amountRe = regexp.MustCompile(`\$(\d+)\.(\d\d)`)

// Complete is one model call.
func (m *llm) Complete(ctx context.Context, req agent.Request) (agent.Reply, error) {
	if err := ctx.Err(); err != nil {
		return agent.Reply{}, err
	}
	// The current email is the last user message; this turn's steps come after it.
	cur := -1
	for i, msg := range req.Messages {
		if msg.Role == agent.RoleUser {
			cur = i
		}
	}
	if cur < 0 {
		return agent.Reply{}, turn.Permanent(errors.New("llm: no user message"))
	}
	steps := req.Messages[cur+1:]
	ordinal := req.Step.Ordinal // this call's step in the turn's journal
	var results []agent.ToolResult
	for _, msg := range steps {
		results = append(results, msg.Results...)
	}
	ti := infoOf(ctx)
	m.rec.add(m.rec.model, ti.request, stepRun{Member: ti.member, Ordinal: ordinal, Name: agent.ModelStep})

	prompt := len(req.System)
	for _, msg := range req.Messages {
		prompt += len(msg.Text)
		for _, r := range msg.Results {
			prompt += len(r.Output)
		}
	}
	if prompt > m.contextWindow {
		// Not Permanent: the host cannot tell an oversized prompt from a flaky model, so the
		// attempts run out and the inbox sends the email to the dead-letter topic.
		return agent.Reply{}, fmt.Errorf("prompt of %d bytes is over the %d-byte context window", prompt, m.contextWindow)
	}

	email := req.Messages[cur].Text
	var cf caseFile
	first := ""
	for _, msg := range req.Messages[:cur] {
		switch {
		case msg.Role == agent.RoleSystem && strings.HasPrefix(msg.Text, caseFilePrefix):
			if err := json.Unmarshal([]byte(strings.TrimPrefix(msg.Text, caseFilePrefix)), &cf); err != nil {
				return agent.Reply{}, turn.Permanent(fmt.Errorf("llm: case file: %w", err))
			}
		case msg.Role == agent.RoleUser && first == "":
			first = subjectOf(msg.Text)
		}
	}
	last := func(name string) (agent.ToolResult, bool) {
		for k := len(results) - 1; k >= 0; k-- {
			if results[k].Name == name {
				return results[k], true
			}
		}
		return agent.ToolResult{}, false
	}
	if cf.Order == "" {
		return openCase(email, len(results) > 0)
	}
	re := fmt.Sprintf("Re: %q, which you wrote %s", first, cf.Opened)
	if cf.Issue != "double_charge" {
		return agent.Reply{Text: fmt.Sprintf("%s: order %s left our warehouse yesterday and the carrier will deliver it tomorrow.", re, cf.Order)}, nil
	}
	var refunded refundOutput
	if r, ok := last(toolRefund); ok {
		if err := json.Unmarshal([]byte(r.Output), &refunded); err != nil {
			return agent.Reply{}, fmt.Errorf("llm: the refund tool's output %q: %w", r.Output, err)
		}
	}
	switch {
	case len(results) == 0:
		return call(ordinal, toolLookupRefund, orderArgs{Order: cf.Order}), nil
	case results[len(results)-1].Name == toolLookupRefund:
		var lk lookupOutput
		if err := json.Unmarshal([]byte(results[len(results)-1].Output), &lk); err != nil {
			return agent.Reply{}, fmt.Errorf("llm: the lookup's output %q: %w", results[len(results)-1].Output, err)
		}
		if lk.Refunded {
			return agent.Reply{Text: fmt.Sprintf("%s: the duplicate charge on order %s was refunded already (refund %s).", re, cf.Order, lk.RefundID)}, nil
		}
		return call(ordinal, toolRefund, refundArgs{Order: cf.Order, Cents: cf.Cents}), nil
	case results[len(results)-1].Name == toolRefund:
		if ti.request == m.hold {
			held := false
			m.once.Do(func() { held = true })
			if held {
				m.held <- heldTurn{member: ti.member, refund: refunded.RefundID}
				<-ctx.Done() // the model is still writing when the member is redeployed
				return agent.Reply{}, context.Cause(ctx)
			}
		}
		return call(ordinal, toolSendEmail, emailArgs{
			To:      cf.Customer + "@example.com",
			Subject: fmt.Sprintf("Your refund %s for order %s", refunded.RefundID, cf.Order),
			Body:    fmt.Sprintf("We refunded the duplicate charge of $%s on order %s (refund %s).", dollars(refunded.Cents), cf.Order, refunded.RefundID),
		}), nil
	}
	return agent.Reply{Text: fmt.Sprintf("%s: we refunded the duplicate charge of $%s on order %s (refund %s); it shows on your statement within 5 days, and we emailed you a confirmation.",
		re, dollars(refunded.Cents), cf.Order, refunded.RefundID)}, nil
}

// openCase is the model on a first email: it opens the case, then acknowledges the email.
func openCase(email string, opened bool) (agent.Reply, error) {
	m := orderRe.FindStringSubmatch(email)
	if m == nil {
		return agent.Reply{Text: "Thanks for your email. Which order is it about?"}, nil
	}
	args := openCaseArgs{Order: m[1], Issue: "late_parcel"}
	text := fmt.Sprintf("Sorry that order %s is late. We have asked the carrier and will write again.", args.Order)
	if strings.Contains(email, "charged") {
		args.Issue = "double_charge"
		if am := amountRe.FindStringSubmatch(email); am != nil {
			var d, c int64
			fmt.Sscan(am[1], &d)
			fmt.Sscan(am[2], &c)
			args.Cents = d*100 + c
		}
		text = fmt.Sprintf("Thanks for telling us about the double charge of $%s on order %s. We are checking it with our payments team.", dollars(args.Cents), args.Order)
	}
	if !opened {
		return call(1, toolOpenCase, args), nil
	}
	return agent.Reply{Text: text}, nil
}

// call is a reply that calls one tool, with a provider-style call id.
func call(ordinal int, name string, args any) agent.Reply {
	data, _ := json.Marshal(args) // the argument structs encode
	return agent.Reply{ToolCalls: []agent.ToolCall{{ID: fmt.Sprintf("toolu_%02d_%s", ordinal, name), Name: name, Arguments: data}}}
}

// subjectOf returns the text after "Subject: " on an email's first line.
func subjectOf(text string) string {
	line, _, _ := strings.Cut(text, "\n")
	return strings.TrimPrefix(line, "Subject: ")
}
