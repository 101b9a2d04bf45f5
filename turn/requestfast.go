package turn

import (
	"strings"
	"time"

	jsonv2 "github.com/go-json-experiment/json"

	"github.com/turnstile-go/turnstile/attachment"
)

// decodeCommon decodes the common shape of a request envelope without reflection: one JSON
// object of the envelope's own names, each at most once, whose strings have no escapes, whose
// numbers are plain integers, whose metadata is an object of such strings and whose
// attachments are objects of a reference's own names with such values. It reports false
// for anything else (an unknown or repeated name, an escape, null, a fraction, a syntax error,
// trailing data), which the full decoder then decodes and, where it must, refuses: for the
// values it accepts it yields what jsonv2.Unmarshal into a Request does. data is valid UTF-8
// (Decode checked it).
func decodeCommon(data []byte) (Request, bool) {
	var (
		req  Request
		seen uint16
		ids  [4][]byte // request_id, conversation_id, user_id, reply_to: one allocation for the four
	)
	s := scanner{data: data}
	if !s.consume('{') {
		return Request{}, false
	}
	if s.consume('}') {
		return req, s.end()
	}
	for {
		name, ok := s.plainString()
		if !ok || !s.consume(':') {
			return Request{}, false
		}
		bit, ok := fieldBit(name)
		if !ok || seen&bit != 0 {
			return Request{}, false // an unknown name (maybe a case variant) or a repeated one
		}
		seen |= bit
		switch bit {
		case bitSchema:
			n, ok := s.integer(9) // fits an int of 32 bits too
			if !ok {
				return Request{}, false
			}
			req.Schema = int(n)
		case bitSequence:
			if req.Sequence, ok = s.integer(18); !ok {
				return Request{}, false
			}
		case bitMetadata:
			if req.Metadata, ok = s.stringMap(); !ok {
				return Request{}, false
			}
		case bitAttachments:
			if req.Attachments, ok = s.refs(); !ok {
				return Request{}, false
			}
		case bitCreatedAt:
			raw, ok := s.rawString()
			var at time.Time
			if !ok || jsonv2.Unmarshal(raw, &at) != nil {
				return Request{}, false
			}
			req.CreatedAt = at
		case bitText:
			v, ok := s.plainString()
			if !ok {
				return Request{}, false
			}
			req.Text = string(v)
		default:
			if ids[idIndex(bit)], ok = s.plainString(); !ok {
				return Request{}, false
			}
		}
		if s.consume(',') {
			continue
		}
		if s.consume('}') {
			req.ID, req.ConversationID, req.UserID, req.ReplyTo = joinedStrings(ids)
			return req, s.end()
		}
		return Request{}, false
	}
}

// joinedStrings returns the strings of ids, sharing one allocation: the ids are small and live
// as long as one another (the text, which may be large, gets its own).
func joinedStrings(ids [4][]byte) (a, b, c, d string) {
	var sb strings.Builder
	sb.Grow(len(ids[0]) + len(ids[1]) + len(ids[2]) + len(ids[3]))
	for _, id := range ids {
		sb.Write(id)
	}
	all := sb.String()
	n0, n1, n2 := len(ids[0]), len(ids[0])+len(ids[1]), len(ids[0])+len(ids[1])+len(ids[2])
	return all[:n0], all[n0:n1], all[n1:n2], all[n2:]
}

// end reports whether only whitespace is left.
func (s *scanner) end() bool {
	s.space()
	return s.i == len(s.data)
}

// The envelope's names as bits of a set, for decodeCommon to find a repeated one.
const (
	bitSchema uint16 = 1 << iota
	bitRequestID
	bitConversationID
	bitUserID
	bitSequence
	bitText
	bitReplyTo
	bitMetadata
	bitCreatedAt
	bitAttachments
)

// fieldBit returns the bit of the envelope's name, matched exactly (case-sensitively, as
// jsonv2 matches).
func fieldBit(name []byte) (uint16, bool) {
	switch string(name) {
	case "schema":
		return bitSchema, true
	case "request_id":
		return bitRequestID, true
	case "conversation_id":
		return bitConversationID, true
	case "user_id":
		return bitUserID, true
	case "sequence":
		return bitSequence, true
	case "text":
		return bitText, true
	case "reply_to":
		return bitReplyTo, true
	case "metadata":
		return bitMetadata, true
	case "created_at":
		return bitCreatedAt, true
	case "attachments":
		return bitAttachments, true
	}
	return 0, false
}

