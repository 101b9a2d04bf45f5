package turn_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/turn"
)

// FuzzReadersAgree checks that an envelope Decode accepts means the same to a lenient reader:
// encoding/json (v1), which matches names case-insensitively and keeps the last of duplicate
// names, must decode it without error to the same Request. Where the two could differ (a
// duplicate or case-variant name, issue 10's hole 4), Decode must refuse. Its seeds (f.Add and
// testdata/fuzz/FuzzReadersAgree) run as ordinary tests; `go test -run '^$' -fuzz
// FuzzReadersAgree ./turn` explores.
func FuzzReadersAgree(f *testing.F) {
	const base = `"schema":1,"request_id":"` + validID + `","conversation_id":"c","text":"hi"`
	f.Add(envelope(f, nil))
	f.Add([]byte(`{` + base + `,"user_id":"intruder","USER_ID":"owner"}`))
	f.Add([]byte(`{` + base + `,"user_id":"intruder","user_id":"owner"}`))
	f.Add([]byte(`{` + base + `,"user_id":"u","ſchema":2}`)) // U+017F folds to s in encoding/json
	f.Add([]byte(`{` + base + `,"user_id":"u","metadata":{"a":"1","A":"2"},"created_at":"2026-11-30T05:00:00.5+01:00"}`))
	f.Add([]byte(`{` + base + `,"user\u005fid":"u","x":[{"user_id":"v"}]}`))
	const ref = `{"id":"sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855","size":0`
	f.Add([]byte(`{` + base + `,"user_id":"u","attachments":[` + ref + `,"name":"a.log","media_type":"text/plain"}]}`))
	f.Add([]byte(`{` + base + `,"user_id":"u","attachments":[` + ref + `,"ID":"sha256:x"}]}`))
	f.Add([]byte(`{` + base + `,"user_id":"u","attachments":[` + ref + `,"Size":5}],"ATTACHMENTS":[]}`))
	f.Add([]byte(`{` + base + `,"user_id":"u","attachments":[` + ref + `,"size":1}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := turn.Decode(data)
		if err != nil {
			return
		}
		var lenient turn.Request
		require.NoError(t, json.Unmarshal(data, &lenient), "accepted by Decode, refused by encoding/json")
		if len(lenient.Metadata) == 0 {
			lenient.Metadata = nil
		}
		if len(lenient.Attachments) == 0 {
			lenient.Attachments = nil
		}
		require.True(t, req.CreatedAt.Equal(lenient.CreatedAt))
		req.CreatedAt, lenient.CreatedAt = time.Time{}, time.Time{}
		require.Equal(t, req, lenient, "two readers of one record disagree")
	})
}
