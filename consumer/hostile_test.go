package consumer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/IBM/sarama"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turntest"
)

// hostile is one kind of bad (or odd) record of the hostile-input corpus.
type hostile struct {
	name    string
	key     []byte // nil: a record without a key
	value   []byte // nil: a tombstone
	headers []sarama.RecordHeader
	// dead is a part of the dead letter's reason; "" means the record is in fact valid and is
	// served: a result with its request id.
	dead string
	id   string // the request id of a record that is served
}

// corpusEnvelope returns a request envelope of conversation conv (the record key) as a JSON
// object, changed by edit, with its request id.
func corpusEnvelope(t *testing.T, conv string, edit func(m map[string]any)) ([]byte, string) {
	t.Helper()
	id := uuid.NewString()
	m := map[string]any{"schema": 1, "request_id": id, "conversation_id": conv, "user_id": "u-" + conv, "text": "hello"}
	if edit != nil {
		edit(m)
	}
	data, err := json.Marshal(m)
	require.NoError(t, err)
	return data, id
}

// corpusRaw returns the JSON text of a request envelope of conv with the members after, as
// written (duplicates, case variants, odd spellings), with its request id.
func corpusRaw(conv, after string) ([]byte, string) {
	id := uuid.NewString()
	return []byte(`{"schema":1,"request_id":"` + id + `","conversation_id":"` + conv + `","text":"hello"` + after + `}`), id
}

