package inbox

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"time"
)

var _ Inbox = (*MemoryInbox)(nil)

// MemoryInbox is an Inbox in process memory, safe for concurrent use. Its entries die with the
// process, so it only dedups within one process: use it for tests and demos. The zero value is
// not usable; call NewMemoryInbox.
type MemoryInbox struct {
	mu      sync.Mutex
	entries map[string]*Entry
	now     func() time.Time
}

// NewMemoryInbox returns an empty MemoryInbox.
func NewMemoryInbox() *MemoryInbox {
	return &MemoryInbox{entries: make(map[string]*Entry), now: time.Now}
}

func (b *MemoryInbox) entry(ctx context.Context, requestID string) (*Entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if requestID == "" {
		return nil, fmt.Errorf("%w: empty request id", ErrInvalid)
	}
	e, ok := b.entries[requestID]
	if !ok {
		return nil, fmt.Errorf("%w: request %s", ErrNotFound, requestID)
	}
	return e, nil
}

func clone(e *Entry) Entry {
	out := *e
	out.Result = bytes.Clone(e.Result)
	return out
}

// Begin implements Inbox.
func (b *MemoryInbox) Begin(ctx context.Context, d Delivery) (Entry, error) {
	if err := ctx.Err(); err != nil {
		return Entry{}, err
	}
	if d.RequestID == "" {
		return Entry{}, fmt.Errorf("%w: empty request id", ErrInvalid)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now().UTC()
	e, seen := b.entries[d.RequestID]
	switch {
	case !seen:
		e = &Entry{RequestID: d.RequestID, Conversation: d.Conversation, Status: StatusInProgress, CreatedAt: now}
		b.entries[d.RequestID] = e
	case e.Status == StatusDone || e.Status == StatusDead:
		return clone(e), nil
	}
	e.Attempts++
	e.Topic, e.Partition, e.Offset = d.Topic, d.Partition, d.Offset
	e.UpdatedAt = now
	out := clone(e)
	if !seen {
		out.Status = StatusNew
	}
	return out, nil
}

// Complete implements Inbox.
func (b *MemoryInbox) Complete(ctx context.Context, requestID string, result []byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, err := b.entry(ctx, requestID)
	if err != nil {
		return err
	}
	switch e.Status {
	case StatusDone:
		return nil
	case StatusDead:
		return fmt.Errorf("%w: request %s: %s", ErrDead, requestID, e.Reason)
	}
	e.Status, e.Result, e.UpdatedAt = StatusDone, bytes.Clone(result), b.now().UTC()
	return nil
}

// Fail implements Inbox.
func (b *MemoryInbox) Fail(ctx context.Context, requestID string, f Failure) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, err := b.entry(ctx, requestID)
	if err != nil || e.Status == StatusDone || e.Status == StatusDead {
		return err
	}
	e.Reason, e.UpdatedAt = f.Reason, b.now().UTC()
	if f.Refund && e.Attempts > 0 {
		e.Attempts--
	}
	return nil
}

// MarkDead implements Inbox.
func (b *MemoryInbox) MarkDead(ctx context.Context, requestID, reason string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, err := b.entry(ctx, requestID)
	if err != nil || e.Status == StatusDone {
		return err
	}
	e.Status, e.Reason, e.UpdatedAt = StatusDead, reason, b.now().UTC()
	return nil
}

// Get implements Inbox.
func (b *MemoryInbox) Get(ctx context.Context, requestID string) (Entry, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, err := b.entry(ctx, requestID)
	if err != nil {
		return Entry{}, err
	}
	return clone(e), nil
}

// Purge implements Inbox.
func (b *MemoryInbox) Purge(ctx context.Context, before time.Time) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var n int64
	for id, e := range b.entries {
		if (e.Status == StatusDone || e.Status == StatusDead) && e.UpdatedAt.Before(before) {
			delete(b.entries, id)
			n++
		}
	}
	return n, nil
}
