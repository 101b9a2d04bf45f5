package workflow

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
)

// recordingModel is a fake model that records the requests it saw, in call order.
type recordingModel struct {
	mu    sync.Mutex
	calls []turn.Input
	delay time.Duration
	// errFunc, when set, may fail a call.
	errFunc func(in turn.Input) error
}

func (m *recordingModel) Respond(ctx context.Context, in turn.Input) (turn.Output, error) {
	if m.delay > 0 {
		select {
		case <-time.After(m.delay):
		case <-ctx.Done():
			return turn.Output{}, ctx.Err()
		}
	}
	m.mu.Lock()
	m.calls = append(m.calls, in)
	m.mu.Unlock()
	if m.errFunc != nil {
		if err := m.errFunc(in); err != nil {
			return turn.Output{}, err
		}
	}
	return turn.Output{Events: []session.Event{{Text: fmt.Sprintf("answer to %q after %d events", in.Request.Text, in.Session.EventCount)}}}, nil
}

// sequences returns the Sequence of each call, in call order.
func (m *recordingModel) sequences() []int64 {
	return callsOf(m, func(in turn.Input) int64 { return in.Request.Sequence })
}

// texts returns the Text of each call, in call order.
func (m *recordingModel) texts() []string {
	return callsOf(m, func(in turn.Input) string { return in.Request.Text })
}

// ids returns the request id of each call, in call order.
func (m *recordingModel) ids() []string {
	return callsOf(m, func(in turn.Input) string { return in.Request.ID })
}

// callsOf returns field of each call, in call order.
func callsOf[T any](m *recordingModel, field func(turn.Input) T) []T {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]T, 0, len(m.calls))
	for _, c := range m.calls {
		out = append(out, field(c))
	}
	return out
}

// recordingPublisher is a Publisher that keeps what it was given.
type recordingPublisher struct {
	mu          sync.Mutex
	results     []turn.Result
	deadLetters []DeadLetter
}

func (p *recordingPublisher) PublishResult(_ context.Context, _ Envelope, res turn.Result) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.results = append(p.results, res)
	return nil
}

func (p *recordingPublisher) PublishDeadLetter(_ context.Context, _ Envelope, dl DeadLetter) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.deadLetters = append(p.deadLetters, dl)
	return nil
}

func (p *recordingPublisher) resultIDs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.results))
	for _, r := range p.results {
		out = append(out, r.RequestID)
	}
	return out
}

// unit is the bundle of a testsuite test: the fakes behind one worker's registration.
type unit struct {
	model     *recordingModel
	sessions  *session.MemoryStore
	inbox     *inbox.MemoryInbox
	runner    *turn.Runner
	publisher *recordingPublisher
	states    *MemoryLedger
	opts      WorkerOptions
}

func newUnit(t *testing.T) *unit {
	t.Helper()
	u := &unit{model: &recordingModel{}, sessions: session.NewMemoryStore(), inbox: inbox.NewMemoryInbox(), publisher: &recordingPublisher{}, states: &MemoryLedger{}}
	u.runner = &turn.Runner{Model: u.model, Sessions: u.sessions, Inbox: u.inbox, TurnTimeout: 10 * time.Second}
	u.opts = WorkerOptions{Runner: u.runner, Publisher: u.publisher, States: u.states}
	return u
}

// request returns a request of conversation conv with sequence seq (0: none).
func request(conv string, seq int64, text string) turn.Request {
	return turn.Request{Schema: turn.SchemaVersion, ID: uuid.NewString(), ConversationID: conv, UserID: "u-1", Sequence: seq, Text: text}
}

func batchOf(reqs ...turn.Request) Batch {
	var b Batch
	for _, r := range reqs {
		b.Envelopes = append(b.Envelopes, Envelope{Request: r, Source: r.Source})
	}
	return b
}
