package inbox

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// memoryOutbox holds a MemoryInbox's intents under one lock of its own: the relay claims
// across keys, so intents are not kept in the key shards. A shard's lock may be held while
// this one is taken (Promote), never the other way round.
type memoryOutbox struct {
	mu      sync.Mutex
	intents map[string]*Intent
}

// CheckStep reports the ErrInvalid of Journal.RecordStep for key and s (an empty key or name,
// an ordinal below 1), nil when RecordStep may store them: for Journal implementations.
func CheckStep(key string, s Step) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty key", ErrInvalid)
	case s.Name == "":
		return fmt.Errorf("%w: step %d: empty name", ErrInvalid, s.Ordinal)
	case s.Ordinal < 1:
		return fmt.Errorf("%w: step %q: ordinal %d is below 1", ErrInvalid, s.Name, s.Ordinal)
	}
	return nil
}

func cloneStep(s Step) Step {
	s.Output = bytes.Clone(s.Output)
	return s
}

func cloneIntent(it *Intent) Intent {
	out := *it
	out.Payload = bytes.Clone(it.Payload)
	return out
}

// Steps implements Journal.
func (b *MemoryInbox) Steps(ctx context.Context, key string) ([]Step, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if key == "" {
		return nil, fmt.Errorf("%w: empty key", ErrInvalid)
	}
	sh := b.shard(key)
	defer sh.mu.Unlock()
	out := make([]Step, 0, len(sh.steps[key]))
	for _, s := range sh.steps[key] {
		out = append(out, cloneStep(s))
	}
	return out, nil
}

// RecordStep implements Journal. Two steps of one ordinal are the same step when their Name
// and Deferred agree; otherwise the stored one comes back with ErrStepMismatch.
func (b *MemoryInbox) RecordStep(ctx context.Context, key string, s Step) (Step, error) {
	if err := CheckStep(key, s); err != nil {
		return Step{}, err
	}
	sh := b.shard(key)
	defer sh.mu.Unlock()
	if _, err := sh.entry(ctx, key); err != nil {
		return Step{}, err
	}
	steps := sh.steps[key]
	i, found := slices.BinarySearchFunc(steps, s.Ordinal, func(x Step, ord int) int { return cmp.Compare(x.Ordinal, ord) })
	if found {
		got := cloneStep(steps[i])
		if got.Name != s.Name || got.Deferred != s.Deferred {
			return got, fmt.Errorf("%w: key %s step %d is %q (deferred %t), not %q (deferred %t)",
				ErrStepMismatch, key, s.Ordinal, got.Name, got.Deferred, s.Name, s.Deferred)
		}
		return got, nil
	}
	s = cloneStep(s)
	s.At = b.now().UTC()
	sh.steps[key] = slices.Insert(steps, i, s)
	return cloneStep(s), nil
}

// Promote implements Outbox: a key without an entry or without deferred steps promotes none.
func (b *MemoryInbox) Promote(ctx context.Context, key string, through int) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if key == "" {
		return 0, fmt.Errorf("%w: empty key", ErrInvalid)
	}
	sh := b.shard(key)
	defer sh.mu.Unlock()
	e, ok := sh.entries[key]
	if !ok {
		return 0, nil
	}
	now := b.now().UTC()
	o := &b.outbox
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, s := range sh.steps[key] {
		id := IntentID(key, s.Ordinal)
		if !s.Deferred || o.intents[id] != nil || (through >= 1 && s.Ordinal > through) {
			continue
		}
		o.intents[id] = &Intent{ID: id, Key: key, Conversation: e.Conversation, Ordinal: s.Ordinal, Name: s.Name,
			Payload: bytes.Clone(s.Output), Status: IntentPending, NextAt: now, CreatedAt: now, UpdatedAt: now}
		n++
	}
	return n, nil
}

// Claim implements Outbox.
func (b *MemoryInbox) Claim(ctx context.Context, n int, lease time.Duration) ([]Intent, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if n < 1 || lease <= 0 {
		return nil, fmt.Errorf("%w: claim %d intents for %s (want n >= 1, lease > 0)", ErrInvalid, n, lease)
	}
	now := b.now().UTC()
	o := &b.outbox
	o.mu.Lock()
	defer o.mu.Unlock()
	var due []*Intent
	for _, it := range o.intents {
		if it.Status == IntentPending && !it.NextAt.After(now) {
			due = append(due, it)
		}
	}
	slices.SortFunc(due, func(x, y *Intent) int { return cmp.Or(x.NextAt.Compare(y.NextAt), cmp.Compare(x.ID, y.ID)) })
	out := make([]Intent, 0, min(n, len(due)))
	for _, it := range due[:min(n, len(due))] {
		it.Attempts++
		it.NextAt, it.UpdatedAt = now.Add(lease), now
		out = append(out, cloneIntent(it))
	}
	return out, nil
}

