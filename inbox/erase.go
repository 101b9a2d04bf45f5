package inbox

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Scope selects the inbox entries of one conversation of one owner for Eraser.Erase: those
// begun with Delivery.Conversation equal to Conversation whose key ends in KeySuffix.
// turn.Runner's keys end in a suffix made of the app, the user and the conversation
// (turn.Retention.DeleteUser builds the scopes), so that a conversation id that two apps
// sharing one inbox both use selects only one app's entries.
type Scope struct {
	// Conversation is the conversation id, as Delivery.Conversation gave it. Required.
	Conversation string
	// KeySuffix is what the selected keys end in; "" selects every key of the conversation.
	KeySuffix string
}

// MaxEraseScopes bounds the scopes of one Erase call.
const MaxEraseScopes = 10_000

// Eraser is an Inbox that deletes entries by conversation, whatever their status and age: the
// inbox's part of a data-deletion request (turn.Retention.DeleteUser). Purge deletes done and
// dead entries only after its horizon and never one in progress; Erase deletes them now.
// MemoryInbox and inbox/sqlinbox's Inbox implement it; inbox/inboxtest checks every Inbox
// that does.
type Eraser interface {
	Inbox
	// Erase deletes every entry that a scope selects, in progress, done or dead, with its
	// journal's steps, and every outbox intent whose Key a scope selects (by the intent's
	// Conversation and Key), pending ones too: they are never delivered. It returns how many
	// entries and intents it deleted. An entry begun while Erase runs may stay; a request of
	// an erased entry that Kafka delivers again runs again as new. Errors: ErrInvalid (an
	// empty Conversation, more than MaxEraseScopes scopes); on an infrastructure error the
	// count so far comes back with it, and Erase may be called again.
	Erase(ctx context.Context, scopes []Scope) (int64, error)
}

// EraseCounts counts, kind by kind, what an erasure deletes (or, in a dry run, would delete).
type EraseCounts struct {
	// Entries counts inbox entries, each with its stored result or failure reason.
	Entries int64 `json:"entries"`
	// Steps counts the journal steps of those entries: model and tool outputs.
	Steps int64 `json:"steps"`
	// Intents counts outbox intents, each with its payload, pending ones too.
	Intents int64 `json:"intents"`
}

// EraseCounter is an Eraser that counts what it erases kind by kind, and counts without
// erasing: turn.Retention.EraseUser needs it for its counts and its dry run. MemoryInbox and
// inbox/sqlinbox's Inbox implement it.
type EraseCounter interface {
	Eraser
	// EraseCounted is Erase that counts each kind; with dryRun it deletes nothing and returns
	// what Erase would delete at that moment (sqlinbox runs the same deletes in a transaction
	// it rolls back). Errors: Erase's.
	EraseCounted(ctx context.Context, scopes []Scope, dryRun bool) (EraseCounts, error)
}

// CheckScopes reports the ErrInvalid of Eraser.Erase for scopes, nil when Erase may take
// them: for Eraser implementations.
func CheckScopes(scopes []Scope) error {
	if len(scopes) > MaxEraseScopes {
		return fmt.Errorf("%w: %d scopes, over the limit of %d a call", ErrInvalid, len(scopes), MaxEraseScopes)
	}
	for i, s := range scopes {
		if s.Conversation == "" {
			return fmt.Errorf("%w: scope %d: empty conversation", ErrInvalid, i)
		}
	}
	return nil
}

// ScopeSet is a set of scopes as an Eraser matches them: the key suffixes of each
// conversation. NewScopeSet makes one.
type ScopeSet map[string][]string

// NewScopeSet returns the set of scopes.
func NewScopeSet(scopes []Scope) ScopeSet {
	m := make(ScopeSet, len(scopes))
	for _, s := range scopes {
		m[s.Conversation] = append(m[s.Conversation], s.KeySuffix)
	}
	return m
}

// Selects reports whether a scope of s selects the entry or intent of key in conversation.
func (s ScopeSet) Selects(conversation, key string) bool {
	for _, suffix := range s[conversation] {
		if strings.HasSuffix(key, suffix) {
			return true
		}
	}
	return false
}

// Conversations returns the conversations of s, sorted.
func (s ScopeSet) Conversations() []string {
	return slices.Sorted(maps.Keys(s))
}

var _ EraseCounter = (*MemoryInbox)(nil)

// Erase implements Eraser, one shard at a time and then the outbox.
func (b *MemoryInbox) Erase(ctx context.Context, scopes []Scope) (int64, error) {
	n, err := b.EraseCounted(ctx, scopes, false)
	return n.Entries + n.Intents, err
}

// EraseCounted implements EraseCounter.
func (b *MemoryInbox) EraseCounted(ctx context.Context, scopes []Scope, dryRun bool) (EraseCounts, error) {
	var n EraseCounts
	if err := ctx.Err(); err != nil {
		return n, err
	}
	if err := CheckScopes(scopes); err != nil {
		return n, err
	}
	set := NewScopeSet(scopes)
	for i := range b.shards {
		sh := &b.shards[i]
		sh.mu.Lock()
		for key, e := range sh.entries {
			if set.Selects(e.Conversation, key) {
				n.Entries++
				n.Steps += int64(len(sh.steps[key]))
				if !dryRun {
					delete(sh.entries, key)
					delete(sh.steps, key)
				}
			}
		}
		sh.mu.Unlock()
	}
	o := &b.outbox
	o.mu.Lock()
	defer o.mu.Unlock()
	for id, it := range o.intents {
		if set.Selects(it.Conversation, it.Key) {
			n.Intents++
			if !dryRun {
				delete(o.intents, id)
			}
		}
	}
	return n, nil
}
