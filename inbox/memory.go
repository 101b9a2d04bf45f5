package inbox

import (
	"bytes"
	"context"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"
	"time"
)

var _ Outbox = (*MemoryInbox)(nil)

// MemoryInbox is an Inbox in process memory, safe for concurrent use. Its entries die with the
// process, so it only dedups within one process: use it for tests and demos. The zero value is
// not usable; call NewMemoryInbox.
//
// Entries are spread over shards by a hash of the key (hash/maphash), each with its own
// lock, so that concurrent turns of different requests do not queue on one mutex. The step
// journal of a key lives in its shard; the outbox's intents, which the relay claims across
// keys, live in a structure of their own with one lock (memoryOutbox).
//
// MemoryInbox implements Outbox (and so Journal): the journal and the intents die with the
// process too.
type MemoryInbox struct {
	shards [memShards]inboxShard
	seed   maphash.Seed
	now    func() time.Time
	outbox memoryOutbox
}

// memShards is the number of independently locked parts of a MemoryInbox.
const memShards = 64

type inboxShard struct {
	mu      sync.Mutex
	entries map[string]*Entry
	// steps holds each key's journal, by ordinal ascending; a key without steps has none.
	steps map[string][]Step
}

// NewMemoryInbox returns an empty MemoryInbox.
func NewMemoryInbox() *MemoryInbox {
	b := &MemoryInbox{seed: maphash.MakeSeed(), now: time.Now}
	for i := range b.shards {
		b.shards[i].entries = make(map[string]*Entry)
		b.shards[i].steps = make(map[string][]Step)
	}
	b.outbox.intents = make(map[string]*Intent)
	return b
}

// shard returns the locked part that holds key, locked; unlock it when done.
func (b *MemoryInbox) shard(key string) *inboxShard {
	sh := &b.shards[maphash.String(b.seed, key)%memShards]
	sh.mu.Lock()
	return sh
}

func (sh *inboxShard) entry(ctx context.Context, key string) (*Entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if key == "" {
		return nil, fmt.Errorf("%w: empty key", ErrInvalid)
	}
	e, ok := sh.entries[key]
	if !ok {
		return nil, fmt.Errorf("%w: key %s", ErrNotFound, key)
	}
	return e, nil
}

func clone(e *Entry) Entry {
	out := *e
	out.Result = bytes.Clone(e.Result)
	out.Redrives = slices.Clone(e.Redrives)
	return out
}

// Begin implements Inbox.
func (b *MemoryInbox) Begin(ctx context.Context, d Delivery) (Entry, error) {
	if err := ctx.Err(); err != nil {
		return Entry{}, err
	}
	if d.Key == "" {
		return Entry{}, fmt.Errorf("%w: empty key", ErrInvalid)
	}
	now := b.now().UTC()
	sh := b.shard(d.Key)
	defer sh.mu.Unlock()
	e, seen := sh.entries[d.Key]
	switch {
	case !seen:
		e = &Entry{Key: d.Key, Conversation: d.Conversation, Status: StatusInProgress, CreatedAt: now}
		sh.entries[d.Key] = e
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
func (b *MemoryInbox) Complete(ctx context.Context, key string, result []byte) error {
	sh := b.shard(key)
	defer sh.mu.Unlock()
	e, err := sh.entry(ctx, key)
	if err != nil {
		return err
	}
	switch e.Status {
	case StatusDone:
		return nil
	case StatusDead:
		return fmt.Errorf("%w: key %s: %s", ErrDead, key, e.Reason)
	}
	e.Status, e.Result, e.UpdatedAt = StatusDone, bytes.Clone(result), b.now().UTC()
	return nil
}

// Fail implements Inbox.
func (b *MemoryInbox) Fail(ctx context.Context, key string, f Failure) error {
	sh := b.shard(key)
	defer sh.mu.Unlock()
	e, err := sh.entry(ctx, key)
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
func (b *MemoryInbox) MarkDead(ctx context.Context, key, reason string) error {
	sh := b.shard(key)
	defer sh.mu.Unlock()
	e, err := sh.entry(ctx, key)
	if err != nil || e.Status == StatusDone {
		return err
	}
	e.Status, e.Reason, e.UpdatedAt = StatusDead, reason, b.now().UTC()
	return nil
}

// Redrive implements Inbox.
func (b *MemoryInbox) Redrive(ctx context.Context, key, note string) (Entry, error) {
	sh := b.shard(key)
	defer sh.mu.Unlock()
	e, err := sh.entry(ctx, key)
	if err != nil {
		return Entry{}, err
	}
	if e.Status != StatusDead {
		return clone(e), fmt.Errorf("%w: key %s is %s", ErrNotDead, key, e.Status)
	}
	now := b.now().UTC()
	e.Redrives = append(e.Redrives, RedriveAudit{Reason: e.Reason, Attempts: e.Attempts, Note: note, At: now})
	e.Status, e.Attempts, e.Reason, e.UpdatedAt = StatusInProgress, 0, "", now
	delete(sh.steps, key) // a re-driven request runs its steps afresh
	return clone(e), nil
}

// Get implements Inbox.
func (b *MemoryInbox) Get(ctx context.Context, key string) (Entry, error) {
	sh := b.shard(key)
	defer sh.mu.Unlock()
	e, err := sh.entry(ctx, key)
	if err != nil {
		return Entry{}, err
	}
	return clone(e), nil
}

// Purge implements Inbox: it deletes done and dead entries last updated before the cutoff
// with their journals, and delivered and dead intents last updated before it (pending
// intents stay whatever their age). The count is of entries and intents.
func (b *MemoryInbox) Purge(ctx context.Context, before time.Time) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	var n int64
	for i := range b.shards {
		sh := &b.shards[i]
		sh.mu.Lock()
		for id, e := range sh.entries {
			if (e.Status == StatusDone || e.Status == StatusDead) && e.UpdatedAt.Before(before) {
				delete(sh.entries, id)
				delete(sh.steps, id)
				n++
			}
		}
		sh.mu.Unlock()
	}
	return n + b.outbox.purge(before), nil
}
