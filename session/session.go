// Package session defines where a conversation's context lives between turns: the Store
// interface (the SessionStore), the Session and Event it holds, and an in-memory Store.
//
// A session is addressed by Key (app, user, conversation). The conversation id is the Kafka
// record key and the session id; the user id is the session's owner. A Store refuses to serve
// a session to a key whose user differs from the owner (ErrOwnerMismatch), which is how
// turnstile keeps one user's request out of another user's conversation (guarantee G7).
//
// Writes are optimistic: Append takes the version the caller read and fails with ErrConflict
// when the session moved on, which fences a zombie worker that lost its partition during a
// rebalance but is still finishing a turn. Appends are idempotent by request id: the events of
// a request that is already stored are not stored again.
//
// The package imports nothing of turnstile; session/sessiontest holds the conformance suite
// every Store implementation runs, and session/sqlsession the PostgreSQL and SQLite stores.
package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Sentinel errors a Store returns, matched with errors.Is. Implementations may wrap them.
var (
	// ErrNotFound: no session for the key, or no turn for the request id.
	ErrNotFound = errors.New("session: not found")
	// ErrExists: Create found a session for the key already there.
	ErrExists = errors.New("session: already exists")
	// ErrConflict: Append's expected version is not the stored version (a stale writer).
	ErrConflict = errors.New("session: version conflict")
	// ErrOwnerMismatch: the conversation exists for the app but belongs to another user (G7).
	ErrOwnerMismatch = errors.New("session: conversation belongs to another user")
	// ErrInvalid: the arguments break a rule of the Store contract (empty key, empty turn,
	// events of several request ids in one turn, ...).
	ErrInvalid = errors.New("session: invalid argument")
)

// Key addresses one session. The pair (App, Conversation) is unique within a Store; User is
// the owner, checked on every call.
type Key struct {
	// App names the application (an agent); several apps may share one Store.
	App string
	// User is the id of the user the conversation belongs to.
	User string
	// Conversation is the conversation id: the Kafka record key and the session id.
	Conversation string
}

// Validate reports an error wrapping ErrInvalid when a field of k is empty.
func (k Key) Validate() error {
	switch {
	case k.App == "":
		return fmt.Errorf("%w: key: empty app", ErrInvalid)
	case k.User == "":
		return fmt.Errorf("%w: key: empty user", ErrInvalid)
	case k.Conversation == "":
		return fmt.Errorf("%w: key: empty conversation", ErrInvalid)
	}
	return nil
}

// String formats k as app/user/conversation for logs.
func (k Key) String() string { return k.App + "/" + k.User + "/" + k.Conversation }

// Event is one entry of a session's history: a user message, an assistant answer, a tool call
// or its output.
type Event struct {
	// ID is the event's id, unique within the session. turnstile derives it from the request id
	// and the event's index in its turn, so a turn that is run again produces the same ids.
	ID string `json:"id"`
	// RequestID is the id of the request whose turn produced the event.
	RequestID string `json:"request_id"`
	// Seq is the event's 1-based position in the session, assigned by the Store on Append.
	Seq int64 `json:"seq"`
	// Author is the role that produced the event: "user", "assistant", "tool", or the host's own.
	Author string `json:"author"`
	// Text is the event's text.
	Text string `json:"text,omitempty"`
	// Data is optional structured content (a tool call and its arguments, say), stored as given.
	Data json.RawMessage `json:"data,omitempty"`
	// Time is when the event was made, as given by the writer.
	Time time.Time `json:"time"`
}

