package workflow

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turntest"
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
	// deadIDs are the request ids of deadLetters, in the same order, and deadEnvs their
	// envelopes.
	deadIDs  []string
	deadEnvs []Envelope
}

func (p *recordingPublisher) PublishResult(_ context.Context, _ Envelope, res turn.Result) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.results = append(p.results, res)
	return nil
}

func (p *recordingPublisher) PublishDeadLetter(_ context.Context, env Envelope, dl DeadLetter) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.deadLetters = append(p.deadLetters, dl)
	p.deadIDs = append(p.deadIDs, env.Request.ID)
	p.deadEnvs = append(p.deadEnvs, env)
	return nil
}

// deadLetterOf returns the reason of the first dead letter of request id, and whether there is
// one.
func (p *recordingPublisher) deadLetterOf(id string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, d := range p.deadIDs {
		if d == id {
			return p.deadLetters[i].Reason, true
		}
	}
	return "", false
}

// answered returns the request ids with a result or a dead letter.
func (p *recordingPublisher) answered() map[string]bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]bool, len(p.results)+len(p.deadIDs))
	for _, r := range p.results {
		out[r.RequestID] = true
	}
	for _, id := range p.deadIDs {
		out[id] = true
	}
	return out
}

// requireEveryRequestAnswered fails t unless every request of reqs (each request id sent to a
// workflow, duplicates included) ended with a result or a dead letter in answered: Temporal
// mode never drops a request silently.
func requireEveryRequestAnswered(t testing.TB, answered map[string]bool, reqs ...turn.Request) {
	t.Helper()
	require.NotEmpty(t, reqs, "no requests to check")
	var missing []string
	for _, r := range reqs {
		if !answered[r.ID] {
			missing = append(missing, fmt.Sprintf("%s (sequence %d, %q)", r.ID, r.Sequence, r.Text))
		}
	}
	require.Empty(t, missing, "requests with neither a result nor a dead letter")
}

// carriedInto adds to answered the requests a run that continued as new handed to the next run
// (carried, of next): they are still the conversation's, not dropped.
func carriedInto(answered map[string]bool, carried []Envelope) map[string]bool {
	for _, p := range carried {
		answered[p.Request.ID] = true
	}
	return answered
}

// carried returns the pending requests a run that continued as new handed to the next run, in
// the order they apply: next.Pending[:Older], those waiting in store (a run with an
// OverflowStore carries them by position), the rest of next.Pending.
func carried(t testing.TB, store *MemoryLedger, next State) []Envelope {
	t.Helper()
	older := min(next.Older, len(next.Pending))
	if next.Overflow == 0 {
		older = len(next.Pending)
	}
	out := slices.Clone(next.Pending[:older])
	store.mu.Lock()
	for pos := next.OverflowFrom; pos < next.OverflowFrom+next.Overflow; pos++ {
		env, ok := store.overflow[next.ConversationID][pos]
		require.True(t, ok, "position %d of the overflow is stored", pos)
		out = append(out, env)
	}
	store.mu.Unlock()
	return append(out, next.Pending[older:]...)
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
	// The recording model echoes its input: long conversations compact with a scripted
	// summarizer, whose calls the model's records do not show.
	u.runner = &turn.Runner{Model: u.model, Sessions: u.sessions, Inbox: u.inbox, TurnTimeout: 10 * time.Second,
		Summarizer: &turntest.FactSummarizer{}}
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