// idIndex returns the index in decodeCommon's ids of the id field that bit names.
func idIndex(bit uint16) int {
	switch bit {
	case bitRequestID:
		return 0
	case bitConversationID:
		return 1
	case bitUserID:
		return 2
	}
	return 3 // bitReplyTo
}

// scanner reads JSON tokens from data at i.
type scanner struct {
	data []byte
	i    int
}

// space skips JSON whitespace (RFC 8259 section 2).
func (s *scanner) space() {
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// consume skips whitespace and then c, reporting whether c was there.
func (s *scanner) consume(c byte) bool {
	s.space()
	if s.i < len(s.data) && s.data[s.i] == c {
		s.i++
		return true
	}
	return false
}

// plainString reads a string without escapes or control characters and returns its content.
func (s *scanner) plainString() ([]byte, bool) {
	raw, ok := s.rawString()
	if !ok {
		return nil, false
	}
	return raw[1 : len(raw)-1], true
}

// rawString reads a string without escapes or control characters and returns it with its
// quotes.
func (s *scanner) rawString() ([]byte, bool) {
	if !s.consume('"') {
		return nil, false
	}
	start := s.i - 1
	for ; s.i < len(s.data); s.i++ {
		switch c := s.data[s.i]; {
		case c == '"':
			s.i++
			return s.data[start:s.i], true
		case c == '\\' || c < 0x20:
			return nil, false
		}
	}
	return nil, false
}

// integer reads a number written as an integer of at most maxDigits digits (at most 18, so
// that it fits an int64), without a sign, a leading zero, a fraction or an exponent.
func (s *scanner) integer(maxDigits int) (int64, bool) {
	s.space()
	start := s.i
	var n int64
	for ; s.i < len(s.data) && s.data[s.i] >= '0' && s.data[s.i] <= '9'; s.i++ {
		n = n*10 + int64(s.data[s.i]-'0')
	}
	digits := s.i - start
	switch {
	case digits == 0 || digits > maxDigits || (digits > 1 && s.data[start] == '0'):
		return 0, false
	case s.i < len(s.data) && (s.data[s.i] == '.' || s.data[s.i] == 'e' || s.data[s.i] == 'E'):
		return 0, false
	}
	return n, true
}

// stringMap reads an object of plain strings with no key twice.
func (s *scanner) stringMap() (map[string]string, bool) {
	if !s.consume('{') {
		return nil, false
	}
	m := map[string]string{}
	if s.consume('}') {
		return m, true
	}
	for len(m) <= MaxMetadataEntries { // past it, the full decoder says so
		k, ok := s.plainString()
		if !ok || !s.consume(':') {
			return nil, false
		}
		v, ok := s.plainString()
		if !ok {
			return nil, false
		}
		if _, dup := m[string(k)]; dup {
			return nil, false
		}
		m[string(k)] = string(v)
		if s.consume(',') {
			continue
		}
		return m, s.consume('}')
	}
	return nil, false
}

// refs reads an array of attachment references, each an object of a reference's own names at
// most once (id, name and media_type plain strings, size a plain integer), at most
// MaxAttachments of them (past it, the full decoder says so).
func (s *scanner) refs() ([]attachment.Ref, bool) {
	if !s.consume('[') {
		return nil, false
	}
	refs := []attachment.Ref{}
	if s.consume(']') {
		return refs, true
	}
	for len(refs) < MaxAttachments {
		r, ok := s.ref()
		if !ok {
			return nil, false
		}
		refs = append(refs, r)
		if s.consume(',') {
			continue
		}
		return refs, s.consume(']')
	}
	return nil, false
}

// ref reads one attachment reference of refs.
func (s *scanner) ref() (attachment.Ref, bool) {
	var (
		r    attachment.Ref
		seen uint8
	)
	if !s.consume('{') {
		return r, false
	}
	if s.consume('}') {
		return r, true
	}
	for {
		name, ok := s.plainString()
		if !ok || !s.consume(':') {
			return r, false
		}
		var (
			bit uint8
			dst *string // nil for size, the one number
		)
		switch string(name) {
		case "id":
			bit, dst = 1, &r.ID
		case "size":
			bit = 2
		case "name":
			bit, dst = 4, &r.Name
		case "media_type":
			bit, dst = 8, &r.MediaType
		default:
			return r, false // an unknown name (maybe a case variant)
		}
		if seen&bit != 0 {
			return r, false
		}
		seen |= bit
		if dst == nil {
			r.Size, ok = s.integer(18)
		} else {
			var v []byte
			v, ok = s.plainString()
			*dst = string(v)
		}
		if !ok {
			return r, false
		}
		if s.consume(',') {
			continue
		}
		return r, s.consume('}')
	}
}
