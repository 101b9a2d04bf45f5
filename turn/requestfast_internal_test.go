package turn

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/attachment"
)

// decodeSlow is Decode without its fast path.
func (d Decoder) decodeSlow(data []byte) (Request, error) {
	if err := precheck(d, data); err != nil {
		return Request{}, err
	}
	req, err := decodeFull(data)
	if err != nil {
		return Request{}, err
	}
	return d.validated(req)
}

// requireSameDecode checks that Decode and its slow path agree on data: the same Request or
// the same error.
func requireSameDecode(t *testing.T, data []byte) {
	t.Helper()
	want, wantErr := Decoder{}.decodeSlow(data)
	got, err := Decode(data)
	if wantErr != nil {
		require.Error(t, err, "the fast path accepted what the full decoder refuses: %q", data)
		require.Equal(t, wantErr.Error(), err.Error())
		require.Equal(t, wantErr, err)
		return
	}
	require.NoError(t, err, "%q", data)
	require.True(t, want.CreatedAt.Equal(got.CreatedAt))
	require.Equal(t, want, got)
}

const fastID = "6f1b7c1e-2d8f-4a53-9c1e-0f6f3a3c2b10"

// fastRef and fastRef2 are attachment ids.
const (
	fastRef  = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
	fastRef2 = "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
)

