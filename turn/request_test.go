package turn_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/turn"
)

const validID = "6f1b7c1e-2d8f-4a53-9c1e-0f6f3a3c2b10"

// envelope returns a valid request as a JSON object, changed by edit.
func envelope(t testing.TB, edit func(m map[string]any)) []byte {
	t.Helper()
	m := map[string]any{
		"schema": 1, "request_id": validID, "conversation_id": "c-7731", "user_id": "u-12",
		"sequence": 2, "text": "where is my refund?", "reply_to": "email",
		"metadata": map[string]string{"trace_id": "t-1"}, "created_at": "2026-11-30T05:00:00Z",
	}
	if edit != nil {
		edit(m)
	}
	data, err := json.Marshal(m)
	require.NoError(t, err)
	return data
}

func TestDecodeValid(t *testing.T) {
	t.Parallel()
	req, err := turn.Decode(envelope(t, nil))
	require.NoError(t, err)
	require.Equal(t, turn.Request{
		Schema: 1, ID: validID, ConversationID: "c-7731", UserID: "u-12", Sequence: 2,
		Text: "where is my refund?", ReplyTo: "email", Metadata: map[string]string{"trace_id": "t-1"},
		CreatedAt: time.Date(2026, 11, 30, 5, 0, 0, 0, time.UTC),
	}, req)

	data, err := req.Encode()
	require.NoError(t, err)
	again, err := turn.Decode(data)
	require.NoError(t, err)
	require.Equal(t, req, again)

	_, err = turn.Decode(envelope(t, func(m map[string]any) { m["future_field"] = true }))
	require.NoError(t, err, "unknown fields are ignored")
}

func TestDecodeRejects(t *testing.T) {
	t.Parallel()
	set := func(k string, v any) func(map[string]any) { return func(m map[string]any) { m[k] = v } }
	del := func(k string) func(map[string]any) { return func(m map[string]any) { delete(m, k) } }
	cases := []struct {
		name    string
		data    []byte
		field   string
		problem string
	}{
		{"empty value", []byte{}, "", "empty value"},
		{"truncated JSON", []byte(`{"schema":1,`), "", "not JSON: unexpected end of JSON input, after 12 bytes"},
		{"trailing garbage", append(envelope(t, nil), []byte(`{}`)...), "", "not JSON: invalid character '{' after top-level value"},
		{"not an object", []byte(`["a"]`), "", "value is an array, not a JSON object"},
		{"null", []byte(`null`), "", "value is null, not a JSON object"},
		{"byte order mark", []byte("\xef\xbb\xbf{}"), "", "not JSON: the value starts with a byte order mark"},
		{"invalid UTF-8", []byte("{\"text\":\"\xff\"}"), "", "not valid UTF-8"},
		{"missing schema", envelope(t, del("schema")), "schema", "missing"},
		{"unknown schema version", envelope(t, set("schema", 2)), "schema", "unknown version 2"},
		{"schema as string", envelope(t, set("schema", "1")), "schema", "wrong JSON type: a string, want an integer that fits 64 bits"},
		{"missing request id", envelope(t, del("request_id")), "request_id", "missing"},
		{"non-UUID request id", envelope(t, set("request_id", "req-1")), "request_id", "not a UUID"},
		{"nil UUID request id", envelope(t, set("request_id", "00000000-0000-0000-0000-000000000000")), "request_id", "nil UUID"},
		{"empty conversation id", envelope(t, set("conversation_id", "")), "conversation_id", "missing"},
		{"conversation id too long", envelope(t, set("conversation_id", strings.Repeat("c", 257))), "conversation_id", "over the limit of 256"},
		{"conversation id with newline", envelope(t, set("conversation_id", "c-1\nx")), "conversation_id", "control character"},
		{"conversation id padded", envelope(t, set("conversation_id", " c-1")), "conversation_id", "leading or trailing space"},
		{"missing user id", envelope(t, del("user_id")), "user_id", "missing"},
		{"negative sequence", envelope(t, set("sequence", -1)), "sequence", "negative"},
		{"fractional sequence", envelope(t, set("sequence", 1.5)), "sequence", "wrong JSON type: the number 1.5, want an integer that fits 64 bits"},
		{"empty text", envelope(t, set("text", "  ")), "text", "empty"},
		{"NUL in text", envelope(t, set("text", "a\x00b")), "text", "contains NUL"},
		{"text over the limit", envelope(t, set("text", strings.Repeat("x", turn.DefaultMaxTextBytes+1))), "text", "over the limit of 1048576"},
		{"bad created_at", envelope(t, set("created_at", "yesterday")), "created_at", "not an RFC 3339 time"},
		{"metadata empty key", envelope(t, set("metadata", map[string]string{"": "v"})), "metadata", "non-empty"},
		{"metadata not strings", envelope(t, set("metadata", map[string]int{"a": 1})), "metadata", "wrong JSON type at /metadata/a: a number, want a string"},
		{"huge value", append([]byte(`{"pad":"`+strings.Repeat("p", 2<<20)), []byte(`"}`)...), "", "over the limit"},
	}
	require.GreaterOrEqual(t, len(cases), 15)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := turn.Decode(tc.data)
			require.Error(t, err)
			var de *turn.DecodeError
			require.True(t, errors.As(err, &de), "want a *DecodeError, got %T: %v", err, err)
			require.Equal(t, tc.field, de.Field, "%v", err)
			require.Contains(t, err.Error(), tc.problem)
			require.Equal(t, turn.KindPermanent, turn.Classify(err))
		})
	}
}

