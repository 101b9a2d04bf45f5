package workflow

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	twf "go.temporal.io/sdk/workflow"

	"github.com/turnstile-go/turnstile/internal/sqldialect"
)

// Activity names of the OverflowStore, registered when WorkerOptions.States is one.
const (
	// SaveOverflowActivityName stores pending requests a run does not carry in its
	// continue-as-new input.
	SaveOverflowActivityName = "turnstile.SaveOverflow"
	// LoadOverflowActivityName loads them back, oldest first.
	LoadOverflowActivityName = "turnstile.LoadOverflow"
)

// versionBoundedCarry: a run whose pending requests would pass Config.MaxCarriedBytes moves
// the excess to the OverflowStore at continue-as-new (issue 24).
const versionBoundedCarry = "turnstile-bounded-carry"

// versionCarryReferences: with an OverflowStore, a run that continues as new stores every
// pending request there and carries only their positions (issue 35), so that the
// continue-as-new input holds ids and counters, never a request's text, whatever the backlog;
// its SaveOverflow inputs are at most carryChunkBytes.
const versionCarryReferences = "turnstile-carry-references"

// overflowChunkBytes bounds the envelopes of one SaveOverflow activity's input before
// versionCarryReferences, well under the server's 2 MB payload limit (one envelope larger than
// it goes alone: the bridge keeps each under DefaultMaxPayloadBytes).
const overflowChunkBytes = 1 << 20

// carryChunkBytes bounds them from versionCarryReferences on: half of DefaultMaxCarriedBytes,
// so that no payload of a run's history that the carry writes comes near 256 KiB (an envelope
// larger than it still goes alone).
const carryChunkBytes = 128 << 10

// ErrOverflowMissing is returned by OverflowStore.LoadOverflow when the position asked for is
// not stored (its rows were deleted by hand): the workflow then gives those requests up, logs
// an error and goes on; sequenced ones can be re-sent from the Ledger by Reconcile.
var ErrOverflowMissing = errors.New("workflow: overflow: the requests asked for are not stored")

// OverflowStore keeps the pending requests of a conversation that a run does not carry in its
// continue-as-new input: all of them, so that the input holds ids and counters, never a
// request's text (versionCarryReferences), or, in runs recorded before, those past
// Config.MaxCarriedBytes (the server refuses a payload over 2 MB, limit.blobSize.error, and so
// a continue-as-new whose input is larger). The requests wait there under consecutive positions of the
// conversation's queue, and the next run loads them back, oldest first, when the requests it
// holds in memory have nothing to apply. SQLLedger and MemoryLedger implement it; the workers
// use WorkerOptions.States when it is one. Without one, the whole backlog travels in the
// input, as it did before. Both forget a conversation's overflow when they save a State with
// nothing pending (SaveState, as a run ends idle: every row left is one a run loaded), so
// that the texts of loaded requests do not stay behind.
type OverflowStore interface {
	// SaveOverflow stores envs at positions from, from+1, ... of the conversation's queue,
	// replacing what is there (a retried activity stores the same again).
	SaveOverflow(ctx context.Context, conversationID string, from int64, envs []Envelope) error
	// LoadOverflow returns the envelopes at positions from to from+limit-1, ascending, and
	// stops before the one that would bring their encoded size (JSON, plus one byte each) over
	// maxBytes, the first one returned whatever its size; it forgets the positions below from (loaded by an earlier run, whose history holds them now). A missing
	// position from is ErrOverflowMissing.
	LoadOverflow(ctx context.Context, conversationID string, from int64, limit, maxBytes int) ([]Envelope, error)
}

// OverflowSave is the input of the SaveOverflowActivityName activity.
type OverflowSave struct {
	ConversationID string     `json:"conversation_id"`
	From           int64      `json:"from"`
	Envelopes      []Envelope `json:"envelopes"`
}

// OverflowLoad is the input of the LoadOverflowActivityName activity.
type OverflowLoad struct {
	ConversationID string `json:"conversation_id"`
	From           int64  `json:"from"`
	Limit          int    `json:"limit"`
	MaxBytes       int    `json:"max_bytes"`
}

// visible is how many of Pending the gate may look at: all of them, or while requests wait in
// the OverflowStore only those that arrived before them (Pending[:Older]), so that the requests
// keep their arrival order.
func (c *conversation) visible() int {
	if c.Overflow > 0 {
		return min(c.Older, len(c.Pending))
	}
	return len(c.Pending)
}

// removed notes that Pending[i] left the queue.
func (c *conversation) removed(i int) {
	if c.Overflow > 0 && i < c.Older {
		c.Older--
	}
}