// commonEnvelopes are envelopes of the shapes decodeCommon reads or refuses, beside those
// that must fall back.
var commonEnvelopes = []string{
	`{"schema":1,"request_id":"` + fastID + `","conversation_id":"conv-0001","user_id":"u-conv-0001","text":"message 1"}`,
	`{"schema":1,"request_id":"` + fastID + `","conversation_id":"c-7731","user_id":"u-12","sequence":2,"text":"where is my refund?","reply_to":"email","metadata":{"trace_id":"t-1","tenant":"acme"},"created_at":"2026-11-30T05:00:00Z"}`,
	" \t\r\n{ \"schema\" : 1 ,\n\"request_id\":\"" + fastID + "\" , \"conversation_id\":\"c\",\"user_id\":\"u\",\"text\":\"hi\" } \n",
	`{"schema":1,"request_id":"` + fastID + `","conversation_id":"c","user_id":"u","text":"hi","metadata":{}}`,
	`{"schema":1,"request_id":"` + fastID + `","conversation_id":"c","user_id":"u","text":"é 世界 🙂"}`,
	`{"schema":1,"request_id":"` + fastID + `","conversation_id":"c","user_id":"u","text":"hi","created_at":"2026-11-30T05:00:00.123+01:00"}`,
	`{"schema":1,"request_id":"` + fastID + `","conversation_id":"c","user_id":"u","text":"see the log","attachments":[{"id":"` + fastRef + `","size":6291456,"name":"server.log","media_type":"text/plain; charset=utf-8"},{"media_type":"x","size":0,"id":"` + fastRef2 + `"}]}`,
	`{"schema":1,"request_id":"` + fastID + `","conversation_id":"c","user_id":"u","text":"hi","attachments":[]}`,
	`{"schema":1,"request_id":"` + fastID + `","conversation_id":"c","user_id":"u","text":"hi","attachments":[ { } ]}`,
	// refused by Validate, after either path
	`{}`,
	`{"schema":2,"request_id":"` + fastID + `","conversation_id":"c","user_id":"u","text":"hi"}`,
	`{"schema":1,"request_id":"` + strings.ToUpper(fastID) + `","conversation_id":"c","user_id":"u","text":"hi"}`,
	`{"schema":1,"request_id":"not-a-uuid","conversation_id":" c","user_id":"u","text":" "}`,
	`{"schema":0,"request_id":"","conversation_id":"","user_id":"","text":""}`,
	`{"schema":1,"request_id":"` + fastID + `","conversation_id":"c","user_id":"u","text":"hi","metadata":{"":"x"}}`,
	`{"schema":1,"request_id":"` + fastID + `","conversation_id":"c","user_id":"u","text":"hi","attachments":[{"id":"` + fastRef + `","size":1},{"id":"` + fastRef + `","size":1}]}`,
	`{"schema":1,"request_id":"` + fastID + `","conversation_id":"c","user_id":"u","text":"hi","attachments":[{"id":"sha256:abc","size":1}]}`,
	`{"schema":1,"request_id":"` + fastID + `","conversation_id":"c","user_id":"u","text":"hi","attachments":[{"id":"` + strings.ToUpper(fastRef) + `","size":1}]}`,
	`{"schema":1,"request_id":"` + fastID + `","conversation_id":"c","user_id":"u","text":"hi","attachments":[{"id":"` + fastRef + `","size":1,"name":"a\u0007"}]}`,
	// left to the full decoder
	`{"schema":1,"request_id":"` + fastID + `","conversation_id":"c","user_id":"u","text":"hi","attachments":[{"id":"` + fastRef + `","size":-1}]}`,
	`{"schema":1,"request_id":"` + fastID + `","conversation_id":"c","user_id":"u","text":"hi","attachments":[{"id":"` + fastRef + `","size":1.0}]}`,
	`{"schema":1,"request_id":"` + fastID + `","conversation_id":"c","user_id":"u","text":"hi","attachments":[{"id":"` + fastRef + `","size":"1"}]}`,
	`{"schema":1,"request_id":"` + fastID + `","conversation_id":"c","user_id":"u","text":"hi","attachments":[{"id":"` + fastRef + `","size":1,"ID":"x"}]}`,
	`{"schema":1,"request_id":"` + fastID + `","conversation_id":"c","user_id":"u","text":"hi","attachments":[{"id":"` + fastRef + `","size":1,"id":"` + fastRef2 + `"}]}`,
	`{"schema":1,"request_id":"` + fastID + `","conversation_id":"c","user_id":"u","text":"hi","attachments":[{"id":"` + fastRef + `","size":1,"sha":"x"}]}`,
	`{"schema":1,"request_id":"` + fastID + `","conversation_id":"c","user_id":"u","text":"hi","attachments":null}`,
	`{"schema":1,"request_id":"` + fastID + `","conversation_id":"c","user_id":"u","text":"hi","attachments":[null]}`,
	`{"schema":1,"request_id":"` + fastID + `","conversation_id":"c","user_id":"u","text":"hi","attachments":{}}`,
	`{"schema":1,"request_id":"` + fastID + `","conversation_id":"c","user_id":"u","text":"hi","attachments":[{"id":"` + fastRef + `","size":1},]}`,
	`{"schema":1,"request_id":"` + fastID + `","conversation_id":"c","user_id":"u","text":"hi","Attachments":[]}`,
	`{"schema":1,"request_id":"` + fastID + `","conversation_id":"c","user_id":"u","text":"h\u00e9"}`,
	`{"schema":1,"request_id":"` + fastID + `","conversation_id":"c","user_id":"u","text":"a\nb"}`,
	`{"schema":1,"request_id":"` + fastID + `","conversation_id":"c","user_id":"u","text":"hi","USER_ID":"v"}`,
	`{"schema":1,"request_id":"` + fastID + `","conversation_id":"c","user_id":"u","text":"hi","user_id":"v"}`,
	`{"schema":1,"request_id":"` + fastID + `","conversation_id":"c","user_id":"u","text":"hi","future":[1,{"a":null}]}`,
	`{"schema":1,"request_id":"` + fastID + `","conversation_id":"c","user_id":"u","text":"hi","metadata":{"a":"1","a":"2"}}`,
	`{"schema":1,"request_id":"` + fastID + `","conversation_id":"c","user_id":"u","text":"hi","metadata":{"a":1}}`,
	`{"schema":1,"request_id":"` + fastID + `","conversation_id":"c","user_id":"u","text":"hi","metadata":null}`,
	`{"schema":1.0,"request_id":"` + fastID + `","conversation_id":"c","user_id":"u","text":"hi"}`,
	`{"schema":1e0,"request_id":"` + fastID + `","conversation_id":"c","user_id":"u","text":"hi"}`,
	`{"schema":01,"request_id":"` + fastID + `","conversation_id":"c","user_id":"u","text":"hi"}`,
	`{"schema":"1","request_id":"` + fastID + `","conversation_id":"c","user_id":"u","text":"hi"}`,
	`{"schema":1,"request_id":"` + fastID + `","conversation_id":"c","user_id":"u","text":"hi","sequence":-1}`,
	`{"schema":1,"request_id":"` + fastID + `","conversation_id":"c","user_id":"u","text":"hi","sequence":99999999999999999999}`,
	`{"schema":1,"request_id":"` + fastID + `","conversation_id":"c","user_id":"u","text":"hi","sequence":9223372036854775807}`,
	`{"schema":12345678901,"request_id":"` + fastID + `","conversation_id":"c","user_id":"u","text":"hi"}`,
	`{"schema":1,"request_id":"` + fastID + `","conversation_id":"c","user_id":"u","text":null}`,
	`{"schema":1,"request_id":"` + fastID + `","conversation_id":"c","user_id":"u","text":"hi","created_at":"yesterday"}`,
	`{"schema":1,"request_id":"` + fastID + `","conversation_id":"c","user_id":"u","text":"hi","created_at":null}`,
	`{"schema":1,"request_id":"` + fastID + `","conversation_id":"c","user_id":"u","text":"hi"}x`,
	`{"schema":1,"request_id":"` + fastID + `","conversation_id":"c","user_id":"u","text":"hi"}{}`,
	`{"schema":1,"request_id":"` + fastID + `","conversation_id":"c","user_id":"u","text":"hi",}`,
	`{"schema":1,"request_id":"` + fastID + `","conversation_id":"c","user_id":"u","text":"hi"`,
	`{"schema":1 "request_id":"` + fastID + `"}`,
	"{\"schema\":1,\"text\":\"a\tb\"}",
	"\xef\xbb\xbf{}",
	`null`, ` null `, `[]`, `"x"`, `1`, `{`, `}`, `{"schema"}`, `{"schema":}`, `{"schema":1,}`, `{,}`,
}

