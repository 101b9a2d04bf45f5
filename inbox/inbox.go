// Package inbox defines the dedup table of turnstile: the Inbox interface, which records every
// delivery of a request under its key (the request id scoped to its session, as
// turn.Runner.InboxKey builds it), counts its attempts and keeps its outcome, and an in-memory
// Inbox.
//
// Kafka delivers at least once: a record is read again after a crash or a rebalance whenever
// its offset was not committed. The inbox turns that into effectively once (guarantee G3): a
// request already done is answered from its stored result instead of being run again, and the
// attempts of a failing request add up across members and crashes, so a poison record reaches
// the dead-letter topic after a bounded number of deliveries (G5).
//
// The package imports nothing of turnstile; inbox/inboxtest holds the conformance suite every
// Inbox implementation runs, and inbox/sqlinbox the PostgreSQL and SQLite inboxes.
package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Sentinel errors an Inbox returns, matched with errors.Is. Implementations may wrap them.
var (
	// ErrNotFound: no entry under the key.
	ErrNotFound = errors.New("inbox: not found")
	// ErrDead: Complete on an entry that was dead-lettered; its result is not stored.
	ErrDead = errors.New("inbox: request is dead-lettered")
	// ErrInvalid: an argument breaks the contract (an empty key).
	ErrInvalid = errors.New("inbox: invalid argument")
	// ErrNotDead: Redrive on an entry that is not dead-lettered (in progress or done); it is
	// left as it is.
	ErrNotDead = errors.New("inbox: request is not dead-lettered")
)

// Status is where a request stands.
type Status int

const (
	// StatusNew is what Begin returns when its call created the entry: no earlier delivery
	// of the request began. It is never stored: the entry is then StatusInProgress.
	StatusNew Status = iota + 1
	// StatusInProgress: a delivery began and did not finish (it is running, or it failed,
	// crashed or was revoked). From Begin: an earlier delivery began; this one was counted as
	// one more attempt.
	StatusInProgress
	// StatusDone: the request completed; Entry.Result holds its stored result.
	StatusDone
	// StatusDead: the request was dead-lettered; Entry.Reason says why.
	StatusDead
)

// String returns the status in lower case: "new", "in_progress", "done", "dead".
func (s Status) String() string {
	switch s {
	case StatusNew:
		return "new"
	case StatusInProgress:
		return "in_progress"
	case StatusDone:
		return "done"
	case StatusDead:
		return "dead"
	}
	return fmt.Sprintf("Status(%d)", int(s))
}

// Delivery is one delivery of a request: its inbox key and the record it came in.
type Delivery struct {
	// Key identifies the request in the inbox: turn.Runner uses Runner.InboxKey, the request id
	// scoped to its (app, user, conversation). Opaque to the Inbox; the SQL inbox stores it in
	// its request_id column. (Named RequestID before; renamed because it is not the bare id.)
	Key          string
	Conversation string
	// Topic, Partition and Offset locate the record, for operators; Offset is the record's own.
	Topic     string
	Partition int32
	Offset    int64
}

// Entry is the inbox's row for one request.
type Entry struct {
	// Key is the Delivery.Key the entry was begun with.
	Key          string
	Conversation string
	Status       Status
	// Attempts counts the deliveries that began a turn, less the refunded ones (see Failure).
	Attempts int
	// Result is the stored result (opaque bytes; turnstile stores the encoded turn.Result),
	// set when Status is StatusDone.
	Result []byte
	// Reason is the last failure's reason, or why the request was dead-lettered.
	Reason string
	// Topic, Partition and Offset are the latest delivery's.
	Topic     string
	Partition int32
	Offset    int64
	CreatedAt time.Time
	UpdatedAt time.Time
	// Redrives is the audit of the times the entry was dead and Redrive made it runnable
	// again, oldest first; empty for an entry never re-driven.
	Redrives []RedriveAudit
}

