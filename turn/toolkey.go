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

// ToolKey returns a stable idempotency key for the side effect callID (a name the host picks
// per tool call of a turn, such as "refund" or the model's tool-call id) of the request
// requestID: a version 5 UUID in its 36-character text form. The same arguments give the same
// key on every worker and every attempt, so a payment or mail service that dedups on it
// performs the side effect once however often the turn runs (G3).
func ToolKey(requestID, callID string) string {
	// Length-prefixed, so that no two (requestID, callID) pairs share a name.
	return uuid.NewSHA1(toolKeyNamespace, []byte(strconv.Itoa(len(requestID))+":"+requestID+callID)).String()
}

// eventID is the id of the index-th event (0-based) of a request's turn.
func eventID(requestID string, index int) string {
	return uuid.NewSHA1(eventIDNamespace, []byte(requestID+"\x00"+strconv.Itoa(index))).String()
}