func TestDecodeCommonAgreesWithTheFullDecoder(t *testing.T) {
	t.Parallel()
	for _, data := range commonEnvelopes {
		requireSameDecode(t, []byte(data))
	}
	var many strings.Builder
	for i := range MaxMetadataEntries + 1 {
		fmt.Fprintf(&many, `,"k%d":"v"`, i)
	}
	for _, n := range []int{MaxMetadataEntries, MaxMetadataEntries + 1} {
		meta := strings.Join(strings.Split(many.String(), ",")[1:n+1], ",")
		requireSameDecode(t, []byte(`{"schema":1,"request_id":"`+fastID+`","conversation_id":"c","user_id":"u","text":"hi","metadata":{`+meta+`}}`))
	}
	for _, n := range []int{MaxAttachments, MaxAttachments + 1} {
		refs := make([]string, n)
		for i := range refs {
			refs[i] = fmt.Sprintf(`{"id":"sha256:%064x","size":%d}`, i, i)
		}
		requireSameDecode(t, []byte(`{"schema":1,"request_id":"`+fastID+`","conversation_id":"c","user_id":"u","text":"hi","attachments":[`+strings.Join(refs, ",")+`]}`))
	}
}

// TestDecodeCommonReadsTheCommonShape checks that the envelopes a producer writes take the fast
// path, so that it is not silently always falling back.
func TestDecodeCommonReadsTheCommonShape(t *testing.T) {
	t.Parallel()
	for _, data := range commonEnvelopes[:9] {
		_, ok := decodeCommon([]byte(data))
		require.True(t, ok, data)
	}
	req, err := Request{ID: fastID, ConversationID: "c", UserID: "u", Text: "hi", Sequence: 3, ReplyTo: "r",
		Metadata: map[string]string{"a": "b"}}.Encode()
	require.NoError(t, err)
	got, ok := decodeCommon(req)
	require.True(t, ok)
	require.Equal(t, Request{Schema: 1, ID: fastID, ConversationID: "c", UserID: "u", Text: "hi", Sequence: 3, ReplyTo: "r",
		Metadata: map[string]string{"a": "b"}}, got)

	refs := []attachment.Ref{{ID: fastRef, Size: 6 << 20, Name: "server.log", MediaType: "text/plain; charset=utf-8"}, {ID: fastRef2}}
	req, err = Request{Schema: 1, ID: fastID, ConversationID: "c", UserID: "u", Text: "hi", Attachments: refs}.Encode()
	require.NoError(t, err)
	got, ok = decodeCommon(req)
	require.True(t, ok, "%s", req)
	require.Equal(t, refs, got.Attachments)
}