// loadOverflow loads the oldest part of the overflow (at most half of MaxCarriedBytes) into
// Pending after the requests older than it. Requests already applied (a duplicate that came
// by another signal) are left out. A load the store cannot answer gives the requests up, with
// an error logged, so that the conversation goes on (G5).
func (c *conversation) loadOverflow(ctx twf.Context) error {
	in := OverflowLoad{ConversationID: c.ConversationID, From: c.OverflowFrom, Limit: int(min(c.Overflow, 10_000)), MaxBytes: c.cfg.MaxCarriedBytes / 2}
	var got []Envelope
	err := twf.ExecuteActivity(twf.WithActivityOptions(ctx, stateActivityOptions), LoadOverflowActivityName, in).Get(ctx, &got)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil || len(got) == 0 {
		twf.GetLogger(ctx).Error("overflow of pending requests lost; the conversation goes on without them", "conversation_id", c.ConversationID,
			"from", c.OverflowFrom, "requests", c.Overflow, "err", err)
		c.Overflow, c.Older = 0, 0
		return nil
	}
	at := min(c.Older, len(c.Pending))
	var keep []Envelope
	if twf.GetVersion(ctx, versionCarryReferences, twf.DefaultVersion, 1) >= 1 {
		keep = c.dedupLoaded(got, c.Pending[:at])
	} else {
		keep = slices.DeleteFunc(slices.Clone(got), func(e Envelope) bool { return c.recentSet[e.Request.ID] })
	}
	c.Pending = append(c.Pending[:at:at], c.dedupNewer(keep, c.Pending[at:])...)
	c.Pending = slices.Insert(c.Pending, at, keep...)
	c.Older = at + len(keep)
	c.OverflowFrom += int64(len(got))
	c.Overflow -= int64(len(got))
	if c.Overflow <= 0 {
		c.Overflow, c.Older = 0, 0
	}
	return nil
}

// dedupLoaded returns loaded (requests back from the OverflowStore) without those that must not
// queue again, as accept would have dropped them had they not waited in the store: a request
// applied within the dedup window (recentlyApplied), and a copy of a request queued before it
// (the same id, user and conversation: in older, the pending requests that arrived before the
// loaded ones, or earlier in loaded), whose dead-letter mark the queued one takes, as
// markDeadLettered does. Since every pending request crosses continue-as-new through the store
// (versionCarryReferences), a redelivery and its original can come back in one load.
func (c *conversation) dedupLoaded(loaded, older []Envelope) []Envelope {
	type key struct{ id, user, conv string }
	keyOf := func(e Envelope) key { return key{e.Request.ID, e.Request.UserID, e.Request.ConversationID} }
	queued := make(map[key]*Envelope, len(older)+len(loaded))
	for i := range older {
		if k := keyOf(older[i]); queued[k] == nil {
			queued[k] = &older[i]
		}
	}
	out := make([]Envelope, 0, len(loaded))
	for _, e := range loaded {
		if c.recentlyApplied(e) {
			continue
		}
		if first := queued[keyOf(e)]; first != nil {
			if e.DeadLettered != "" && first.DeadLettered == "" {
				first.DeadLettered = e.DeadLettered
			}
			continue
		}
		out = append(out, e)
		queued[keyOf(e)] = &out[len(out)-1]
	}
	return out
}

// dedupNewer returns newer (the requests that arrived after the loaded ones) without the
// copies of a loaded request (the same id, user and conversation: a redelivery, which
// accept could not see while the first copy waited in the store), as accept drops a copy of
// a pending request; a copy the consumer dead-lettered marks the loaded one, as
// markDeadLettered does.
func (c *conversation) dedupNewer(loaded, newer []Envelope) []Envelope {
	type key struct{ id, user, conv string }
	index := make(map[key]int, len(loaded))
	for i, e := range loaded {
		index[key{e.Request.ID, e.Request.UserID, e.Request.ConversationID}] = i
	}
	return slices.DeleteFunc(slices.Clone(newer), func(e Envelope) bool {
		i, ok := index[key{e.Request.ID, e.Request.UserID, e.Request.ConversationID}]
		if ok && e.DeadLettered != "" && loaded[i].DeadLettered == "" {
			loaded[i].DeadLettered = e.DeadLettered
		}
		return ok
	})
}

// nothingPending reports whether st holds no pending request, in its input or in an
// OverflowStore: a run that ends idle saves such a State.
func nothingPending(st State) bool { return len(st.Pending) == 0 && st.Overflow == 0 }

