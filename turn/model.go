package turn

import (
	"cmp"
	"context"
	"encoding/json"

	"github.com/turnstile-go/turnstile/session"
)

// ModelClient is the host's model call: one turn of an agent.
type ModelClient interface {
	// Respond runs one turn: the request and the session's recent history in, the events to
	// append out, the final answer last. It runs under the whole-turn deadline carried by ctx
	// and must return when ctx ends.
	//
	// Respond may be called again for the same request after a crash or a failed attempt, so
	// any side effect it causes (a refund, an email) must be idempotent: pass
	// Input.ToolKey(callID) to the service that performs it, with a callID stable across
	// re-runs (the tool's name and ordinal in the turn, or a hash of its arguments; see
	// ToolKey). Steer retries with the error:
	// Permanent(err) dead-letters the request at once, RetryAfter(d, err) pauses the consumer
	// without spending an attempt, any other error counts a failed attempt.
	Respond(ctx context.Context, in Input) (Output, error)
}

// ModelFunc adapts a function to ModelClient.
type ModelFunc func(ctx context.Context, in Input) (Output, error)

// Respond calls f.
func (f ModelFunc) Respond(ctx context.Context, in Input) (Output, error) { return f(ctx, in) }

// Input is what a ModelClient gets for one turn.
type Input struct {
	Request Request
	// Session is the conversation before this turn: its state and the events after the range
	// Summary covers (every event when there is no summary), oldest first, checkpoint events
	// left out; the Runner keeps them within its HistoryLimit and ContextBudget by compacting.
	// The user's message of this request is not in it; it is Request.Text. It is read-only:
	// the Store may share its events and state with other turns (session.Store's contract),
	// so copy an event before changing it.
	Session session.Session
	// Summary is the latest summary of the conversation's beginning (a checkpoint's, perhaps
	// one this turn's compaction wrote); "" when none was needed yet. A model must give it to
	// the model with the events: turn/agent sends it in the system prompt.
	Summary string
	// ContextBudget is the Runner's ContextBudget: the most tokens a model request of this
	// turn may take.
	ContextBudget int
	// Attempt is the 1-based attempt number the inbox counted for this request.
	Attempt int
	// Replay is true when the turn runs in a replay into a sandbox (IsReplay of the turn's
	// context; the consumer's Config.Replay sets it): stub side-effecting tools or point them
	// at a sandbox, for the request already had its effects in production.
	Replay bool

	journal *Journal // the turn's step journal (Journal)
}

// ToolKey returns the idempotency key of the side effect callID in this turn, scoped to the
// turn's session (App, UserID, ConversationID): SessionToolKey, version 2 of turnstile's tool
// keys. A request id copied into another user's conversation gets other keys there (G7). See
// ToolKey for a callID that stays the same when the turn runs again ("refund#1", not the
// provider's tool-call id).
func (in Input) ToolKey(callID string) string { return in.toolScope().toolKey(callID) }

// toolScope is what the tool keys of a turn derive from: its session key and request id.
type toolScope struct {
	key       session.Key
	requestID string
}

// toolScope returns the scope of in's tool keys: the session's key with the request's user and
// conversation.
func (in *Input) toolScope() toolScope {
	key := in.Session.Key
	// The Runner's stores fill the key in; an Input built by hand may leave it empty.
	key.App = cmp.Or(key.App, DefaultApp)
	key.User, key.Conversation = in.Request.UserID, in.Request.ConversationID
	return toolScope{key: key, requestID: in.Request.ID}
}

// toolKey is Input.ToolKey of the turn of s.
func (s toolScope) toolKey(callID string) string { return SessionToolKey(s.key, s.requestID, callID) }

// Output is what a ModelClient returns for one turn.
type Output struct {
	// Events are appended to the session after the user's message, in order; the last one is
	// the final answer whose Text becomes Result.Text. At least one. The Runner fills in ID,
	// RequestID, Seq and, when zero, Time; set Author ("assistant" when empty; not
	// session.AuthorCheckpoint, which the Runner keeps for its summaries: such an event is a
	// permanent error), Text and Data.
	Events []session.Event
	// State, when not nil, replaces the session's state with this turn.
	State json.RawMessage
}
