package attachment

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"
)

// MemoryStore is a Store in process memory, safe for concurrent use. It is for tests and
// single-process demos: its attachments die with the process, so it does not give G4 across
// workers. The zero value is not usable; call NewMemoryStore.
type MemoryStore struct {
	// MaxSize bounds the bytes of one attachment; 0 means DefaultMaxSize. Set it before the
	// first Put.
	MaxSize int64

	mu      sync.Mutex
	entries map[Owner]map[string]*memEntry
	now     func() time.Time
}

var _ Retention = (*MemoryStore)(nil)

type memEntry struct {
	ref   Ref
	data  []byte // never written after the entry is stored
	putAt time.Time
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{entries: map[Owner]map[string]*memEntry{}, now: time.Now}
}

// Put implements Store.
func (s *MemoryStore) Put(ctx context.Context, owner Owner, name, mediaType string, r io.Reader) (Ref, error) {
	if err := CheckPut(ctx, owner, name, mediaType); err != nil {
		return Ref{}, err
	}
	var data []byte
	id, size, err := ReadChunks(ctx, r, 0, s.MaxSize, func(chunk []byte) error {
		data = append(data, chunk...)
		return nil
	})
	if err != nil {
		return Ref{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	byID := s.entries[owner]
	if byID == nil {
		byID = map[string]*memEntry{}
		s.entries[owner] = byID
	}
	e, ok := byID[id]
	if !ok {
		e = &memEntry{ref: Ref{ID: id, Size: size, Name: name, MediaType: mediaType}, data: data}
		byID[id] = e
	}
	e.putAt = s.now()
	return e.ref, nil
}

// lookup returns owner's entry of id.
func (s *MemoryStore) lookup(ctx context.Context, owner Owner, id string) (*memEntry, error) {
	if _, err := CheckCall(ctx, owner, id); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[owner][id]
	if !ok {
		return nil, fmt.Errorf("%w: attachment %s of %s", ErrNotFound, id, owner)
	}
	return e, nil
}

// Stat implements Store.
func (s *MemoryStore) Stat(ctx context.Context, owner Owner, id string) (Ref, error) {
	e, err := s.lookup(ctx, owner, id)
	if err != nil {
		return Ref{}, err
	}
	return e.ref, nil
}

// Read implements Store.
func (s *MemoryStore) Read(ctx context.Context, owner Owner, id string, offset, length int64) ([]byte, error) {
	e, err := s.lookup(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	end, err := CheckRange(e.ref.Size, offset, length)
	if err != nil {
		return nil, fmt.Errorf("attachment %s: %w", id, err)
	}
	return append([]byte{}, e.data[offset:end]...), nil
}

// Delete implements Store.
func (s *MemoryStore) Delete(ctx context.Context, owner Owner, id string) error {
	if _, err := s.lookup(ctx, owner, id); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.entries[owner], id)
	return nil
}

// DeleteUser implements Retention.
func (s *MemoryStore) DeleteUser(ctx context.Context, app, user string) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if app == "" || user == "" {
		return 0, fmt.Errorf("%w: DeleteUser needs an app and a user", ErrInvalid)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	owner := Owner{App: app, User: user}
	n := int64(len(s.entries[owner]))
	delete(s.entries, owner)
	return n, nil
}

var _ UserCounter = (*MemoryStore)(nil)

// CountUser implements UserCounter.
func (s *MemoryStore) CountUser(ctx context.Context, app, user string) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if app == "" || user == "" {
		return 0, fmt.Errorf("%w: CountUser needs an app and a user", ErrInvalid)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return int64(len(s.entries[Owner{App: app, User: user}])), nil
}

// DeleteIdle implements Retention.
func (s *MemoryStore) DeleteIdle(ctx context.Context, app string, before time.Time) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if app == "" {
		return 0, fmt.Errorf("%w: DeleteIdle needs an app", ErrInvalid)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for owner, byID := range s.entries {
		if owner.App != app {
			continue
		}
		for id, e := range byID {
			if e.putAt.Before(before) {
				delete(byID, id)
				n++
			}
		}
	}
	return n, nil
}