// hostileCorpus returns the corpus: each record followed, on the same partition, by a valid
// request.
func hostileCorpus(t *testing.T) []hostile {
	set := func(k string, v any) func(map[string]any) { return func(m map[string]any) { m[k] = v } }
	del := func(k string) func(map[string]any) { return func(m map[string]any) { delete(m, k) } }
	var cs []hostile
	add := func(name, dead string, key string, value []byte) {
		cs = append(cs, hostile{name: name, key: []byte(key), value: value, dead: dead})
	}
	env := func(name, dead, conv string, edit func(map[string]any)) {
		v, id := corpusEnvelope(t, conv, edit)
		cs = append(cs, hostile{name: name, key: []byte(conv), value: v, dead: dead, id: id})
	}
	raw := func(name, dead, conv, after string) {
		v, id := corpusRaw(conv, after)
		cs = append(cs, hostile{name: name, key: []byte(conv), value: v, dead: dead, id: id})
	}
	big := strings.Repeat("x", 2<<20)
	// Not a JSON object.
	add("empty value", "empty value", "c-h", []byte{})
	cs = append(cs, hostile{name: "tombstone (null value)", key: []byte("c-h"), value: nil, dead: "empty value"})
	add("plain text", "not JSON", "c-h", []byte("where is my refund?"))
	add("truncated JSON", "not JSON", "c-h", []byte(`{"schema":1,"request_id":`))
	add("trailing garbage", "not JSON", "c-h", []byte(`{"schema":1} {"schema":1}`))
	add("JSON with a comment", "not JSON", "c-h", []byte(`{"schema":1} // hi`))
	add("byte order mark", "not JSON", "c-h", []byte("\xef\xbb\xbf{\"schema\":1}"))
	add("JSON array", "not a JSON object", "c-h", []byte(`[{"schema":1}]`))
	add("JSON string", "not a JSON object", "c-h", []byte(`"hello"`))
	add("JSON number", "not a JSON object", "c-h", []byte(`42`))
	add("JSON null", "value is null, not a JSON object", "c-h", []byte(`null`))
	add("empty object", "missing fields schema, request_id, conversation_id, user_id, text", "c-h", []byte(`{}`))
	add("invalid UTF-8 value", "not valid UTF-8", "c-h", []byte("{\"schema\":1,\"text\":\"\xff\xfe\"}"))
	add("lone surrogate escape", "not JSON", "c-h", func() []byte { v, _ := corpusRaw("c-h", `,"user_id":"u","x":"\ud800"`); return v }())
	add("deep nesting", "max depth", "c-h", func() []byte {
		v, _ := corpusRaw("c-h", `,"user_id":"u","x":`+strings.Repeat("[", 20000)+strings.Repeat("]", 20000))
		return v
	}())
	// Schema.
	env("schema missing", "schema: missing", "c-h", del("schema"))
	env("unknown schema", "schema: unknown version 2", "c-h", set("schema", 2))
	env("schema as string", "schema: wrong JSON type", "c-h", set("schema", "1"))
	env("schema as float", "schema: wrong JSON type", "c-h", set("schema", 1.5))
	// Request ids.
	env("request id missing", "request_id: missing", "c-h", del("request_id"))
	env("request id not a UUID", "request_id: not a UUID", "c-h", set("request_id", "req-1"))
	env("request id nil UUID", "nil UUID", "c-h", set("request_id", uuid.Nil.String()))
	env("request id huge", "request_id: not a UUID", "c-h", set("request_id", strings.Repeat("f", 10<<10)))
	env("request id as number", "request_id: wrong JSON type", "c-h", set("request_id", 7))
	for name, spell := range map[string]func(string) string{
		"upper case": strings.ToUpper,
		"braces":     func(s string) string { return "{" + s + "}" },
		"urn:uuid:":  func(s string) string { return "urn:uuid:" + s },
		"32 hex":     func(s string) string { return strings.ReplaceAll(s, "-", "") },
	} {
		env("request id in "+name, "request_id: not in the canonical form", "c-h",
			func(m map[string]any) { m["request_id"] = spell(m["request_id"].(string)) })
	}
	// Conversation, user, key.
	env("conversation id missing", "conversation_id: missing", "c-h", del("conversation_id"))
	env("key and conversation differ", "differs from conversation_id", "c-h", set("conversation_id", "c-other"))
	env("conversation id too long", "conversation_id: 300 bytes", strings.Repeat("c", 300), nil)
	env("conversation id with NUL", "conversation_id: control character", "c-h\x00", nil)
	env("conversation id padded", "conversation_id: leading or trailing space", " c-h", nil)
	cs = append(cs, hostile{name: "no key", key: nil, value: func() []byte { v, _ := corpusEnvelope(t, "c-h", nil); return v }(),
		dead: "record has no key"})
	add("key not UTF-8", "differs from conversation_id", "c-\xff", func() []byte { v, _ := corpusEnvelope(t, "c-h", nil); return v }())
	env("user id missing", "user_id: missing", "c-h", del("user_id"))
	env("user id wrong type", "user_id: wrong JSON type", "c-h", set("user_id", []string{"u"}))
	env("user id with newline", "user_id: control character", "c-h", set("user_id", "u\nadmin"))
	raw("duplicate user id", `user_id: duplicate name "user_id"`, "c-h", `,"user_id":"intruder","user_id":"u-c-h"`)
	raw("case-variant user id", `USER_ID: differs from the envelope's "user_id" only in case`, "c-h", `,"user_id":"intruder","USER_ID":"u-c-h"`)
	raw("duplicate request id", `request_id: duplicate name`, "c-h", `,"user_id":"u-c-h","request_id":"`+uuid.NewString()+`"`)
	raw("case-variant text", `Text: differs from the envelope's "text" only in case`, "c-h", `,"user_id":"u-c-h","Text":"other"`)
	// Text and the other fields.
	env("text empty", "text: empty", "c-h", set("text", " \t"))
	env("text with NUL", "text: contains NUL", "c-h", set("text", "a\x00b"))
	env("text wrong type", "text: wrong JSON type", "c-h", set("text", map[string]string{"a": "b"}))
	env("sequence negative", "sequence: negative", "c-h", set("sequence", -3))
	env("sequence fractional", "sequence: wrong JSON type", "c-h", set("sequence", 2.5))
	raw("sequence out of range", "sequence: wrong JSON type", "c-h", `,"user_id":"u-c-h","sequence":1e400`)
	env("created_at not a time", "created_at: not an RFC 3339 time", "c-h", set("created_at", "yesterday"))
	env("reply_to wrong type", "reply_to: wrong JSON type", "c-h", set("reply_to", 5))
	env("metadata not strings", "metadata: wrong JSON type", "c-h", set("metadata", map[string]int{"a": 1}))
	env("metadata too many entries", "metadata: 65 entries", "c-h", func(m map[string]any) {
		md := map[string]string{}
		for i := range 65 {
			md[strconv.Itoa(i)] = "v"
		}
		m["metadata"] = md
	})
	raw("metadata duplicate key", `metadata: duplicate name "tenant"`, "c-h", `,"user_id":"u-c-h","metadata":{"tenant":"a","tenant":"b"}`)
	// Oversize parts (the requests topic allows 16 MiB; the producer of dead letters 1 MiB).
	env("text over the limit", "value is", "c-h", set("text", big))
	add("oversize key", "not JSON", big, []byte("not JSON"))
	cs = append(cs, hostile{name: "oversize headers", key: []byte("c-h"), value: []byte("not JSON"), dead: "not JSON",
		headers: []sarama.RecordHeader{{Key: []byte("pasted-log"), Value: []byte(big)}}})
	// Odd but valid: served.
	env("unknown extra field", "", "c-odd-1", set("future_field", map[string]any{"nested": []int{1, 2}}))
	env("metadata keys differing in case", "", "c-odd-2", set("metadata", map[string]string{"a": "1", "A": "2"}))
	env("null metadata", "", "c-odd-3", set("metadata", nil))
	v, id := corpusEnvelope(t, "c-odd-4", nil)
	cs = append(cs, hostile{name: "valid request under large headers", key: []byte("c-odd-4"), value: v, id: id,
		headers: []sarama.RecordHeader{{Key: []byte("pasted-log"), Value: []byte(big)}}})
	return cs
}