// Session is what a Store returns: the state and the most recent events of a conversation.
type Session struct {
	Key Key
	// State is the conversation's state as the host encodes it (JSON by convention); nil when empty.
	State json.RawMessage
	// Events holds at most the number of recent events the caller asked for, oldest first.
	Events []Event
	// EventCount is the number of events in the whole history.
	EventCount int64
	// Version counts the turns appended so far; 0 for a new session. Append expects it.
	Version   int64
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Turn is what one request adds to a session.
type Turn struct {
	// RequestID identifies the request; every event of the turn carries it.
	RequestID string
	// Events are the turn's events, in order (the final answer last). At least one.
	Events []Event
	// State, when not nil, replaces the session's state in the same write.
	State json.RawMessage
}

// Validate reports an error wrapping ErrInvalid when t breaks the Turn rules: an empty request
// id, no events, an event whose RequestID is set and differs from t.RequestID, an event text,
// author or id that is not valid UTF-8 or holds NUL, or an event time outside years 1 to 9999
// (what every Store can keep to the microsecond).
func (t Turn) Validate() error {
	if t.RequestID == "" {
		return fmt.Errorf("%w: turn: empty request id", ErrInvalid)
	}
	if len(t.Events) == 0 {
		return fmt.Errorf("%w: turn %s: no events", ErrInvalid, t.RequestID)
	}
	for i := range t.Events {
		e := &t.Events[i]
		switch {
		case e.RequestID != "" && e.RequestID != t.RequestID:
			return fmt.Errorf("%w: turn %s: event %d has request id %q", ErrInvalid, t.RequestID, i, e.RequestID)
		case !storableText(e.Text) || !storableText(e.Author) || !storableText(e.ID):
			return fmt.Errorf("%w: turn %s: event %d: text, author and id must be valid UTF-8 without NUL", ErrInvalid, t.RequestID, i)
		case !e.Time.IsZero() && !storableYear(e.Time.Year()):
			return fmt.Errorf("%w: turn %s: event %d: time %s is outside years 1 to 9999", ErrInvalid, t.RequestID, i, e.Time)
		}
	}
	return nil
}

// storableYear reports whether every Store can keep a time in year y.
func storableYear(y int) bool { return y >= 1 && y <= 9999 }

// storableText reports whether every Store can keep s as it is: PostgreSQL's TEXT refuses NUL
// and invalid UTF-8, so no Store takes them, and a turn is stored alike everywhere.
func storableText(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

// Appended is the outcome of a successful Append.
type Appended struct {
	// Version is the session's version after the append (or now, for a duplicate).
	Version int64
	// Events are the turn's events as stored, with RequestID and Seq filled in.
	Events []Event
	// Duplicate is true when the request's turn was already stored and nothing was written.
	Duplicate bool
}

// Store is the SessionStore: a shared, durable home for sessions that every worker reaches,
// so that any worker continues any conversation after a rebalance (guarantee G4).
//
// Every method checks the key's owner: a key naming a conversation of the same app that
// belongs to another user gets ErrOwnerMismatch and changes nothing. Implementations are safe
// for concurrent use by many goroutines and processes. Infrastructure failures (a lost
// connection, a busy database) come back wrapped; implementations should make them satisfy
// `interface{ Retryable() bool }` so callers can retry them without counting a failed attempt.
//
// What a Store is given is its own copy once the call returns: it never keeps the caller's
// slices. What it returns (Session.State, Session.Events, Appended.Events, FindTurn's events,
// and their Data) is for the caller to read and must not be changed in place: a Store may
// share it with other callers and with itself, as MemoryStore does to keep Get free of
// copies. A caller that wants to change an event copies it first; appending to a returned
// slice is safe (a Store cuts its capacity). The conformance suite checks both directions.
type Store interface {
	// Get returns the session with at most recent events (the newest ones, oldest first;
	// recent <= 0 returns none). Its cost must not grow with the length of the history.
	// Errors: ErrNotFound, ErrOwnerMismatch, ErrInvalid.
	Get(ctx context.Context, key Key, recent int) (Session, error)
	// Create makes an empty session at version 0 with the given state (may be nil).
	// Errors: ErrExists when the key's session is there (the loser of a create race reads it
	// with Get), ErrOwnerMismatch, ErrInvalid.
	Create(ctx context.Context, key Key, state json.RawMessage) (Session, error)
	// Append adds a turn when the stored version equals expectedVersion, in one atomic write,
	// and bumps the version by one. A stale expectedVersion gets ErrConflict, even when the
	// turn is already stored. When the versions match and the request's turn is already
	// stored, nothing is written and the stored turn comes back with Duplicate set.
	// Errors: ErrNotFound, ErrConflict, ErrOwnerMismatch, ErrInvalid.
	Append(ctx context.Context, key Key, expectedVersion int64, turn Turn) (Appended, error)
	// FindTurn returns the stored events of one request's turn, in order, whatever their age.
	// Errors: ErrNotFound (no session, or no turn of that request), ErrOwnerMismatch,
	// ErrInvalid (an empty key part or request id).
	FindTurn(ctx context.Context, key Key, requestID string) ([]Event, error)
	// Delete removes the session and its history. Errors: ErrNotFound, ErrOwnerMismatch, ErrInvalid.
	Delete(ctx context.Context, key Key) error
}
