package turn

import (
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/turnstile-go/turnstile/session"
)

// Namespaces of the name-based (version 5, SHA-1, RFC 9562 section 5.5) UUIDs this package
// derives, so that tool keys and event ids never collide with each other.
var (
	toolKeyNamespace = uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://github.com/turnstile-go/turnstile/tool-key"))
	// sessionToolKeyNamespace names the tool keys scoped to a session (SessionToolKey).
	sessionToolKeyNamespace = uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://github.com/turnstile-go/turnstile/tool-key/v2"))
	eventIDNamespace        = uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://github.com/turnstile-go/turnstile/event-id"))
	// inboxScopeNamespace names the scope part of inbox keys (Runner.InboxKey).
	inboxScopeNamespace = uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://github.com/turnstile-go/turnstile/inbox-scope"))
)

// lengthPrefixed joins parts so that no two lists of parts give the same string.
func lengthPrefixed(parts ...string) string {
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(strconv.Itoa(len(p)))
		b.WriteByte(':')
		b.WriteString(p)
	}
	return b.String()
}

// ToolKey returns a stable idempotency key for the side effect callID of the request
// requestID: a version 5 UUID in its 36-character text form. The same arguments give the same
// key on every worker and every attempt, so a payment or mail service that dedups on it
// performs the side effect once however often the turn runs (G3).
//
// The key is only as stable as callID. A turn may run again after a crash or a failed attempt
// (the model is called again), so callID must come from something that is the same in every
// run of the same request: the tool's name and its ordinal among the turn's calls of it
// ("refund#1"), or the tool's name and a hash of its arguments (when the same arguments mean
// the same effect). Never use the model provider's tool-call id (OpenAI's "call_..."): each
// response names its tool calls afresh, so the re-run after a crash gets a new key and the
// refund happens twice. turntest.CheckCrashes catches such a key. The same holds for
// SessionToolKey.
//
// ToolKey is the version 1 key, not scoped: a request id copied into another user's
// conversation gets the same key there, so the copy's side effect is deduplicated against the
// first user's (G7). Input.ToolKey returns SessionToolKey's scoped version 2 keys instead;
// ToolKey stays, with its format unchanged, for side effects keyed before that change.
func ToolKey(requestID, callID string) string {
	// Length-prefixed, so that no two (requestID, callID) pairs share a name.
	return uuid.NewSHA1(toolKeyNamespace, []byte(strconv.Itoa(len(requestID))+":"+requestID+callID)).String()
}

// SessionToolKey returns the idempotency key of the side effect callID of the request
// requestID in the session key: a version 5 UUID (RFC 9562 section 5.5) in its 36-character
// text form, of a name that holds the app, user, conversation, request id and call id, so
// that the key is scoped to the session as the inbox key is (Runner.InboxKey). The same
// arguments give the same key on every worker and every attempt (G3), and a request id copied
// into another user's or conversation's record gets a key of its own there: its side effect
// is neither skipped as a duplicate of the first user's nor handed the first user's outcome
// (G7). Input.ToolKey calls it with the turn's session key.
//
// Its keys are version 2 of turnstile's tool keys; they differ from ToolKey's version 1 keys
// for the same call, and the two never collide (different UUID namespaces). A host whose
// side-effect service holds version 1 keys of turns still running when it upgrades can look
// both up during the change.
func SessionToolKey(key session.Key, requestID, callID string) string {
	return uuid.NewSHA1(sessionToolKeyNamespace, []byte(lengthPrefixed(key.App, key.User, key.Conversation, requestID, callID))).String()
}

// eventID is the id of the index-th event (0-based) of a request's turn.
func eventID(requestID string, index int) string {
	return uuid.NewSHA1(eventIDNamespace, []byte(requestID+"\x00"+strconv.Itoa(index))).String()
}