// envelopeSize is the encoded size of env in the continue-as-new input.
func envelopeSize(env Envelope) int {
	b, err := json.Marshal(env)
	if err != nil {
		return 0
	}
	return len(b) + 1
}

// carry bounds what the run hands the next one. With an OverflowStore, it stores every pending
// request there, in order (versionCarryReferences): those older than the ones already stored
// (Pending[:Older]) in front of them, every newer one behind them; the continue-as-new input
// then carries their positions only. Histories recorded before that change keep the oldest
// pending requests within Config.MaxCarriedBytes and store only the rest (versionBoundedCarry).
// Without an OverflowStore the pending requests travel whole, with a warning past the bound.
func (a *worker) carry(ctx twf.Context, c *conversation) error {
	if len(c.Pending) == 0 {
		return nil
	}
	sizes := make([]int, len(c.Pending))
	total := 0
	for i, p := range c.Pending {
		sizes[i] = envelopeSize(p)
		total += sizes[i]
	}
	if a.overflow == nil {
		if total > c.cfg.MaxCarriedBytes {
			twf.GetLogger(ctx).Warn("continue-as-new input over Config.MaxCarriedBytes: give the workers an OverflowStore (WorkerOptions.States)",
				"conversation_id", c.ConversationID, "pending", len(c.Pending), "bytes", total, "bound", c.cfg.MaxCarriedBytes)
		}
		return nil
	}
	bound, chunk := c.cfg.MaxCarriedBytes, overflowChunkBytes
	if twf.GetVersion(ctx, versionCarryReferences, twf.DefaultVersion, 1) >= 1 {
		bound, chunk = 0, carryChunkBytes
	} else if total <= bound || twf.GetVersion(ctx, versionBoundedCarry, twf.DefaultVersion, 1) == twf.DefaultVersion {
		return nil
	}
	older := c.visible()
	keep, kept := 0, 0
	for keep < older && kept+sizes[keep] <= bound {
		kept += sizes[keep]
		keep++
	}
	front, back := c.Pending[keep:older], c.Pending[older:]
	if err := c.saveOverflow(ctx, c.OverflowFrom-int64(len(front)), front, sizes[keep:older], chunk); err != nil {
		return err
	}
	if err := c.saveOverflow(ctx, c.OverflowFrom+c.Overflow, back, sizes[older:], chunk); err != nil {
		return err
	}
	twf.GetLogger(ctx).Info("pending requests stored for the next runs", "conversation_id", c.ConversationID,
		"carried", keep, "carried_bytes", kept, "stored", len(front)+len(back), "stored_bytes", total-kept, "bound", bound)
	c.OverflowFrom -= int64(len(front))
	c.Overflow += int64(len(front) + len(back))
	c.Pending = slices.Clone(c.Pending[:keep])
	c.Older = keep
	return nil
}

// saveOverflow stores envs (of the sizes given) at positions from on, in activities whose
// inputs stay under chunk bytes (an envelope larger than chunk goes alone).
func (c *conversation) saveOverflow(ctx twf.Context, from int64, envs []Envelope, sizes []int, chunk int) error {
	actx := twf.WithActivityOptions(ctx, stateActivityOptions)
	for start := 0; start < len(envs); {
		end, bytes := start, 0
		for end < len(envs) && (end == start || bytes+sizes[end] <= chunk) {
			bytes += sizes[end]
			end++
		}
		in := OverflowSave{ConversationID: c.ConversationID, From: from + int64(start), Envelopes: envs[start:end]}
		if err := twf.ExecuteActivity(actx, SaveOverflowActivityName, in).Get(ctx, nil); err != nil {
			return err
		}
		start = end
	}
	return nil
}

// SaveOverflow is the SaveOverflowActivityName activity.
func (a *worker) SaveOverflow(ctx context.Context, in OverflowSave) error {
	return a.overflow.SaveOverflow(ctx, in.ConversationID, in.From, in.Envelopes)
}

// LoadOverflow is the LoadOverflowActivityName activity; a missing position is a
// non-retryable error.
func (a *worker) LoadOverflow(ctx context.Context, in OverflowLoad) ([]Envelope, error) {
	envs, err := a.overflow.LoadOverflow(ctx, in.ConversationID, in.From, in.Limit, in.MaxBytes)
	if errors.Is(err, ErrOverflowMissing) {
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), errTypePermanent, err)
	}
	return envs, err
}

