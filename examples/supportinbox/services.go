package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// payments is a fake payment service with an idempotent refund API, like the real ones: a
// refund request carries an idempotency key, and a key seen before returns the refund it made
// the first time instead of paying again. It also answers whether an order was refunded.
type payments struct {
	mu      sync.Mutex
	byKey   map[string]refund
	byOrder map[string]refund
	calls   map[string]int // idempotency key -> refund requests
	lookups int
}

// refund is one refund the payment service issued.
type refund struct {
	ID, Key, Order string
	Cents          int64
}

func newPayments() *payments {
	return &payments{byKey: map[string]refund{}, byOrder: map[string]refund{}, calls: map[string]int{}}
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
	p.byOrder[order] = r
	return r, nil
}

// Lookup returns the refund made on order, if any.
func (p *payments) Lookup(ctx context.Context, order string) (refund, bool, error) {
	if err := ctx.Err(); err != nil {
		return refund{}, false, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lookups++
	r, ok := p.byOrder[order]
	return r, ok, nil
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

// mail is a fake mail service whose send API dedups on an idempotency key, as the outbox
// relay's receiver must: delivery is at least once, so a send request whose key was seen
// before (a redelivery) returns the first message's id and sends nothing.
type mail struct {
	mu    sync.Mutex
	byKey map[string]message
	sends map[string]int // idempotency key -> send requests, redeliveries included
}

// message is one email the mail service sent.
type message struct {
	ID, Key, To, Subject, Body string
}

func newMail() *mail { return &mail{byKey: map[string]message{}, sends: map[string]int{}} }

// Send sends the email once per idempotency key and returns the message.
func (m *mail) Send(ctx context.Context, key, to, subject, body string) (message, error) {
	if err := ctx.Err(); err != nil {
		return message{}, err
	}
	if key == "" {
		return message{}, errors.New("mail: an idempotency key is required")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sends[key]++
	if msg, ok := m.byKey[key]; ok {
		return msg, nil // a redelivery: already sent
	}
	msg := message{ID: fmt.Sprintf("M-%04d", len(m.byKey)+1), Key: key, To: to, Subject: subject, Body: body}
	m.byKey[key] = msg
	return msg, nil
}

// sent returns the emails sent, and how many send requests there were in all.
func (m *mail) sent() (msgs []message, requests int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, msg := range m.byKey {
		msgs = append(msgs, msg)
	}
	for _, n := range m.sends {
		requests += n
	}
	return msgs, requests
}

func (m *mail) sendsFor(key string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sends[key]
}
