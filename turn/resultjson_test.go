package turn_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/turn"
)

// TestResultEncodeIsJSONMarshal checks Result.Encode against json.Marshal byte for byte, on
// the fields' edge cases: omitted optional fields, escapes, invalid UTF-8, sorted metadata.
func TestResultEncodeIsJSONMarshal(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 2, 18, 30, 0, 123456000, time.UTC)
	for name, res := range map[string]turn.Result{
		"zero":    {},
		"minimal": {Schema: 1, RequestID: validID, ConversationID: "c", UserID: "u", Text: "ok", Events: 2, CompletedAt: at},
		"full": {Schema: 1, RequestID: validID, ConversationID: "c-7731", UserID: "u-12", Sequence: 42, Text: "ok",
			ReplyTo: "email", Metadata: map[string]string{"z": "1", "a": "2", "m": "", "é": "3", "A": "4"}, Events: 3,
			CompletedAt: at, Replayed: true, Attempt: 2},
		"escapes": {Schema: 1, Text: "\"quoted\" \\ back\b\f\n\r\t\x00\x01\x1f\x7f <a href=\"x\">&amp;</a>",
			ConversationID: "\u2028\u2029", UserID: "ünï 世界 🙂", ReplyTo: "\xff\xfe bad \xc3 utf-8 \xed\xa0\x80",
			Metadata: map[string]string{"<k>": "&v\n", "\xff": "\u2028"}},
		"negative":    {Schema: -1, Sequence: -7, Events: -3},
		"empty map":   {Metadata: map[string]string{}},
		"many keys":   {Metadata: manyKeys(40)},
		"local time":  {CompletedAt: time.Date(2026, 1, 2, 3, 4, 5, 6, time.FixedZone("X", 5*3600+30*60))},
		"year 9999":   {CompletedAt: time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)},
		"year 0":      {CompletedAt: time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC)},
		"nanoseconds": {CompletedAt: time.Date(2026, 1, 2, 3, 4, 5, 100, time.UTC)},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			want, err := json.Marshal(res)
			require.NoError(t, err)
			got, err := res.Encode()
			require.NoError(t, err)
			require.Equal(t, string(want), string(got))
		})
	}
}

// TestResultEncodeRefusesWhatJSONMarshalRefuses checks that a CompletedAt json.Marshal cannot
// encode fails Encode with json.Marshal's error.
func TestResultEncodeRefusesWhatJSONMarshalRefuses(t *testing.T) {
	t.Parallel()
	for _, at := range []time.Time{
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC),
	} {
		res := turn.Result{Schema: 1, RequestID: validID, CompletedAt: at}
		_, want := json.Marshal(res)
		require.Error(t, want)
		got, err := res.Encode()
		require.Nil(t, got)
		require.EqualError(t, err, want.Error())
	}
}

func manyKeys(n int) map[string]string {
	m := make(map[string]string, n)
	for i := range n {
		m[string(rune('a'+i%26))+string(rune('0'+i/26))] = "v"
	}
	return m
}

// FuzzEncodeResult checks that Result.Encode writes the bytes json.Marshal writes, for any
// strings, numbers, metadata and time, and that encoding/json decodes them back to the Result
// (with the strings made valid UTF-8 as encoding/json makes them). `go test -run '^$' -fuzz
// FuzzEncodeResult ./turn` explores.
func FuzzEncodeResult(f *testing.F) {
	f.Add(1, validID, "c-1", "u-1", int64(0), "ok: hi", "", "", "", 2, int64(1764700000), 123456000, 0)
	f.Add(1, "<&>", "\u2028", "\x00\x1f\"\\", int64(-5), "\xff\xc3", "email", "k\n", "\xed\xa0\x80", -1, int64(-62135596800), 0, 3600)
	f.Add(0, "", "", "", int64(1<<62), "", "", "", "", 0, int64(253402300799), 999999999, -45000)
	f.Fuzz(func(t *testing.T, schema int, id, conv, user string, seq int64, text, replyTo, mk, mv string, events int, sec int64, nsec, offset int) {
		zone := time.FixedZone("", offset%(24*60)*60) // RFC 3339 offsets are whole minutes
		res := turn.Result{Schema: schema, RequestID: id, ConversationID: conv, UserID: user, Sequence: seq, Text: text,
			ReplyTo: replyTo, Events: events, CompletedAt: time.Unix(sec, int64(nsec)).In(zone)}
		if mk != "" || mv != "" {
			res.Metadata = map[string]string{mk: mv, mv + "x": mk}
		}
		want, wantErr := json.Marshal(res)
		got, err := res.Encode()
		if wantErr != nil {
			require.EqualError(t, err, wantErr.Error())
			return
		}
		require.NoError(t, err)
		require.Equal(t, string(want), string(got))
		var back turn.Result
		require.NoError(t, json.Unmarshal(got, &back))
		require.True(t, back.CompletedAt.Equal(res.CompletedAt))
		wantBack := res
		wantBack.RequestID, wantBack.ConversationID, wantBack.UserID = validUTF8(id), validUTF8(conv), validUTF8(user)
		wantBack.Text, wantBack.ReplyTo = validUTF8(text), validUTF8(replyTo)
		if res.Metadata != nil {
			wantBack.Metadata = map[string]string{}
			for k, v := range res.Metadata {
				wantBack.Metadata[validUTF8(k)] = validUTF8(v)
			}
			if len(wantBack.Metadata) < len(res.Metadata) { // two keys that became one: either value
				return
			}
		}
		back.CompletedAt, wantBack.CompletedAt = time.Time{}, time.Time{}
		require.Equal(t, wantBack, back)
	})
}

// validUTF8 is s as encoding/json decodes its encoding: each byte of invalid UTF-8 is U+FFFD.
func validUTF8(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}