// SaveOverflow implements OverflowStore.
func (l *MemoryLedger) SaveOverflow(_ context.Context, conversationID string, from int64, envs []Envelope) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.overflow == nil {
		l.overflow = map[string]map[int64]Envelope{}
	}
	q := l.overflow[conversationID]
	if q == nil {
		q = map[int64]Envelope{}
		l.overflow[conversationID] = q
	}
	for i, env := range envs {
		q[from+int64(i)] = env
	}
	return nil
}

// LoadOverflow implements OverflowStore.
func (l *MemoryLedger) LoadOverflow(_ context.Context, conversationID string, from int64, limit, maxBytes int) ([]Envelope, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	q := l.overflow[conversationID]
	for pos := range q {
		if pos < from {
			delete(q, pos)
		}
	}
	var out []Envelope
	bytes := 0
	for pos := from; len(out) < limit; pos++ {
		env, ok := q[pos]
		if !ok {
			break
		}
		size := envelopeSize(env)
		if len(out) > 0 && bytes+size > maxBytes {
			break
		}
		out = append(out, env)
		bytes += size
	}
	if len(out) == 0 && limit > 0 {
		return nil, fmt.Errorf("%w: conversation %s, position %d", ErrOverflowMissing, conversationID, from)
	}
	return out, nil
}

// SaveOverflow implements OverflowStore.
func (l *SQLLedger) SaveOverflow(ctx context.Context, conversationID string, from int64, envs []Envelope) error {
	q := l.d.Query(`INSERT INTO {p}overflow (conversation_id, position, user_id, envelope, saved_at) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (conversation_id, position) DO UPDATE SET user_id = excluded.user_id, envelope = excluded.envelope, saved_at = excluded.saved_at`)
	now := l.d.Time(time.Now())
	return l.d.Write(ctx, l.db, func() error {
		tx, err := l.db.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("workflow: ledger: save overflow: %w", sqldialect.ClassifyContext(ctx, err))
		}
		defer func() { _ = tx.Rollback() }()
		for i, env := range envs {
			data, err := json.Marshal(env)
			if err != nil {
				return fmt.Errorf("workflow: ledger: encode %s: %w", env.Request.ID, err)
			}
			if _, err := tx.ExecContext(ctx, q, conversationID, from+int64(i), env.Request.UserID, data, now); err != nil {
				return fmt.Errorf("workflow: ledger: save overflow of %s: %w", conversationID, sqldialect.ClassifyContext(ctx, err))
			}
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("workflow: ledger: save overflow of %s: %w", conversationID, sqldialect.ClassifyContext(ctx, err))
		}
		return nil
	})
}

// LoadOverflow implements OverflowStore.
func (l *SQLLedger) LoadOverflow(ctx context.Context, conversationID string, from int64, limit, maxBytes int) ([]Envelope, error) {
	err := l.d.Write(ctx, l.db, func() error {
		_, err := l.db.ExecContext(ctx, l.d.Query(`DELETE FROM {p}overflow WHERE conversation_id = $1 AND position < $2`), conversationID, from)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("workflow: ledger: load overflow of %s: %w", conversationID, sqldialect.ClassifyContext(ctx, err))
	}
	rows, err := l.db.QueryContext(ctx, l.d.Query(`SELECT position, envelope FROM {p}overflow
		WHERE conversation_id = $1 AND position >= $2 AND position < $3 ORDER BY position`), conversationID, from, from+int64(limit))
	if err != nil {
		return nil, fmt.Errorf("workflow: ledger: load overflow of %s: %w", conversationID, sqldialect.ClassifyContext(ctx, err))
	}
	defer rows.Close()
	return scanOverflow(rows, conversationID, from, maxBytes)
}

// scanOverflow reads consecutive positions from on while their size stays within maxBytes
// (the first whatever its size).
func scanOverflow(rows *sql.Rows, conversationID string, from int64, maxBytes int) ([]Envelope, error) {
	var out []Envelope
	bytes := 0
	for want := from; rows.Next(); want++ {
		var pos int64
		var data []byte
		if err := rows.Scan(&pos, &data); err != nil {
			return nil, fmt.Errorf("workflow: ledger: load overflow: %w", err)
		}
		if pos != want || (len(out) > 0 && bytes+len(data)+1 > maxBytes) {
			break
		}
		var env Envelope
		if err := json.Unmarshal(data, &env); err != nil {
			return nil, fmt.Errorf("workflow: ledger: load overflow: a stored envelope does not decode: %w", err)
		}
		out = append(out, env)
		bytes += len(data) + 1
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("workflow: ledger: load overflow: %w", err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: conversation %s, position %d", ErrOverflowMissing, conversationID, from)
	}
	return out, nil
}
