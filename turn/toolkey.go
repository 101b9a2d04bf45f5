package turn

import (
	"crypto/sha1"
	"encoding/hex"
	"strconv"

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

// appendLengthPrefixed appends parts to dst so that no two lists of parts give the same
// bytes: each part as its length in bytes (decimal), a colon and the part.
func appendLengthPrefixed(dst []byte, parts ...string) []byte {
	for _, p := range parts {
		dst = strconv.AppendInt(dst, int64(len(p)), 10)
		dst = append(dst, ':')
		dst = append(dst, p...)
	}
	return dst
}

// appendNameUUID appends to dst the text form of the version 5 (SHA-1, name-based, RFC 9562
// section 5.5) UUID of name in the namespace ns: the bytes uuid.NewSHA1(ns, name).String()
// gives, made without its hash object and its two allocations (a turn derives three such
// UUIDs; TestInboxKeyGolden, TestToolKeyGolden and TestEventIDGolden pin the results).
func appendNameUUID(dst []byte, ns uuid.UUID, name []byte) []byte {
	var in [256]byte // names longer than this go to the heap
	sum := sha1.Sum(append(append(in[:0], ns[:]...), name...))
	u := uuid.UUID(sum[:16])
	u[6] = (u[6] & 0x0f) | 0x50 // version 5
	u[8] = (u[8] & 0x3f) | 0x80 // variant 10, RFC 9562
	dst = hex.AppendEncode(dst, u[0:4])
	for _, part := range [][]byte{u[4:6], u[6:8], u[8:10], u[10:16]} {
		dst = hex.AppendEncode(append(dst, '-'), part)
	}
	return dst
}

// nameUUID returns appendNameUUID's text of name in ns as a string.
func nameUUID(ns uuid.UUID, name []byte) string {
	var out [36]byte
	return string(appendNameUUID(out[:0], ns, name))
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
	var name [128]byte
	return nameUUID(toolKeyNamespace, append(append(append(strconv.AppendInt(name[:0], int64(len(requestID)), 10), ':'), requestID...), callID...))
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
	var name [256]byte
	return nameUUID(sessionToolKeyNamespace, appendLengthPrefixed(name[:0], key.App, key.User, key.Conversation, requestID, callID))
}

// eventID is the id of the index-th event (0-based) of a request's turn.
func eventID(requestID string, index int) string {
	var name [64]byte
	return nameUUID(eventIDNamespace, strconv.AppendInt(append(append(name[:0], requestID...), 0), int64(index), 10))
}