// RedriveAudit records one Redrive of a dead entry: why it had been dead-lettered.
type RedriveAudit struct {
	// Reason is the entry's Reason when it was re-driven: why it was dead-lettered.
	Reason string `json:"reason"`
	// Attempts is the entry's attempt count when it was re-driven.
	Attempts int `json:"attempts"`
	// Note is the caller's note (who re-drove it and why), as given to Redrive.
	Note string `json:"note,omitempty"`
	// At is when it was re-driven, by the inbox's clock, in UTC.
	At time.Time `json:"at"`
}

// Failure describes a failed attempt for Fail.
type Failure struct {
	// Reason is kept in Entry.Reason for operators.
	Reason string
	// Refund gives back the attempt Begin counted: the failure was not the request's fault
	// (a rate limit, a store outage, a revoked partition), so it must not bring the request
	// closer to the dead-letter topic.
	Refund bool
}

// Inbox records deliveries and outcomes by key. The key is opaque to the Inbox: a caller that
// serves several users scopes the request id in it, as turn.Runner does (Runner.InboxKey), so
// that a request id copied from another user's result can neither replay nor complete that
// user's request.
// Implementations are safe for concurrent use by many goroutines and processes; Begin in
// particular is atomic, so two members that receive the same request during a rebalance both
// count an attempt.
// Infrastructure failures should satisfy `interface{ Retryable() bool }`.
type Inbox interface {
	// Begin records a delivery. A new request gets an entry with one attempt, stored as
	// StatusInProgress and returned as StatusNew; an in-progress one gets one more attempt and
	// the delivery's location (StatusInProgress). A done or dead entry comes back unchanged
	// (StatusDone with Result, StatusDead with Reason). Only StatusNew tells the caller that no
	// earlier delivery can have written anything for the request.
	// Errors: ErrInvalid.
	Begin(ctx context.Context, d Delivery) (Entry, error)
	// Complete marks the request done with its result. Completing a done entry is a no-op that
	// keeps the first result, so one key never has two results.
	// Errors: ErrNotFound, ErrDead, ErrInvalid.
	Complete(ctx context.Context, key string, result []byte) error
	// Fail records why an attempt failed and, with Refund, gives the attempt back (never below
	// zero). It does nothing to a done or dead entry. Errors: ErrNotFound, ErrInvalid.
	Fail(ctx context.Context, key string, f Failure) error
	// MarkDead marks the request dead-lettered with the reason. A done entry stays done.
	// Errors: ErrNotFound, ErrInvalid.
	MarkDead(ctx context.Context, key, reason string) error
	// Redrive makes a dead entry runnable again, for an operator who fixed what killed it: the
	// entry becomes StatusInProgress with no attempts spent (the next Begin counts attempt 1
	// of a fresh budget, and does not return StatusNew: an earlier delivery may have stored
	// the turn), its Reason is cleared, and its earlier Reason and Attempts are appended to
	// Redrives with note and the time. The request runs once Kafka delivers it again. An entry
	// that is not dead comes back unchanged with ErrNotDead, so of concurrent Redrives of one
	// dead entry exactly one succeeds. Errors: ErrNotFound, ErrNotDead, ErrInvalid.
	Redrive(ctx context.Context, key, note string) (Entry, error)
	// Get returns the entry. Errors: ErrNotFound, ErrInvalid.
	Get(ctx context.Context, key string) (Entry, error)
	// Purge deletes done and dead entries last updated before the given time and returns how
	// many it deleted; entries in progress stay whatever their age. A purged request that
	// Kafka delivers again (a redelivery, a replayed or re-published record) runs again as new:
	// keep entries longer than the requests topic's retention (retention.ms) and than any
	// producer retries. RunPurge calls it on a schedule.
	//
	// A Journal deletes a purged entry's steps with it. An Outbox also deletes its delivered
	// and dead intents last updated before the cutoff, and counts them in the number
	// returned; pending intents are never purged, whatever their age.
	Purge(ctx context.Context, before time.Time) (int64, error)
}
