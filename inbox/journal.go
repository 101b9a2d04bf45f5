package inbox

import (
	"context"
	"errors"
	"time"
)

// ErrStepMismatch is returned by Journal.RecordStep when a step of the same ordinal is
// recorded under another name: the turn's steps came out in another order than the journal's,
// as after a deploy that changed the agent between two deliveries of one request.
// turn.Runner dead-letters such a request (the reason names both steps); Redrive clears the
// journal, so a re-driven request runs its steps afresh.
var ErrStepMismatch = errors.New("inbox: step recorded under another name")

// Step is one completed step of a request's turn, as the step journal records it: a model call
// or a tool call, identified by its ordinal in the turn and its name.
type Step struct {
	// Ordinal is the step's 1-based position in the turn.
	Ordinal int
	// Name names what the step does ("model", "tool:refund"); with Ordinal, its identity.
	Name string
	// Output is the step's outcome as the turn recorded it. Opaque to the inbox; turnstile
	// stores JSON.
	Output []byte
	// Deferred marks a deferred tool call (a side effect for the outbox): Output is its intent,
	// which Outbox.Promote makes deliverable once the turn commits.
	Deferred bool
	// At is when the step was recorded, by the inbox's clock, in UTC; RecordStep sets it.
	At time.Time
}

// Journal is an Inbox that records the completed steps of a request's turn, so that a turn
// run again (after a crash, a revoke, a timeout, a redelivery, a Temporal activity retry)
// returns the steps that completed before without running them (turn.Input.Journal). Steps
// live under the request's inbox key: Purge deletes them with their entry, Redrive clears
// them, and they are otherwise kept after the request is done, for audit.
//
// inbox.MemoryInbox and inbox/sqlinbox's Inbox implement it; the conformance suite
// (inbox/inboxtest) checks every Inbox that does.
type Journal interface {
	Inbox
	// Steps returns the steps recorded under key, by ordinal ascending; none is an empty
	// slice and no error. Errors: ErrInvalid (empty key).
	Steps(ctx context.Context, key string) ([]Step, error)
	// RecordStep records s under key unless a step of its ordinal is recorded already, and
	// returns the step recorded under that ordinal: s, or the first writer's step, whose
	// Output the caller must use instead of its own (two deliveries of one request that ran a
	// step at once, such as a zombie and the partition's new owner, agree on its outcome).
	// A step recorded under another name comes back with ErrStepMismatch.
	// Errors: ErrNotFound (no entry under key), ErrStepMismatch, ErrInvalid (empty key or
	// name, Ordinal below 1).
	RecordStep(ctx context.Context, key string, s Step) (Step, error)
}