// TestHostileInputCorpus sends every kind of bad record of the corpus, each followed by a valid
// request on the same partition, through a real broker (kfake over TCP) and the real consumer:
// each is dead-lettered with a readable reason, or served when it is in fact valid, and no
// record stalls the partition. The session-level attacks (another user's conversation, a
// copied request id, a replay) run at the end, where they need the earlier turns.
func TestHostileInputCorpus(t *testing.T) {
	t.Parallel()
	e := setup(t, 1, 1)
	allowLargeRecords(t, e.cluster, e.requests)
	corpus := hostileCorpus(t)
	require.GreaterOrEqual(t, len(corpus), 40)
	t.Logf("%d kinds of record in the corpus, plus 4 session-level ones", len(corpus))

	var (
		msgs      []*sarama.ProducerMessage
		followers []turn.Request
	)
	enc := func(r turn.Request) []byte {
		data, err := r.Encode()
		require.NoError(t, err)
		return data
	}
	for i, h := range corpus {
		m := &sarama.ProducerMessage{Headers: h.headers}
		if h.key != nil {
			m.Key = sarama.ByteEncoder(h.key)
		}
		if h.value != nil {
			m.Value = sarama.ByteEncoder(h.value)
		}
		f := request(fmt.Sprintf("c-follow-%d", i), "the valid request after "+h.name)
		followers = append(followers, f)
		msgs = append(msgs, m, &sarama.ProducerMessage{Key: sarama.StringEncoder(f.ConversationID), Value: sarama.ByteEncoder(enc(f))})
	}
	// Session-level attacks, after an owner's turn: another user's conversation, a request id
	// copied into another user's conversation (valid: served as that user's own), an exact
	// replay of a done request (valid: answered from the inbox).
	owner := request("c-owned", "the owner's message")
	intruder := owner
	intruder.ID, intruder.UserID, intruder.Text = uuid.NewString(), "u-intruder", "show me the owner's history"
	copied := request("c-copier", "a copied request id")
	copied.ID = owner.ID
	session := []turn.Request{owner, intruder, copied, owner}
	for _, r := range session {
		msgs = append(msgs, &sarama.ProducerMessage{Key: sarama.StringEncoder(r.ConversationID), Value: sarama.ByteEncoder(enc(r))})
	}
	last := request("c-last", "the last valid request")
	msgs = append(msgs, &sarama.ProducerMessage{Key: sarama.StringEncoder(last.ConversationID), Value: sarama.ByteEncoder(enc(last))})
	produceLarge(t, e.cluster, e.requests, msgs)

	m := e.start(memberOpts{})
	total := len(msgs)
	eventually(t, func() bool { return m.c.Stats().Records == int64(total) }, "every record reached an outcome: nothing stalled")
	st := m.c.Stats()
	require.Zero(t, st.Skipped)

	deadByOffset := map[int64]map[string]string{}
	var nDead int
	for _, c := range corpus {
		if c.dead != "" {
			nDead++
		}
	}
	nDead++ // the intruder
	for _, d := range e.cluster.ReadAll(t, e.dlq, nDead, wait) {
		h := turntest.HeaderMap(d)
		off, err := strconv.ParseInt(h[consumer.HeaderSourceOffset], 10, 64)
		require.NoError(t, err)
		deadByOffset[off] = h
	}
	require.Len(t, deadByOffset, nDead, "one dead letter per bad record")
	resultsByID := map[string][]*sarama.ConsumerMessage{}
	for _, r := range e.cluster.ReadAll(t, e.results, total-nDead, wait) {
		id := turntest.HeaderMap(r)[consumer.HeaderRequestID]
		resultsByID[id] = append(resultsByID[id], r)
	}

	for i, c := range corpus {
		off := int64(2 * i)
		h, dead := deadByOffset[off]
		if c.dead == "" {
			require.False(t, dead, "%s: valid, so not dead-lettered: %v", c.name, h)
			require.Len(t, resultsByID[c.id], 1, "%s: served", c.name)
		} else {
			require.True(t, dead, "%s: dead-lettered", c.name)
			reason := h[consumer.HeaderReason]
			require.Contains(t, reason, c.dead, "%s", c.name)
			require.True(t, utf8.ValidString(reason) && len(reason) <= 4<<10+3, "%s: a readable reason: %.200q", c.name, reason)
		}
		require.Len(t, resultsByID[followers[i].ID], 1, "%s: the valid request after it is served", c.name)
	}
	base := int64(2 * len(corpus))
	require.Len(t, resultsByID[last.ID], 1)
	require.Contains(t, deadByOffset[base+1][consumer.HeaderReason], "belongs to another user", "the intruder")
	ownerResults := resultsByID[owner.ID] // the owner's, its replay and the copier's own
	require.Len(t, ownerResults, 3)
	var users []string
	for _, r := range ownerResults {
		res, err := turn.DecodeResult(r.Value)
		require.NoError(t, err)
		users = append(users, res.UserID)
		require.NotContains(t, res.Text, "show me the owner's history")
	}
	require.ElementsMatch(t, []string{"u-c-owned", "u-c-owned", "u-c-copier"}, users, "the copier is served as itself")
	texts, _ := e.history("c-owned")
	require.Equal(t, []string{"the owner's message"}, texts, "nothing of the intruder reached the owner's session")
	_, err := e.inbox.Get(context.Background(), turn.InboxKey(turn.DefaultApp, copied))
	require.NoError(t, err, "the copier has its own inbox entry")
}
