// Package journaltest is a test double for the model clients' tests: an inbox.Outbox over
// inbox.NewMemoryInbox that records a turn's steps and deferred intents in maps, so that the
// tests of turn/agent, turn/chatcompletion and turn/anthropic replay steps through a real
// turn.Runner without depending on the memory inbox's own journal.
package journaltest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/turnstile-go/turnstile/inbox"
)

// Inbox is an inbox.Outbox: the memory inbox's entries, and steps and intents in maps.
// Claim, Delivered, Retry, Bury and RedriveIntent are minimal: enough to inspect intents.
type Inbox struct {
	inbox.Inbox

	mu      sync.Mutex
	steps   map[string]map[int]inbox.Step
	intents []inbox.Intent
}

var _ inbox.Outbox = (*Inbox)(nil)

// New returns an empty Inbox.
func New() *Inbox {
	return &Inbox{Inbox: inbox.NewMemoryInbox(), steps: map[string]map[int]inbox.Step{}}
}

// Steps returns the steps recorded under key, by ordinal.
func (ib *Inbox) Steps(_ context.Context, key string) ([]inbox.Step, error) {
	if key == "" {
		return nil, fmt.Errorf("%w: empty key", inbox.ErrInvalid)
	}
	ib.mu.Lock()
	defer ib.mu.Unlock()
	out := []inbox.Step{}
	for _, s := range ib.steps[key] {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b inbox.Step) int { return a.Ordinal - b.Ordinal })
	return out, nil
}

// RecordStep records s under key unless its ordinal is taken, and returns the step held.
func (ib *Inbox) RecordStep(_ context.Context, key string, s inbox.Step) (inbox.Step, error) {
	if key == "" || s.Name == "" || s.Ordinal < 1 {
		return inbox.Step{}, fmt.Errorf("%w: step %d %q under %q", inbox.ErrInvalid, s.Ordinal, s.Name, key)
	}
	ib.mu.Lock()
	defer ib.mu.Unlock()
	m := ib.steps[key]
	if m == nil {
		m = map[int]inbox.Step{}
		ib.steps[key] = m
	}
	if old, ok := m[s.Ordinal]; ok {
		if old.Name != s.Name {
			return old, inbox.ErrStepMismatch
		}
		return old, nil
	}
	s.At = time.Now().UTC()
	s.Output = slices.Clone(s.Output)
	m[s.Ordinal] = s
	return s, nil
}

// AllSteps returns every step recorded, under every key, by key and ordinal.
func (ib *Inbox) AllSteps() []inbox.Step {
	ib.mu.Lock()
	keys := make([]string, 0, len(ib.steps))
	for k := range ib.steps {
		keys = append(keys, k)
	}
	ib.mu.Unlock()
	slices.Sort(keys)
	var out []inbox.Step
	for _, k := range keys {
		s, _ := ib.Steps(context.Background(), k)
		out = append(out, s...)
	}
	return out
}

// Promote makes the deferred steps under key pending intents, once each.
func (ib *Inbox) Promote(_ context.Context, key string) (int, error) {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	n := 0
	for _, s := range ib.steps[key] {
		id := inbox.IntentID(key, s.Ordinal)
		if !s.Deferred || slices.ContainsFunc(ib.intents, func(it inbox.Intent) bool { return it.ID == id }) {
			continue
		}
		now := time.Now().UTC()
		ib.intents = append(ib.intents, inbox.Intent{ID: id, Key: key, Ordinal: s.Ordinal, Name: s.Name,
			Payload: slices.Clone(s.Output), Status: inbox.IntentPending, NextAt: now, CreatedAt: now, UpdatedAt: now})
		n++
	}
	return n, nil
}

// Claim returns up to n pending intents (no lease bookkeeping).
func (ib *Inbox) Claim(_ context.Context, n int, _ time.Duration) ([]inbox.Intent, error) {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	var out []inbox.Intent
	for i := range ib.intents {
		if len(out) < n && ib.intents[i].Status == inbox.IntentPending {
			ib.intents[i].Attempts++
			out = append(out, ib.intents[i])
		}
	}
	return out, nil
}

// set changes the status and reason of the intent id.
func (ib *Inbox) set(id string, st inbox.IntentStatus, reason string) error {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	for i := range ib.intents {
		if ib.intents[i].ID == id {
			ib.intents[i].Status, ib.intents[i].Reason = st, reason
			return nil
		}
	}
	return inbox.ErrNotFound
}

// Delivered marks the intent delivered.
func (ib *Inbox) Delivered(_ context.Context, id string) error {
	return ib.set(id, inbox.IntentDelivered, "")
}

// Retry records the reason; the intent stays pending.
func (ib *Inbox) Retry(_ context.Context, id, reason string, _ time.Time) error {
	return ib.set(id, inbox.IntentPending, reason)
}

// Bury marks the intent dead.
func (ib *Inbox) Bury(_ context.Context, id, reason string) error {
	return ib.set(id, inbox.IntentDead, reason)
}

// Intents returns every intent, oldest first (the filter is ignored).
func (ib *Inbox) Intents(context.Context, inbox.IntentFilter) ([]inbox.Intent, error) {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	return slices.Clone(ib.intents), nil
}

// RedriveIntent makes a dead intent pending.
func (ib *Inbox) RedriveIntent(_ context.Context, id, note string) (inbox.Intent, error) {
	if err := ib.set(id, inbox.IntentPending, note); err != nil {
		return inbox.Intent{}, err
	}
	ib.mu.Lock()
	defer ib.mu.Unlock()
	i := slices.IndexFunc(ib.intents, func(it inbox.Intent) bool { return it.ID == id })
	return ib.intents[i], nil
}