// settle applies change to the pending intent id, fenced on attempt (0: unfenced); delivered
// and dead intents stay as they are.
func (b *MemoryInbox) settle(ctx context.Context, id string, attempt int, change func(it *Intent, now time.Time)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if id == "" {
		return fmt.Errorf("%w: empty intent id", ErrInvalid)
	}
	if attempt < 0 {
		return fmt.Errorf("%w: intent %s: attempt %d is negative", ErrInvalid, id, attempt)
	}
	now := b.now().UTC()
	o := &b.outbox
	o.mu.Lock()
	defer o.mu.Unlock()
	it, ok := o.intents[id]
	if !ok {
		return fmt.Errorf("%w: intent %s", ErrNotFound, id)
	}
	if attempt != 0 && it.Attempts != attempt {
		return fmt.Errorf("%w: intent %s: attempt %d, now at attempt %d", ErrLeaseLost, id, attempt, it.Attempts)
	}
	if it.Status == IntentPending {
		change(it, now)
		it.UpdatedAt = now
	}
	return nil
}

// Delivered implements Outbox; only a pending intent changes.
func (b *MemoryInbox) Delivered(ctx context.Context, id string, attempt int) error {
	return b.settle(ctx, id, attempt, func(it *Intent, now time.Time) { it.Status, it.NextAt = IntentDelivered, now })
}

// Retry implements Outbox; only a pending intent changes (a dead one stays dead).
func (b *MemoryInbox) Retry(ctx context.Context, id string, attempt int, reason string, at time.Time) error {
	return b.settle(ctx, id, attempt, func(it *Intent, _ time.Time) { it.Reason, it.NextAt = reason, at.UTC() })
}

// Bury implements Outbox; only a pending intent changes.
func (b *MemoryInbox) Bury(ctx context.Context, id string, attempt int, reason string) error {
	return b.settle(ctx, id, attempt, func(it *Intent, _ time.Time) { it.Status, it.Reason = IntentDead, reason })
}

// Intents implements Outbox: oldest CreatedAt first, then by id.
func (b *MemoryInbox) Intents(ctx context.Context, f IntentFilter) ([]Intent, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := CheckIntentFilter(f); err != nil {
		return nil, err
	}
	o := &b.outbox
	o.mu.Lock()
	var out []Intent
	for _, it := range o.intents {
		if (f.Status == 0 || it.Status == f.Status) && (f.Conversation == "" || it.Conversation == f.Conversation) {
			out = append(out, cloneIntent(it))
		}
	}
	o.mu.Unlock()
	slices.SortFunc(out, func(x, y Intent) int { return cmp.Or(x.CreatedAt.Compare(y.CreatedAt), cmp.Compare(x.ID, y.ID)) })
	return out[:min(len(out), FilterLimit(f))], nil
}

// CheckIntentFilter reports the ErrInvalid of Outbox.Intents for f (an unknown status, a
// negative limit), nil for a valid filter: for Outbox implementations.
func CheckIntentFilter(f IntentFilter) error {
	if f.Status != 0 && (f.Status < IntentPending || f.Status > IntentDead) {
		return fmt.Errorf("%w: intent filter: status %d", ErrInvalid, int(f.Status))
	}
	if f.Limit < 0 {
		return fmt.Errorf("%w: intent filter: limit %d is negative", ErrInvalid, f.Limit)
	}
	return nil
}

// FilterLimit returns how many intents f lets Outbox.Intents return: f.Limit, or 100 when it
// is 0.
func FilterLimit(f IntentFilter) int {
	if f.Limit == 0 {
		return 100
	}
	return f.Limit
}

// RedriveIntent implements Outbox.
func (b *MemoryInbox) RedriveIntent(ctx context.Context, id, note string) (Intent, error) {
	if err := ctx.Err(); err != nil {
		return Intent{}, err
	}
	if id == "" {
		return Intent{}, fmt.Errorf("%w: empty intent id", ErrInvalid)
	}
	now := b.now().UTC()
	o := &b.outbox
	o.mu.Lock()
	defer o.mu.Unlock()
	it, ok := o.intents[id]
	if !ok {
		return Intent{}, fmt.Errorf("%w: intent %s", ErrNotFound, id)
	}
	if it.Status != IntentDead {
		return cloneIntent(it), fmt.Errorf("%w: intent %s is %s", ErrIntentNotDead, id, it.Status)
	}
	it.Status, it.Attempts, it.Reason, it.NextAt, it.UpdatedAt = IntentPending, 0, note, now, now
	return cloneIntent(it), nil
}

// purge deletes the delivered and dead intents last updated before the cutoff and returns
// how many.
func (o *memoryOutbox) purge(before time.Time) int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	var n int64
	for id, it := range o.intents {
		if it.Status != IntentPending && it.UpdatedAt.Before(before) {
			delete(o.intents, id)
			n++
		}
	}
	return n
}
