package turn

import (
	"strconv"
	"strings"

	"github.com/google/uuid"
)

// Namespaces of the name-based (version 5, SHA-1, RFC 9562 section 5.5) UUIDs this package
// derives, so that tool keys and event ids never collide with each other.
var (
	toolKeyNamespace = uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://github.com/turnstile-go/turnstile/tool-key"))
	eventIDNamespace = uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://github.com/turnstile-go/turnstile/event-id"))
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
// refund happens twice. turntest.CheckCrashes catches such a key.
func ToolKey(requestID, callID string) string {
	// Length-prefixed, so that no two (requestID, callID) pairs share a name.
	return uuid.NewSHA1(toolKeyNamespace, []byte(strconv.Itoa(len(requestID))+":"+requestID+callID)).String()
}

// eventID is the id of the index-th event (0-based) of a request's turn.
func eventID(requestID string, index int) string {
	return uuid.NewSHA1(eventIDNamespace, []byte(requestID+"\x00"+strconv.Itoa(index))).String()
}