// TestDecodeErrorsInWords checks that a record that is not JSON, or lacks fields, is described
// as its producer would put it (issue 23): "not JSON" with encoding/json's words and the byte
// at fault, not jsontext's "invalid character 'o' in literal null"; and every missing field,
// not the first only. The *DecodeError, its Unwrap and its Kind stay as they were.
func TestDecodeErrorsInWords(t *testing.T) {
	t.Parallel()
	_, err := turn.Decode([]byte("{not json"))
	require.EqualError(t, err, "turn: bad request: not JSON: invalid character 'n' looking for beginning of object key string, at byte 2 of 9")
	var de *turn.DecodeError
	require.ErrorAs(t, err, &de)
	require.Equal(t, "", de.Field)
	var syn *json.SyntaxError
	require.ErrorAs(t, err, &syn, "the cause is encoding/json's syntax error")
	require.Equal(t, int64(2), syn.Offset)
	require.Equal(t, turn.KindPermanent, turn.Classify(err))

	_, err = turn.Decode([]byte(`{"schema":1,"conversation_id":"c-1"}`))
	require.EqualError(t, err, "turn: bad request: missing fields request_id, user_id, text")
	require.ErrorAs(t, err, &de)
	require.Equal(t, []string{"request_id", "user_id", "text"}, de.Missing)
	require.Equal(t, "request_id", de.Field, "Field is the first missing one")
	require.Equal(t, turn.KindPermanent, turn.Classify(err))

	_, err = turn.Decode([]byte(`{}`))
	require.EqualError(t, err, "turn: bad request: missing fields schema, request_id, conversation_id, user_id, text")

	_, err = turn.Decode(envelope(t, func(m map[string]any) { delete(m, "user_id") }))
	require.EqualError(t, err, "turn: bad request: user_id: missing", "one missing field reads as before")
	require.ErrorAs(t, err, &de)
	require.Equal(t, []string{"user_id"}, de.Missing)

	err = turn.Decoder{}.Validate(turn.Request{Schema: 1, ID: validID, ConversationID: "c-1"})
	require.EqualError(t, err, "turn: bad request: missing fields user_id, text", "Validate names them all too")
}

func TestDecoderMaxText(t *testing.T) {
	t.Parallel()
	d := turn.Decoder{MaxTextBytes: 10}
	_, err := d.Decode(envelope(t, func(m map[string]any) { m["text"] = "0123456789" }))
	require.NoError(t, err)
	_, err = d.Decode(envelope(t, func(m map[string]any) { m["text"] = "0123456789a" }))
	require.ErrorContains(t, err, "text: 11 bytes, over the limit of 10")
}

func TestDecodeResult(t *testing.T) {
	t.Parallel()
	_, err := turn.DecodeResult([]byte(`{"schema":9,"request_id":"x"}`))
	require.ErrorContains(t, err, "schema version 9")
	_, err = turn.DecodeResult([]byte(`{"schema":1}`))
	require.ErrorContains(t, err, "missing request_id")
	_, err = turn.DecodeResult([]byte(`nope`))
	require.ErrorContains(t, err, "bad result")
}

// FuzzDecode checks that no input makes Decode panic, that every failure is a *DecodeError,
// and that what it accepts survives Encode and Decode unchanged. Its seeds (f.Add and
// testdata/fuzz/FuzzDecode) run as ordinary tests; `go test -fuzz FuzzDecode ./turn` explores.
func FuzzDecode(f *testing.F) {
	f.Add(envelope(f, nil))
	f.Add(envelope(f, func(m map[string]any) { delete(m, "metadata"); m["sequence"] = 0 }))
	f.Add([]byte(`{"schema":1,"request_id":"` + validID + `","conversation_id":"c","user_id":"u","text":"\u00e9"}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Add([]byte("{\"text\":\"\xc3\"}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := turn.Decode(data)
		if err != nil {
			var de *turn.DecodeError
			require.ErrorAs(t, err, &de)
			return
		}
		out, err := req.Encode()
		require.NoError(t, err)
		again, err := turn.Decode(out)
		require.NoError(t, err)
		require.True(t, req.CreatedAt.Equal(again.CreatedAt))
		req.CreatedAt, again.CreatedAt = time.Time{}, time.Time{}
		require.Equal(t, req, again)
	})
}
