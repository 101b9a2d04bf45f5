package session

import (
	"context"
	"time"
)

// Retention is a Store that deletes sessions in bulk: all of one user's (a data-deletion
// request) and those idle for too long. MemoryStore and session/sqlsession's Store implement
// it; session/sessiontest checks it on every Store that does.
//
// A deleted session is gone with its history and state: the user's next request starts a
// fresh one (turn.Runner creates it). The inbox keeps the results of the requests that were
// answered until its own purge (inbox.RunPurge), so purge it at least as often when results
// hold personal data.
type Retention interface {
	Store
	// DeleteUser deletes every session of user in app and returns how many it deleted (0 when
	// there were none). A turn of one of them that is in flight fails (ErrNotFound or
	// ErrConflict) and its next attempt starts a fresh session. Errors: ErrInvalid (an empty
	// app or user).
	DeleteUser(ctx context.Context, app, user string) (int64, error)
	// DeleteIdle deletes the sessions of app last updated (UpdatedAt) before the given time,
	// and returns how many it deleted. A session that a turn updates while DeleteIdle runs is
	// kept. Errors: ErrInvalid (an empty app).
	DeleteIdle(ctx context.Context, app string, before time.Time) (int64, error)
}

// UserCounts counts a user's sessions and the events of their histories (compactions'
// checkpoints are events too); each session's state lives in its row.
type UserCounts struct {
	Sessions int64 `json:"sessions"`
	Events   int64 `json:"events"`
}

// UserEraser is a Retention whose user deletion counts each kind, and counts without
// deleting: turn.Retention.EraseUser needs it for its counts and its dry run. MemoryStore and
// session/sqlsession's Store implement it.
type UserEraser interface {
	Retention
	// DeleteUserCounted is DeleteUser that also counts the events deleted; with dryRun it
	// deletes nothing and returns what DeleteUser would delete at that moment. Errors:
	// DeleteUser's.
	DeleteUserCounted(ctx context.Context, app, user string, dryRun bool) (UserCounts, error)
}
