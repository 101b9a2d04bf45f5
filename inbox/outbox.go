package inbox

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// ErrIntentNotDead is returned by Outbox.RedriveIntent for an intent that is not dead
// (pending or delivered); it is left as it is.
var ErrIntentNotDead = errors.New("inbox: intent is not dead")

// ErrLeaseLost is returned by Outbox.Delivered, Retry and Bury fenced on an attempt that is
// not the intent's current Attempts: the caller's claim is stale (its lease ran out and the
// intent was claimed again since, or re-driven), so its outcome is not recorded and the
// intent is left as it is, to the claimer that holds it now.
var ErrLeaseLost = errors.New("inbox: intent's lease lost to a later claim")

// IntentStatus is where a deferred side effect stands in the outbox.
type IntentStatus int

const (
	// IntentPending: waiting for the relay, or claimed by one that has not settled it yet.
	IntentPending IntentStatus = iota + 1
	// IntentDelivered: the relay's delivery succeeded.
	IntentDelivered
	// IntentDead: its attempts ran out; Intent.Reason says why. RedriveIntent makes it pending.
	IntentDead
)

// IntentStatuses lists every IntentStatus, in the order above.
func IntentStatuses() []IntentStatus {
	return []IntentStatus{IntentPending, IntentDelivered, IntentDead}
}

// String returns the status in lower case: "pending", "delivered", "dead".
func (s IntentStatus) String() string {
	switch s {
	case IntentPending:
		return "pending"
	case IntentDelivered:
		return "delivered"
	case IntentDead:
		return "dead"
	}
	return fmt.Sprintf("IntentStatus(%d)", int(s))
}

// ParseIntentStatus is String's inverse. Errors: ErrInvalid for any other text.
func ParseIntentStatus(s string) (IntentStatus, error) {
	for _, st := range IntentStatuses() {
		if st.String() == s {
			return st, nil
		}
	}
	return 0, fmt.Errorf("%w: intent status %q (want pending, delivered or dead)", ErrInvalid, s)
}

// IntentID returns the id of the intent of the deferred step ordinal of the request under
// inbox key: "KEY#ORDINAL". One deferred step has one intent, however often its turn ran.
func IntentID(key string, ordinal int) string { return key + "#" + strconv.Itoa(ordinal) }

// Intent is a deferred side effect of a committed turn, waiting in the outbox for the relay
// (Relay) to deliver it: a deferred step (Step.Deferred) of a request whose turn committed.
type Intent struct {
	// ID is IntentID(Key, Ordinal).
	ID string
	// Key is the inbox key of the request whose turn deferred it.
	Key string
	// Conversation is the request's conversation id, from its inbox entry.
	Conversation string
	// Ordinal and Name are the deferred step's.
	Ordinal int
	Name    string
	// Payload is the deferred step's Output: what to deliver (turnstile stores JSON with
	// the tool, its arguments and its idempotency key; see turn.DecodeIntent).
	Payload []byte
	Status  IntentStatus
	// Attempts counts the deliveries begun (claims), less none: a crashed delivery counts.
	Attempts int
	// Reason is the last failed delivery's error, or why the intent is dead.
	Reason string
	// NextAt is when the intent is next due (its backoff after a failure, or its lease's end
	// while claimed), in UTC.
	NextAt    time.Time
	CreatedAt time.Time
	UpdatedAt time.Time
}

// IntentFilter selects intents for Outbox.Intents. Zero fields select all.
type IntentFilter struct {
	// Status, when not zero, keeps intents of that status.
	Status IntentStatus
	// Conversation, when not empty, keeps intents of that conversation.
	Conversation string
	// Limit bounds how many come back, oldest first; 0 means 100.
	Limit int
}

// Outbox is an Inbox with a transactional outbox for deferred side effects (seed 001's second
// way to make a side effect safe): a turn records a deferred tool call as a deferred step
// (Journal), and when the turn commits the Runner promotes the request's deferred steps into
// intents, in the same transaction as the commit where the stores can (TxOutbox). A relay
// (Relay) then claims and delivers them, with retries and backoff, and dead-letters an intent
// whose attempts run out. A turn that never commits (abandoned, a zombie's, dead-lettered)
// promotes nothing, so delivers nothing.
//
// Delivery is at least once: a relay that crashes after delivering and before Delivered
// lands delivers again after the lease; the intent's payload carries an idempotency key for
// the receiving service.
type Outbox interface {
	Journal
	// Promote makes every deferred step recorded under key with an ordinal up to through (all
	// of them when through < 1) a pending intent, due now, unless it is one already (an intent
	// is never promoted twice, so a Promote run again after a crash is harmless). through is
	// the committed turn's last step: a deferred step past it was recorded by a run of the
	// request that did not commit (a zombie whose model took another path) and is never
	// promoted. It returns how many intents it created. Errors: ErrInvalid.
	Promote(ctx context.Context, key string, through int) (int, error)
	// Claim leases up to n due pending intents for lease: each counts an attempt and becomes
	// due again at now plus lease (so an intent whose deliverer died is claimed again then).
	// Oldest due first. Errors: ErrInvalid (n < 1, lease <= 0).
	Claim(ctx context.Context, n int, lease time.Duration) ([]Intent, error)
	//
	// Delivered, Retry and Bury settle a claimed intent, fenced on attempt: the Attempts of
	// the Intent as Claim returned it. When attempt is not the intent's current Attempts (a
	// later claim took it after the caller's lease ran out, or it was re-driven), the call is
	// a no-op that returns ErrLeaseLost, so a stale claimer can neither break the lease of
	// the one holding the intent now nor overwrite its outcome. attempt 0 settles unfenced,
	// whatever the intent's Attempts: for operators' tools. A negative attempt is ErrInvalid.

	// Delivered marks the pending intent delivered; it does nothing to a dead one. Errors:
	// ErrLeaseLost, ErrNotFound, ErrInvalid.
	Delivered(ctx context.Context, id string, attempt int) error
	// Retry records a failed delivery with its reason: the intent stays pending, due at at.
	// It does nothing to a delivered or dead intent. Errors: ErrLeaseLost, ErrNotFound,
	// ErrInvalid.
	Retry(ctx context.Context, id string, attempt int, reason string, at time.Time) error
	// Bury marks the intent dead with the reason. It does nothing to a delivered intent.
	// Errors: ErrLeaseLost, ErrNotFound, ErrInvalid.
	Bury(ctx context.Context, id string, attempt int, reason string) error
	// Intents lists intents matching f, oldest first. Errors: ErrInvalid.
	Intents(ctx context.Context, f IntentFilter) ([]Intent, error)
	// RedriveIntent makes a dead intent pending and due now with no attempts spent, for an
	// operator who fixed what killed it; note is kept in Reason. Errors: ErrNotFound,
	// ErrIntentNotDead, ErrInvalid.
	RedriveIntent(ctx context.Context, id, note string) (Intent, error)
}

// TxOutbox is an Outbox on a SQL database that can promote a request's deferred steps inside
// a transaction someone else opened on it: turn.Runner promotes them in the transaction that
// stores the turn and completes the request (TxCompleter), so the intents exist exactly when
// the turn is committed. inbox/sqlinbox's Inbox implements it.
type TxOutbox interface {
	Outbox
	TxCompleter
	// PromoteTx is Promote with its statements run on tx, a transaction on TxDB().
	PromoteTx(ctx context.Context, tx SQLTx, key string, through int) (int, error)
}
