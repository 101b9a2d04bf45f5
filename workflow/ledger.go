package workflow

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"
)

// Ledger is the durable record of what the bridge handed off: the high-water mark of each
// conversation's sequenced requests and the requests themselves, from which Reconcile re-sends
// a gap. Only requests with a Sequence are recorded; requests without one have no gap to find.
// Implementations must be safe for concurrent use.
type Ledger interface {
	// Record records envs as handed off. Recording a (conversation, sequence) again is a
	// no-op that keeps the first.
	Record(ctx context.Context, envs ...Envelope) error
	// HighWater returns the highest sequence recorded for the conversation, 0 when none.
	HighWater(ctx context.Context, conversationID string) (int64, error)
	// Range returns the recorded requests of the conversation with from <= sequence <= to,
	// ascending.
	Range(ctx context.Context, conversationID string, from, to int64) ([]Envelope, error)
	// Conversations returns the conversations whose latest hand-off was before t, the
	// candidates of a reconciliation sweep.
	Conversations(ctx context.Context, before time.Time) ([]string, error)
}

// MemoryLedger is a Ledger, a StateStore, an OverflowStore and a LedgerEraser in memory, for
// tests and single-process demos: it is not durable.
type MemoryLedger struct {
	// NowFunc returns the current time; default time.Now.
	NowFunc func() time.Time

	mu       sync.Mutex
	convs    map[string]*memoryConv
	states   map[string]State
	overflow map[string]map[int64]Envelope
}

// SaveState implements StateStore.
func (l *MemoryLedger) SaveState(_ context.Context, st State) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.states == nil {
		l.states = map[string]State{}
	}
	l.states[st.ConversationID] = st
	if nothingPending(st) {
		delete(l.overflow, st.ConversationID)
	}
	return nil
}

// LoadState implements StateStore.
func (l *MemoryLedger) LoadState(_ context.Context, conversationID string) (State, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st, ok := l.states[conversationID]
	return st, ok, nil
}

type memoryConv struct {
	bySeq map[int64]memoryRow
	high  int64
	last  time.Time
}

// memoryRow is one recorded hand-off and when it was recorded.
type memoryRow struct {
	env Envelope
	at  time.Time
}

// Record implements Ledger.
func (l *MemoryLedger) Record(_ context.Context, envs ...Envelope) error {
	now := time.Now()
	if l.NowFunc != nil {
		now = l.NowFunc()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.convs == nil {
		l.convs = map[string]*memoryConv{}
	}
	for _, env := range envs {
		seq := env.Request.Sequence
		if seq <= 0 {
			continue
		}
		c := l.convs[env.Request.ConversationID]
		if c == nil {
			c = &memoryConv{bySeq: map[int64]memoryRow{}}
			l.convs[env.Request.ConversationID] = c
		}
		if _, ok := c.bySeq[seq]; !ok {
			c.bySeq[seq] = memoryRow{env: env, at: now}
		}
		c.high, c.last = max(c.high, seq), now
	}
	return nil
}

// HighWater implements Ledger.
func (l *MemoryLedger) HighWater(_ context.Context, conversationID string) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c := l.convs[conversationID]; c != nil {
		return c.high, nil
	}
	return 0, nil
}

// Range implements Ledger.
func (l *MemoryLedger) Range(_ context.Context, conversationID string, from, to int64) ([]Envelope, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Envelope
	if c := l.convs[conversationID]; c != nil {
		for seq, r := range c.bySeq {
			if seq >= from && seq <= to {
				out = append(out, r.env)
			}
		}
	}
	slices.SortFunc(out, func(a, b Envelope) int { return cmp.Compare(a.Request.Sequence, b.Request.Sequence) })
	return out, nil
}

// Conversations implements Ledger.
func (l *MemoryLedger) Conversations(_ context.Context, before time.Time) ([]string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for id, c := range l.convs {
		if c.last.Before(before) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out, nil
}