// FuzzDecodeCommon checks that Decode, with its fast path for the common envelope, returns
// what the full decoder returns for any value: the same Request or the same error. Its seeds
// run as ordinary tests; `go test -run '^$' -fuzz FuzzDecodeCommon ./turn` explores.
func FuzzDecodeCommon(f *testing.F) {
	for _, data := range commonEnvelopes {
		f.Add([]byte(data))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		requireSameDecode(t, data)
	})
}

// FuzzDecodeCommonFields is FuzzDecodeCommon on envelopes of the common shape with the
// fuzzer's text in their strings and numbers, unescaped, so that most take the fast path.
func FuzzDecodeCommonFields(f *testing.F) {
	f.Add("1", fastID, "c-1", "u-1", "2", "hello", "email", "k", "v", "2026-11-30T05:00:00Z", " ")
	f.Add("01", fastID, "c\x01", "u", "-0", "\\u00e9", "", "", "", "2026-11-30T05:00:00.5+01:00", "")
	f.Fuzz(func(t *testing.T, schema, id, conv, user, seq, text, replyTo, mk, mv, at, space string) {
		field := func(name, raw string) string { return space + `"` + name + `"` + space + ":" + space + raw + space }
		parts := []string{field("schema", schema), field("request_id", `"`+id+`"`), field("conversation_id", `"`+conv+`"`),
			field("user_id", `"`+user+`"`), field("text", `"`+text+`"`)}
		if seq != "" {
			parts = append(parts, field("sequence", seq))
		}
		if replyTo != "" {
			parts = append(parts, field("reply_to", `"`+replyTo+`"`))
		}
		if mk != "" || mv != "" {
			parts = append(parts, field("metadata", `{"`+mk+`":"`+mv+`"}`))
		}
		if at != "" {
			parts = append(parts, field("created_at", `"`+at+`"`))
		}
		requireSameDecode(t, []byte("{"+strings.Join(parts, ",")+"}"))
	})
}

// FuzzIDChecks checks that the quick checks of ids agree with the rule-by-rule ones: what
// canonicalUUID and printableASCII accept, checkRequestIDFully and checkIDFully accept, and
// checkRequestID and checkID return what those return.
func FuzzIDChecks(f *testing.F) {
	for _, v := range []string{fastID, strings.ToUpper(fastID), "00000000-0000-0000-0000-000000000000",
		"{" + fastID + "}", "urn:uuid:" + fastID, strings.ReplaceAll(fastID, "-", ""), "conv-0001", " c", "c ",
		"a\tb", "é", "a\x7fb", "\u0085", "", strings.Repeat("x", MaxIDBytes+1), "6f1b7c1e-2d8f-4a53-9c1e-0f6f3a3c2b1g"} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v string) {
		if canonicalUUID(v) {
			require.NoError(t, checkRequestIDFully(v))
		}
		require.Equal(t, checkRequestIDFully(v), checkRequestID(v))
		if len(v) <= MaxIDBytes && printableASCII(v) {
			require.NoError(t, checkIDFully("f", v, true))
		}
		for _, required := range []bool{true, false} {
			require.Equal(t, checkIDFully("f", v, required), checkID("f", v, required))
		}
	})
}
