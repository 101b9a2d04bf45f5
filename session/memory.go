package session

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"sync"
	"time"
)

// MemoryStore is a Store in process memory, safe for concurrent use. It is for tests and
// single-process demos: its sessions die with the process, so it does not give G4 across
// workers. The zero value is not usable; call NewMemoryStore.
//
// Sessions are spread over shards by a hash of the conversation (hash/maphash), each with its
// own lock, so that turns of different conversations do not queue on one mutex. It copies
// what it is given, and shares what it returns (the Store contract makes that read-only): Get
// costs the same whatever the history limit, with no copy of the events.
type MemoryStore struct {
	shards [memShards]storeShard
	seed   maphash.Seed
	now    func() time.Time
}

// memShards is the number of independently locked parts of a MemoryStore.
const memShards = 64

type storeShard struct {
	mu       sync.Mutex
	sessions map[appConv]*memSession
}

var _ Retention = (*MemoryStore)(nil)

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
	s := &MemoryStore{seed: maphash.MakeSeed(), now: time.Now}
	for i := range s.shards {
		s.shards[i].sessions = make(map[appConv]*memSession)
	}
	return s
}

// shard returns the part that holds key's session, locked; unlock it when done.
func (s *MemoryStore) shard(key Key) *storeShard {
	sh := &s.shards[maphash.String(s.seed, key.Conversation)%memShards]
	sh.mu.Lock()
	return sh
}

// lookup returns the session of key, checking its owner. The caller holds sh.mu.
func (sh *storeShard) lookup(key Key) (*memSession, error) {
	if err := key.Validate(); err != nil {
		return nil, err
	}
	m, ok := sh.sessions[appConv{key.App, key.Conversation}]
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
		State:      m.state, // replaced on Append, never written in place: shared, read-only
		EventCount: int64(len(m.events)),
		Version:    m.version,
		CreatedAt:  m.createdAt,
		UpdatedAt:  m.updatedAt,
	}
	if recent > 0 {
		out.Events = shared(m.events, len(m.events)-recent, len(m.events))
	}
	return out
}

// shared returns events[from:to] (from clipped at 0) for a caller to read: appended events
// are never written again (Append only adds after them, and a new array when it grows keeps
// the old one intact), and the capacity is cut at to, so that a caller appending to what it
// got makes its own array. Store's contract makes what a Store returns read-only.
func shared(events []Event, from, to int) []Event {
	from = max(0, from)
	if from >= to {
		return nil
	}
	return events[from:to:to]
}

// Get implements Store.
func (s *MemoryStore) Get(ctx context.Context, key Key, recent int) (Session, error) {
	if err := ctx.Err(); err != nil {
		return Session{}, err
	}
	sh := s.shard(key)
	m, err := sh.lookup(key)
	if err != nil {
		sh.mu.Unlock()
		return Session{}, err
	}
	out := m.snapshot(key, recent)
	sh.mu.Unlock()
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
	sh := s.shard(key)
	defer sh.mu.Unlock()
	if m, ok := sh.sessions[appConv{key.App, key.Conversation}]; ok {
		if m.user != key.User {
			return Session{}, fmt.Errorf("%w: session %s", ErrOwnerMismatch, key)
		}
		return Session{}, fmt.Errorf("%w: session %s", ErrExists, key)
	}
	now := s.now().UTC()
	m := &memSession{user: key.User, state: bytes.Clone(state), turns: map[string][2]int{}, createdAt: now, updatedAt: now}
	sh.sessions[appConv{key.App, key.Conversation}] = m
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
	sh := s.shard(key)
	defer sh.mu.Unlock()
	m, err := sh.lookup(key)
	if err != nil {
		return Appended{}, err
	}
	if m.version != expectedVersion {
		return Appended{}, fmt.Errorf("%w: session %s is at version %d, not %d", ErrConflict, key, m.version, expectedVersion)
	}
	if r, ok := m.turns[t.RequestID]; ok {
		return Appended{Version: m.version, Events: shared(m.events, r[0], r[1]), Duplicate: true}, nil
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
	return Appended{Version: m.version, Events: shared(m.events, first, len(m.events))}, nil
}

// FindTurn implements Store.
func (s *MemoryStore) FindTurn(ctx context.Context, key Key, requestID string) ([]Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if requestID == "" {
		return nil, fmt.Errorf("%w: empty request id", ErrInvalid)
	}
	sh := s.shard(key)
	defer sh.mu.Unlock()
	m, err := sh.lookup(key)
	if err != nil {
		return nil, err
	}
	r, ok := m.turns[requestID]
	if !ok {
		return nil, fmt.Errorf("%w: no turn of request %s in session %s", ErrNotFound, requestID, key)
	}
	return shared(m.events, r[0], r[1]), nil
}

// Delete implements Store.
func (s *MemoryStore) Delete(ctx context.Context, key Key) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	sh := s.shard(key)
	defer sh.mu.Unlock()
	if _, err := sh.lookup(key); err != nil {
		return err
	}
	delete(sh.sessions, appConv{key.App, key.Conversation})
	return nil
}

// DeleteUser implements Retention.
func (s *MemoryStore) DeleteUser(ctx context.Context, app, user string) (int64, error) {
	n, err := s.DeleteUserCounted(ctx, app, user, false)
	return n.Sessions, err
}

var _ UserEraser = (*MemoryStore)(nil)

// DeleteUserCounted implements UserEraser.
func (s *MemoryStore) DeleteUserCounted(ctx context.Context, app, user string, dryRun bool) (UserCounts, error) {
	var n UserCounts
	if app == "" || user == "" {
		return n, fmt.Errorf("%w: DeleteUser needs an app and a user", ErrInvalid)
	}
	var err error
	n.Sessions, err = s.deleteWhere(ctx, dryRun, func(k appConv, m *memSession) bool {
		if k.app != app || m.user != user {
			return false
		}
		n.Events += int64(len(m.events))
		return true
	})
	return n, err
}

// DeleteIdle implements Retention.
func (s *MemoryStore) DeleteIdle(ctx context.Context, app string, before time.Time) (int64, error) {
	if app == "" {
		return 0, fmt.Errorf("%w: DeleteIdle needs an app", ErrInvalid)
	}
	return s.deleteWhere(ctx, false, func(k appConv, m *memSession) bool { return k.app == app && m.updatedAt.Before(before) })
}

// deleteWhere deletes the sessions match selects, one shard at a time, and returns how many
// it selected; a dry run only counts them.
func (s *MemoryStore) deleteWhere(ctx context.Context, dryRun bool, match func(appConv, *memSession) bool) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	var n int64
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, m := range sh.sessions {
			if match(k, m) {
				if !dryRun {
					delete(sh.sessions, k)
				}
				n++
			}
		}
		sh.mu.Unlock()
	}
	return n, nil
}
