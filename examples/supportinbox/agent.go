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
)

// payments is a fake payment service with an idempotent refund API, like the real ones: a
// refund request carries an idempotency key, and a key seen before returns the refund it made
// the first time instead of paying again.
type payments struct {
	mu    sync.Mutex
	byKey map[string]refund
	calls map[string]int // idempotency key -> refund requests
}

// refund is one refund the payment service issued.
type refund struct {
	ID, Key, Order string
	Cents          int64
}

func newPayments() *payments {
	return &payments{byKey: map[string]refund{}, calls: map[string]int{}}
}

// Refund refunds cents on order once per idempotency key and returns the refund.
func (p *payments) Refund(ctx context.Context, key, order string, cents int64) (refund, error) {
	if err := ctx.Err(); err != nil {
		return refund{}, err
	}
	if key == "" {
		return refund{}, errors.New("payments: an idempotency key is required")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls[key]++
	if r, ok := p.byKey[key]; ok {
		return r, nil // a retry: the first outcome, no second payment
	}
	r := refund{ID: fmt.Sprintf("R-%04d", len(p.byKey)+1), Key: key, Order: order, Cents: cents}
	p.byKey[key] = r
	return r, nil
}

// issued returns the refunds made, and how many refund requests there were in all.
func (p *payments) issued() (refunds []refund, calls int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.byKey {
		refunds = append(refunds, r)
	}
	for _, n := range p.calls {
		calls += n
	}
	return refunds, calls
}

func (p *payments) callsFor(key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[key]
}

// caseState is the session state the agent keeps for a conversation: what the first email said.
type caseState struct {
	Order        string    `json:"order"`
	Issue        string    `json:"issue"` // "double_charge" or "late_parcel"
	Cents        int64     `json:"cents,omitempty"`
	FirstEmailAt time.Time `json:"first_email_at"`
}

// agent is a deterministic support agent standing in for an LLM with one tool, refund. It
// reads the conversation's history and state from the session, so a second email is answered
// from what the first one said: the order id and the amount are only in the first.
type agent struct {
	payments *payments
	// contextWindow is the largest prompt, in bytes, the model takes; a longer one fails.
	contextWindow int
	// hold is the request whose first call stops after its refund tool call and waits until
	// its context ends, reporting on held: the turn a redeploy interrupts.
	hold string
	held chan heldTurn

	mu    sync.Mutex
	calls map[string][]string // request id -> the members that called the model, in order
}

// heldTurn says which member holds the interrupted turn, and the refund it already issued.
type heldTurn struct {
	member string
	refund refund
}

func newAgent(p *payments, contextWindow int, hold string) *agent {
	return &agent{payments: p, contextWindow: contextWindow, hold: hold, held: make(chan heldTurn, 1), calls: map[string][]string{}}
}

// model returns the agent as the ModelClient of one member.
func (a *agent) model(member string) turn.ModelClient {
	return turn.ModelFunc(func(ctx context.Context, in turn.Input) (turn.Output, error) {
		return a.respond(ctx, in, member)
	})
}

func (a *agent) callers(id string) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.calls[id]...)
}

var orderRe = regexp.MustCompile(`order ([AB]-\d{5})`)
var amountRe = regexp.MustCompile(`\$(\d+)\.(\d\d)`)

func (a *agent) respond(ctx context.Context, in turn.Input, member string) (turn.Output, error) {
	a.mu.Lock()
	a.calls[in.Request.ID] = append(a.calls[in.Request.ID], member)
	call := len(a.calls[in.Request.ID])
	a.mu.Unlock()

	prompt := len(in.Request.Text)
	for _, e := range in.Session.Events {
		prompt += len(e.Text)
	}
	if prompt > a.contextWindow {
		// Not Permanent: the host cannot tell an oversized prompt from a flaky model, so the
		// attempts run out and the inbox sends the email to the dead-letter topic.
		return turn.Output{}, fmt.Errorf("prompt of %d bytes is over the %d-byte context window", prompt, a.contextWindow)
	}
	var st caseState
	if len(in.Session.State) > 0 {
		if err := json.Unmarshal(in.Session.State, &st); err != nil {
			return turn.Output{}, turn.Permanent(fmt.Errorf("session state: %w", err))
		}
	}
	if st.Order == "" {
		return a.firstEmail(in)
	}
	first := ""
	for _, e := range in.Session.Events {
		if e.Author == "user" {
			first = subjectOf(e.Text)
			break
		}
	}
	re := fmt.Sprintf("Re: %q, which you wrote %s before this email", first, in.Request.CreatedAt.Sub(st.FirstEmailAt))
	if st.Issue != "double_charge" {
		return answer(fmt.Sprintf("%s: order %s left our warehouse yesterday and the carrier will deliver it tomorrow.", re, st.Order)), nil
	}
	r, err := a.payments.Refund(ctx, in.ToolKey("refund"), st.Order, st.Cents)
	if err != nil {
		return turn.Output{}, fmt.Errorf("refund tool: %w", err)
	}
	if in.Request.ID == a.hold && call == 1 {
		a.held <- heldTurn{member: member, refund: r}
		<-ctx.Done() // the model is still writing its answer when the member is redeployed
		return turn.Output{}, context.Cause(ctx)
	}
	data, _ := json.Marshal(map[string]any{"tool": "refund", "idempotency_key": r.Key, "refund_id": r.ID, "order": r.Order, "cents": r.Cents})
	return turn.Output{Events: []session.Event{
		{Author: "tool", Text: fmt.Sprintf("refund %s of $%s on order %s", r.ID, dollars(r.Cents), r.Order), Data: data},
		{Author: "assistant", Text: fmt.Sprintf("%s: we refunded the duplicate charge of $%s on order %s (refund %s); it shows on your statement within 5 days.",
			re, dollars(r.Cents), r.Order, r.ID)},
	}}, nil
}

// firstEmail opens the case: it notes the order and the issue in the session state.
func (a *agent) firstEmail(in turn.Input) (turn.Output, error) {
	m := orderRe.FindStringSubmatch(in.Request.Text)
	if m == nil {
		return answer("Thanks for your email. Which order is it about?"), nil
	}
	st := caseState{Order: m[1], Issue: "late_parcel", FirstEmailAt: in.Request.CreatedAt}
	text := fmt.Sprintf("Sorry that order %s is late. We have asked the carrier and will write again.", st.Order)
	if strings.Contains(in.Request.Text, "charged") {
		st.Issue = "double_charge"
		if am := amountRe.FindStringSubmatch(in.Request.Text); am != nil {
			var d, c int64
			fmt.Sscan(am[1], &d)
			fmt.Sscan(am[2], &c)
			st.Cents = d*100 + c
		}
		text = fmt.Sprintf("Thanks for telling us about the double charge of $%s on order %s. We are checking it with our payments team.", dollars(st.Cents), st.Order)
	}
	state, err := json.Marshal(st)
	if err != nil {
		return turn.Output{}, err
	}
	out := answer(text)
	out.State = state
	return out, nil
}

func answer(text string) turn.Output {
	return turn.Output{Events: []session.Event{{Author: "assistant", Text: text}}}
}

// subjectOf returns the text after "Subject: " on an email's first line.
func subjectOf(text string) string {
	line, _, _ := strings.Cut(text, "\n")
	return strings.TrimPrefix(line, "Subject: ")
}
