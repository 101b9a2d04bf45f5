package turn

import (
	"encoding/json"
	"slices"
	"strconv"
	"unicode/utf8"
)

// Encode returns the JSON envelope of res: the bytes json.Marshal makes of it, built without
// reflection. A Result whose CompletedAt json.Marshal refuses (a year outside 0 to 9999) gets
// json.Marshal's error.
func (res Result) Encode() ([]byte, error) {
	return res.appendJSON(make([]byte, 0, resultSizeHint(&res)))
}

// resultSizeHint is a capacity that holds the encoding of res unless its strings need
// escaping: the fields' bytes plus the names, quotes and the time.
func resultSizeHint(res *Result) int {
	n := 160 + len(res.RequestID) + len(res.ConversationID) + len(res.UserID) + len(res.Text) + len(res.ReplyTo)
	for k, v := range res.Metadata {
		n += len(k) + len(v) + 6
	}
	return n
}

// appendJSON appends the encoding json.Marshal makes of res to dst: the fields in the
// struct's order, omitempty as tagged, metadata keys sorted, strings escaped as encoding/json
// escapes them (HTML characters, U+2028 and U+2029 too; invalid UTF-8 as U+FFFD) and
// CompletedAt as time.Time's MarshalJSON writes it.
func (res *Result) appendJSON(dst []byte) ([]byte, error) {
	dst = append(dst, `{"schema":`...)
	dst = strconv.AppendInt(dst, int64(res.Schema), 10)
	dst = append(dst, `,"request_id":`...)
	dst = appendJSONString(dst, res.RequestID)
	dst = append(dst, `,"conversation_id":`...)
	dst = appendJSONString(dst, res.ConversationID)
	dst = append(dst, `,"user_id":`...)
	dst = appendJSONString(dst, res.UserID)
	if res.Sequence != 0 {
		dst = append(dst, `,"sequence":`...)
		dst = strconv.AppendInt(dst, res.Sequence, 10)
	}
	dst = append(dst, `,"text":`...)
	dst = appendJSONString(dst, res.Text)
	if res.ReplyTo != "" {
		dst = append(dst, `,"reply_to":`...)
		dst = appendJSONString(dst, res.ReplyTo)
	}
	if len(res.Metadata) > 0 {
		dst = append(dst, `,"metadata":`...)
		dst = appendJSONStringMap(dst, res.Metadata)
	}
	dst = append(dst, `,"events":`...)
	dst = strconv.AppendInt(dst, int64(res.Events), 10)
	dst = append(dst, `,"completed_at":"`...)
	var err error
	if dst, err = res.CompletedAt.AppendText(dst); err != nil {
		return json.Marshal(*res) // its error, in its words
	}
	return append(dst, `"}`...), nil
}

// appendJSONStringMap appends m as a JSON object with its keys in sorted order, as
// encoding/json writes a map[string]string.
func appendJSONStringMap(dst []byte, m map[string]string) []byte {
	var stack [16]string
	keys := stack[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, k)
		dst = append(dst, ':')
		dst = appendJSONString(dst, m[k])
	}
	return append(dst, '}')
}

// appendJSONString appends s as a JSON string, escaped byte for byte as encoding/json escapes
// it with its default HTML escaping: `"` and `\` with a backslash; \b, \f, \n, \r and \t by
// name; the other control characters and <, > and & as \u00XX; U+2028 and U+2029 as \u2028
// and \u2029; each byte of invalid UTF-8 as \ufffd.
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			if jsonSafe[b] {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case c == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case c == '\u2028' || c == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[c&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// jsonSafe holds true for the ASCII bytes encoding/json writes in a string as they are: all
// but the control characters, `"`, `\` and the HTML characters <, > and &.
var jsonSafe = func() (t [utf8.RuneSelf]bool) {
	for b := range t {
		t[b] = b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&'
	}
	return t
}()
