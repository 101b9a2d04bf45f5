package session

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"
)

// MemoryStore is a Store in process memory, safe for concurrent use. It is for tests and
// single-process demos: its sessions die with the process, so it does not give G4 across
// workers. The zero value is not usable; call NewMemoryStore.
type MemoryStore struct {
	mu       sync.Mutex
	sessions map[appConv]*memSession
	now      func() time.Time
}

var _ Store = (*MemoryStore)(nil)

type appConv struct{ app, conv string }

type memSession struct {
	user      string
	state     []byte
	events    []Event
	turns     map[string][2]int // request id -> [first, end) indexes into events
	version   int64
	createdAt time.Time
	updatedAt time.Time
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{sessions: make(map[appConv]*memSession), now: time.Now}
}

// lookup returns the session of key, checking its owner. The caller holds s.mu.
func (s *MemoryStore) lookup(key Key) (*memSession, error) {
	if err := key.Validate(); err != nil {
		return nil, err
	}
	m, ok := s.sessions[appConv{key.App, key.Conversation}]
	if !ok {
		return nil, fmt.Errorf("%w: session %s", ErrNotFound, key)
	}
	if m.user != key.User {
		return nil, fmt.Errorf("%w: session %s", ErrOwnerMismatch, key)
	}
	return m, nil
}

func (m *memSession) snapshot(key Key, recent int) Session {
	out := Session{
		Key:        key,
		State:      bytes.Clone(m.state),
		EventCount: int64(len(m.events)),
		Version:    m.version,
		CreatedAt:  m.createdAt,
		UpdatedAt:  m.updatedAt,
	}
	if recent > 0 {
		out.Events = cloneEvents(m.events[max(0, len(m.events)-recent):])
	}
	return out
}

func cloneEvents(in []Event) []Event {
	out := slices.Clone(in)
	for i := range out {
		out[i].Data = bytes.Clone(out[i].Data)
	}
	return out
}

// Get implements Store.
func (s *MemoryStore) Get(ctx context.Context, key Key, recent int) (Session, error) {
	if err := ctx.Err(); err != nil {
		return Session{}, err
	}
	s.mu.Lock()
	m, err := s.lookup(key)
	if err != nil {
		s.mu.Unlock()
		return Session{}, err
	}
	out := m.snapshot(key, 0)
	var recentEvents []Event
	if recent > 0 {
		// Appended events are never written again (Append only adds after them), so the
		// copy can be made outside the lock, which every conversation shares.
		recentEvents = m.events[max(0, len(m.events)-recent):len(m.events):len(m.events)]
	}
	s.mu.Unlock()
	if len(recentEvents) > 0 {
		out.Events = cloneEvents(recentEvents)
	}
	return out, nil
}

// Create implements Store.
func (s *MemoryStore) Create(ctx context.Context, key Key, state json.RawMessage) (Session, error) {
	if err := ctx.Err(); err != nil {
		return Session{}, err
	}
	if err := key.Validate(); err != nil {
		return Session{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if m, ok := s.sessions[appConv{key.App, key.Conversation}]; ok {
		if m.user != key.User {
			return Session{}, fmt.Errorf("%w: session %s", ErrOwnerMismatch, key)
		}
		return Session{}, fmt.Errorf("%w: session %s", ErrExists, key)
	}
	now := s.now().UTC()
	m := &memSession{user: key.User, state: bytes.Clone(state), turns: map[string][2]int{}, createdAt: now, updatedAt: now}
	s.sessions[appConv{key.App, key.Conversation}] = m
	return m.snapshot(key, 0), nil
}

// Append implements Store.
func (s *MemoryStore) Append(ctx context.Context, key Key, expectedVersion int64, t Turn) (Appended, error) {
	if err := ctx.Err(); err != nil {
		return Appended{}, err
	}
	if err := t.Validate(); err != nil {
		return Appended{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m, err := s.lookup(key)
	if err != nil {
		return Appended{}, err
	}
	if m.version != expectedVersion {
		return Appended{}, fmt.Errorf("%w: session %s is at version %d, not %d", ErrConflict, key, m.version, expectedVersion)
	}
	if r, ok := m.turns[t.RequestID]; ok {
		return Appended{Version: m.version, Events: cloneEvents(m.events[r[0]:r[1]]), Duplicate: true}, nil
	}
	first := len(m.events)
	for _, e := range t.Events {
		e.RequestID = t.RequestID
		e.Seq = int64(len(m.events) + 1)
		e.Data = bytes.Clone(e.Data)
		m.events = append(m.events, e)
	}
	m.turns[t.RequestID] = [2]int{first, len(m.events)}
	if t.State != nil {
		m.state = bytes.Clone(t.State)
	}
	m.version++
	m.updatedAt = s.now().UTC()
	return Appended{Version: m.version, Events: cloneEvents(m.events[first:])}, nil
}

// FindTurn implements Store.
func (s *MemoryStore) FindTurn(ctx context.Context, key Key, requestID string) ([]Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if requestID == "" {
		return nil, fmt.Errorf("%w: empty request id", ErrInvalid)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m, err := s.lookup(key)
	if err != nil {
		return nil, err
	}
	r, ok := m.turns[requestID]
	if !ok {
		return nil, fmt.Errorf("%w: no turn of request %s in session %s", ErrNotFound, requestID, key)
	}
	return cloneEvents(m.events[r[0]:r[1]]), nil
}

// Delete implements Store.
func (s *MemoryStore) Delete(ctx context.Context, key Key) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.lookup(key); err != nil {
		return err
	}
	delete(s.sessions, appConv{key.App, key.Conversation})
	return nil
}
