package turn

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/google/uuid"

	"github.com/turnstile-go/turnstile/attachment"
)

// SchemaVersion is the version of the Request and Result JSON envelopes this package writes
// and the only one it reads. A record with another version is dead-lettered, not guessed at.
const SchemaVersion = 1

// Limits Decode applies. DefaultMaxTextBytes can be changed per Decoder; the others are fixed
// so that an envelope's size stays bounded whatever the producer does.
const (
	// DefaultMaxTextBytes is the default limit on Request.Text: 1 MiB.
	DefaultMaxTextBytes = 1 << 20
	// MaxIDBytes bounds the conversation, user and reply-to ids: 256 bytes each.
	MaxIDBytes = 256
	// MaxMetadataEntries bounds the number of Request.Metadata entries.
	MaxMetadataEntries = 64
	// MaxMetadataValueBytes bounds each metadata key and value: 4 KiB.
	MaxMetadataValueBytes = 4 << 10
	// MaxAttachments bounds the number of Request.Attachments.
	MaxAttachments = 64
	// maxRefJSONBytes bounds the JSON of one valid attachment reference, its strings escaped
	// character by character (\u0041) included, for precheck's bound on the whole value.
	maxRefJSONBytes = 4 << 10
)

// Request is the input envelope: one user message to a conversation, as JSON in the value of a
// Kafka record whose key is the conversation id.
//
//	{"schema":1,"request_id":"0b9c...","conversation_id":"c-7731","user_id":"u-12",
//	 "sequence":2,"text":"where is my refund?","reply_to":"email",
//	 "metadata":{"trace_id":"..."},"created_at":"2026-11-30T05:00:00Z"}
type Request struct {
	// Schema is the envelope version; it must be SchemaVersion.
	Schema int `json:"schema"`
	// ID is the request id, a UUID (any version but nil) in its canonical text form, 36
	// characters of lower-case hex and hyphens (RFC 9562 section 4); other spellings of a UUID
	// are refused, so that one request cannot pass the inbox twice under two spellings. It is
	// the dedup key of the inbox and the root of the turn's tool idempotency keys.
	ID string `json:"request_id"`
	// ConversationID is the conversation (and session) id; it must equal the record key.
	ConversationID string `json:"conversation_id"`
	// UserID is the user the conversation belongs to (G7).
	UserID string `json:"user_id"`
	// Sequence is the request's 1-based position in its conversation when the producer keeps
	// one; 0 means none, and record order applies.
	Sequence int64 `json:"sequence,omitempty"`
	// Text is the user's message, valid UTF-8, at most the Decoder's MaxTextBytes. A larger
	// body travels as an attachment (see Attachments and Offload).
	Text string `json:"text"`
	// Attachments are references to large inputs in the Runner's attachment store
	// (Runner.Attachments), put there by the producer under (App, UserID) (Offload does it):
	// at most MaxAttachments, each valid (attachment.Ref.Validate), no id twice. The Runner
	// dead-letters a request whose attachment the store does not hold; turn/agent tells the
	// model about them and gives it a tool that reads them in pages.
	Attachments []attachment.Ref `json:"attachments,omitempty"`
	// ReplyTo is an optional hint for where the answer should go ("email", a topic, ...).
	ReplyTo string `json:"reply_to,omitempty"`
	// Metadata carries stable context such as trace id, tenant and policy version.
	Metadata map[string]string `json:"metadata,omitempty"`
	// CreatedAt is when the producer made the request; optional.
	CreatedAt time.Time `json:"created_at,omitzero"`

	// Source locates the record the request came in; the consumer sets it. It is not part of
	// the JSON envelope.
	Source Source `json:"-"`
	// Headers are the headers of the record the request came in, name to value (a name that
	// repeats keeps its last value); nil when the record has none. The consumer sets them, so
	// a model sees a producer's traceparent or tenant in Input.Request.Headers; in Temporal
	// mode they are the headers the bridge carries (workflow.BridgeOptions.Headers). They are
	// not part of the JSON envelope; treat them as read-only.
	Headers map[string]string `json:"-"`
}

// Source is where a request was read: the record's topic, partition and own offset.
type Source struct {
	Topic     string
	Partition int32
	Offset    int64
}

// Result is the output envelope: the answer to one request, as JSON in the value of a record
// on the results topic, keyed by the conversation id. A Result is a function of the request and
// of its turn as stored in the session, so every worker that produces it for a request id
// produces the same bytes.
type Result struct {
	// Schema is the envelope version, SchemaVersion.
	Schema         int    `json:"schema"`
	RequestID      string `json:"request_id"`
	ConversationID string `json:"conversation_id"`
	UserID         string `json:"user_id"`
	Sequence       int64  `json:"sequence,omitempty"`
	// Text is the final answer: the text of the turn's last event.
	Text    string `json:"text"`
	ReplyTo string `json:"reply_to,omitempty"`
	// Metadata is the request's metadata, carried through.
	Metadata map[string]string `json:"metadata,omitempty"`
	// Events counts the events the turn added to the session, the user's message included.
	Events int `json:"events"`
	// CompletedAt is the time of the turn's last event.
	CompletedAt time.Time `json:"completed_at"`

	// Replayed is true when the result came from the inbox (the request was done before)
	// rather than from running the turn. It is not part of the JSON envelope.
	Replayed bool `json:"-"`
	// Attempt is the attempt count of the inbox when this Run produced or replayed the result
	// (the results' "attempt" header). It is not part of the JSON envelope.
	Attempt int `json:"-"`
}

// DecodeError says which field of an envelope is wrong and why.
type DecodeError struct {
	// Field is the JSON field name, or "" when the whole value is at fault. When several
	// required fields are missing it is the first of Missing.
	Field string
	// Problem says what is wrong, in words, with the limit when one applies: "missing",
	// "missing fields schema, user_id, text", "not JSON", "wrong JSON type: the string "1",
	// want an integer that fits 64 bits".
	Problem string
	// Missing lists the required fields absent (or empty) from the envelope, in the
	// envelope's order, when that is the problem; nil otherwise.
	Missing []string
	// Err is the underlying error, if any.
	Err error
}

// Error formats "turn: bad request: FIELD: PROBLEM[: cause]", without "FIELD: " when the whole
// value is at fault or several fields are missing (Problem names them):
//
//	turn: bad request: not JSON: invalid character 'n' looking for beginning of object key string, at byte 2 of 9
//	turn: bad request: missing fields request_id, user_id, text
func (e *DecodeError) Error() string {
	msg := "turn: bad request"
	if e.Field != "" && len(e.Missing) <= 1 {
		msg += ": " + e.Field
	}
	msg += ": " + e.Problem
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the underlying error, if any: the *json.SyntaxError (encoding/json) of a value
// that is not JSON, jsontext.ErrDuplicateName, a uuid parse error, a time parse error.
func (e *DecodeError) Unwrap() error { return e.Err }

// Decoder decodes and validates request envelopes. The zero value uses the defaults.
type Decoder struct {
	// MaxTextBytes limits Request.Text in bytes; 0 means DefaultMaxTextBytes.
	MaxTextBytes int
}

// Decode decodes one request with the default Decoder.
func Decode(data []byte) (Request, error) { return Decoder{}.Decode(data) }

// Decode parses data as a Request envelope and validates it. Every failure is a *DecodeError
// naming the field and the problem; no input makes it panic. Unknown fields are ignored, so a
// producer may add fields without a schema bump; a changed meaning needs a new Schema.
//
// Decoding is strict where a lenient reader would let two readers of one record disagree
// (G7): a name that appears twice in an object (RFC 8259 section 4 leaves duplicates to the
// reader; Go's encoding/json keeps the last, many others the first) and a name that differs
// from one of the envelope's only in case ("USER_ID", which encoding/json would take for
// "user_id") are errors, as are invalid UTF-8 and trailing data. It follows the semantics of
// encoding/json/v2 (github.com/go-json-experiment/json, whose defaults reject duplicate names
// and match names case-sensitively), plus the case-variant check. (The common shape of an
// envelope, its own names with plain strings and integers, is read by a small scanner of this
// package instead, for speed; what it reads, it reads as encoding/json/v2 does.)
func (d Decoder) Decode(data []byte) (Request, error) {
	if err := precheck(d, data); err != nil {
		return Request{}, err
	}
	req, ok := decodeCommon(data)
	if !ok {
		var err error
		if req, err = decodeFull(data); err != nil {
			return Request{}, err
		}
	}
	return d.validated(req)
}

// precheck refuses data as a whole before any parsing: empty, not UTF-8, or too large for d.
func precheck(d Decoder, data []byte) error {
	if len(data) == 0 {
		return &DecodeError{Problem: "empty value"}
	}
	if !utf8.Valid(data) {
		// Checked first so that the whole value is named, not the first bad string.
		return &DecodeError{Problem: "value is not valid UTF-8"}
	}
	if limit := d.maxText() + 64<<10 + MaxMetadataEntries*2*MaxMetadataValueBytes + MaxAttachments*maxRefJSONBytes; len(data) > limit {
		return &DecodeError{Problem: fmt.Sprintf("value is %d bytes, over the limit of %d", len(data), limit)}
	}
	return nil
}

// decodeFull is the decoder of any envelope, for the values decodeCommon leaves to it: it
// returns the Request of data before validation, or the *DecodeError of its JSON.
func decodeFull(data []byte) (Request, error) {
	var w wireRequest
	if err := jsonv2.Unmarshal(data, &w); err != nil {
		return Request{}, decodeError(data, err)
	}
	if string(bytes.TrimSpace(data)) == "null" { // jsonv2 leaves the struct as it was
		return Request{}, &DecodeError{Problem: "value is null, not a JSON object"}
	}
	for _, name := range slices.Sorted(maps.Keys(w.Unknown)) { // sorted: one error whatever the map's order
		if known, ok := caseVariant(requestNames, name); ok {
			return Request{}, &DecodeError{Field: name, Problem: fmt.Sprintf("differs from the envelope's %q only in case", known)}
		}
	}
	req := w.Request
	if w.Attachments != nil {
		req.Attachments = make([]attachment.Ref, len(w.Attachments))
	}
	for i, r := range w.Attachments {
		for _, name := range slices.Sorted(maps.Keys(r.Unknown)) {
			if known, ok := caseVariant(refNames, name); ok {
				return Request{}, &DecodeError{Field: "attachments", Problem: fmt.Sprintf("entry %d: name %.80q differs from %q only in case", i, name, known)}
			}
		}
		req.Attachments[i] = r.Ref
	}
	return req, nil
}

// validated returns req, decoded, when it passes Validate, with empty metadata made nil.
func (d Decoder) validated(req Request) (Request, error) {
	if err := d.Validate(req); err != nil {
		return Request{}, err
	}
	if len(req.Metadata) == 0 {
		req.Metadata = nil // {} and absent mean the same
	}
	if len(req.Attachments) == 0 {
		req.Attachments = nil // [] and absent mean the same
	}
	return req, nil
}

// wireRequest is what Decode unmarshals: the envelope, and the names it does not know, which
// are kept only to find case variants of the names it does. Its Attachments, shallower, stand
// in for Request's.
type wireRequest struct {
	Request
	Attachments []wireRef                 `json:"attachments"`
	Unknown     map[string]jsontext.Value `json:",embed"`
}

// wireRef is an attachment reference as Decode unmarshals it: the Ref, and the names it does
// not know, kept to find case variants of its own (encoding/json would take "ID" for "id").
type wireRef struct {
	attachment.Ref
	Unknown map[string]jsontext.Value `json:",embed"`
}

// requestNames are the JSON names of the Request envelope.
var requestNames = []string{"schema", "request_id", "conversation_id", "user_id", "sequence", "text",
	"attachments", "reply_to", "metadata", "created_at"}

// refNames are the JSON names of an attachment reference (attachment.Ref).
var refNames = []string{"id", "size", "name", "media_type"}

// caseVariant returns the name of names that name equals but for case, if there is one.
func caseVariant(names []string, name string) (string, bool) {
	for _, known := range names {
		if strings.EqualFold(name, known) {
			return known, true
		}
	}
	return "", false
}

// decodeError turns an error of jsonv2.Unmarshal of data into a *DecodeError naming the field,
// taken from the error's JSON pointer (RFC 6901): its first token is the envelope's field.
func decodeError(data []byte, err error) *DecodeError {
	var (
		semErr *jsonv2.SemanticError
		synErr *jsontext.SyntacticError
		ptr    jsontext.Pointer
	)
	switch {
	case errors.As(err, &semErr):
		ptr = semErr.JSONPointer
	case errors.As(err, &synErr):
		ptr = synErr.JSONPointer
	}
	field := ""
	for tok := range ptr.Tokens() {
		field = tok
		break
	}
	if len(field) > 64 {
		field = strings.ToValidUTF8(field[:64], "") + "…"
	}
	switch {
	case errors.Is(err, jsontext.ErrDuplicateName):
		return &DecodeError{Field: field, Problem: fmt.Sprintf("duplicate name %.80q", ptr.LastToken()), Err: err}
	case synErr != nil:
		return notJSON(data, err)
	case semErr != nil && field == "":
		return &DecodeError{Problem: fmt.Sprintf("value is %s, not a JSON object", jsonKind(semErr.JSONKind, nil))}
	case semErr != nil && semErr.GoType == reflect.TypeFor[time.Time]():
		return &DecodeError{Field: field, Problem: "not an RFC 3339 time", Err: err}
	case semErr != nil && semErr.GoType != nil:
		at := ""
		if p := string(ptr); p != "/"+field {
			at = fmt.Sprintf(" at %.80s", p)
		}
		return &DecodeError{Field: field, Problem: fmt.Sprintf("wrong JSON type%s: %s, want %s",
			at, jsonKind(semErr.JSONKind, semErr.JSONValue), jsonWant(semErr.GoType))}
	}
	return notJSON(data, err)
}

// notJSON is the *DecodeError of a value that is not JSON text (RFC 8259), in the words of
// encoding/json's scanner ("invalid character 'n' looking for beginning of object key string")
// and the 1-based position of the byte at fault. encoding/json/v2's own words describe what it
// was parsing when it stopped ("invalid character 'o' in literal null" for {not json), which
// reads as nonsense to the person who wrote the record; its error is kept only where the old
// scanner accepts the text (a lone surrogate escape, which encoding/json replaces).
func notJSON(data []byte, v2err error) *DecodeError {
	if bytes.HasPrefix(data, []byte("\xef\xbb\xbf")) {
		return &DecodeError{Problem: "not JSON: the value starts with a byte order mark (U+FEFF), which JSON text must not (RFC 8259 section 8.1)"}
	}
	var raw json.RawMessage
	var synErr *json.SyntaxError
	if errors.As(json.Unmarshal(data, &raw), &synErr) {
		if synErr.Offset >= int64(len(data)) {
			return &DecodeError{Problem: "not JSON", Err: fmt.Errorf("%w, after %d bytes", synErr, len(data))}
		}
		return &DecodeError{Problem: "not JSON", Err: fmt.Errorf("%w, at byte %d of %d", synErr, synErr.Offset, len(data))}
	}
	return &DecodeError{Problem: "not JSON", Err: v2err}
}

// jsonKind names a JSON value of kind k in words, with value when it is a short number or
// string ("the number 1.5", "a string").
func jsonKind(k jsontext.Kind, value jsontext.Value) string {
	switch k {
	case 'n':
		return "null"
	case 't', 'f':
		return "a boolean"
	case '"':
		if len(value) > 0 && len(value) <= 40 {
			return "the string " + string(value)
		}
		return "a string"
	case '0':
		if len(value) > 0 && len(value) <= 40 {
			return "the number " + string(value)
		}
		return "a number"
	case '{':
		return "an object"
	case '[':
		return "an array"
	}
	return "a JSON value of another kind"
}

// jsonWant says in JSON's words what a field of Go type t holds.
func jsonWant(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return fmt.Sprintf("an integer that fits %d bits", t.Bits())
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Map:
		return "an object of " + strings.TrimPrefix(strings.TrimPrefix(jsonWant(t.Elem()), "a "), "an ") + "s"
	case reflect.Struct:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return t.String()
}

// Validate checks a Request built in code against the rules Decode applies, returning a
// *DecodeError for the first broken one; when required fields are missing it names every one
// of them (DecodeError.Missing), so that a producer learns of them all at once.
func (d Decoder) Validate(req Request) error {
	var missing []string
	for _, f := range []struct {
		name    string
		missing bool
	}{
		{"schema", req.Schema == 0}, {"request_id", req.ID == ""}, {"conversation_id", req.ConversationID == ""},
		{"user_id", req.UserID == ""}, {"text", req.Text == ""},
	} {
		if f.missing {
			missing = append(missing, f.name)
		}
	}
	switch {
	case len(missing) == 1:
		return &DecodeError{Field: missing[0], Problem: "missing", Missing: missing}
	case len(missing) > 1:
		return &DecodeError{Field: missing[0], Problem: "missing fields " + strings.Join(missing, ", "), Missing: missing}
	}
	if req.Schema != SchemaVersion {
		return &DecodeError{Field: "schema", Problem: fmt.Sprintf("unknown version %d, this reader knows %d", req.Schema, SchemaVersion)}
	}
	if err := checkRequestID(req.ID); err != nil {
		return err
	}
	if err := checkID("conversation_id", req.ConversationID, true); err != nil {
		return err
	}
	if err := checkID("user_id", req.UserID, true); err != nil {
		return err
	}
	if err := checkID("reply_to", req.ReplyTo, false); err != nil {
		return err
	}
	if req.Sequence < 0 {
		return &DecodeError{Field: "sequence", Problem: fmt.Sprintf("negative (%d); use 0 for none, else 1-based", req.Sequence)}
	}
	switch {
	case strings.TrimSpace(req.Text) == "":
		return &DecodeError{Field: "text", Problem: "empty"}
	case len(req.Text) > d.maxText():
		return &DecodeError{Field: "text", Problem: fmt.Sprintf("%d bytes, over the limit of %d", len(req.Text), d.maxText())}
	case !utf8.ValidString(req.Text):
		return &DecodeError{Field: "text", Problem: "not valid UTF-8"}
	case strings.ContainsRune(req.Text, 0):
		return &DecodeError{Field: "text", Problem: "contains NUL (U+0000)"}
	}
	if len(req.Metadata) > MaxMetadataEntries {
		return &DecodeError{Field: "metadata", Problem: fmt.Sprintf("%d entries, over the limit of %d", len(req.Metadata), MaxMetadataEntries)}
	}
	for k, v := range req.Metadata {
		if k == "" || len(k) > MaxMetadataValueBytes || len(v) > MaxMetadataValueBytes {
			return &DecodeError{Field: "metadata", Problem: fmt.Sprintf("entry %.40q: keys must be non-empty and keys and values at most %d bytes", k, MaxMetadataValueBytes)}
		}
	}
	return checkAttachments(req.Attachments)
}

func (d Decoder) maxText() int {
	if d.MaxTextBytes > 0 {
		return d.MaxTextBytes
	}
	return DefaultMaxTextBytes
}

// checkRequestID checks a request id: a UUID but the nil one, in its canonical form.
func checkRequestID(v string) error {
	if canonicalUUID(v) {
		return nil // most ids: no parse needed to tell
	}
	return checkRequestIDFully(v)
}

// canonicalUUID reports whether v is a UUID other than the nil one in its canonical text form:
// 36 characters, lower-case hex in groups of 8-4-4-4-12 joined by hyphens. Every such v passes
// checkRequestIDFully.
func canonicalUUID(v string) bool {
	if len(v) != 36 {
		return false
	}
	zero := true
	for i := range len(v) {
		switch c := v[i]; {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if c != '-' {
				return false
			}
		case c == '0':
		case '1' <= c && c <= '9', 'a' <= c && c <= 'f':
			zero = false
		default:
			return false
		}
	}
	return !zero
}

// checkRequestIDFully is checkRequestID by uuid.Parse, with the error of each way to fail.
func checkRequestIDFully(v string) error {
	id, err := uuid.Parse(v)
	if err != nil {
		return &DecodeError{Field: "request_id", Problem: "not a UUID", Err: err}
	}
	if id == uuid.Nil {
		return &DecodeError{Field: "request_id", Problem: "the nil UUID is not an id"}
	}
	// uuid.Parse checked the 8-4-4-4-12 layout of a 36-character id: only its case is left.
	// uuid.Parse also takes upper case, braces, "urn:uuid:" and 32 bare hex digits: four more
	// spellings of one id, which the inbox would take for four requests (G3).
	if len(v) != 36 || strings.ContainsAny(v, "ABCDEF") {
		return &DecodeError{Field: "request_id", Problem: fmt.Sprintf("not in the canonical form (RFC 9562 section 4: lower-case hex, 8-4-4-4-12); write it as %s", id)}
	}
	return nil
}

// checkID checks an id field: bounded, valid UTF-8, no control characters or surrounding spaces.
func checkID(field, v string, required bool) error {
	if len(v) <= MaxIDBytes && printableASCII(v) {
		return nil // most ids: one pass over the bytes tells
	}
	return checkIDFully(field, v, required)
}

// printableASCII reports whether v is not empty and all printable ASCII (space to tilde), with
// no space at either end. Every such v of at most MaxIDBytes passes checkIDFully.
func printableASCII(v string) bool {
	if v == "" || v[0] == ' ' || v[len(v)-1] == ' ' {
		return false
	}
	for i := range len(v) {
		if v[i] < ' ' || v[i] > '~' {
			return false
		}
	}
	return true
}

// checkIDFully is checkID rule by rule, with the error of each way to fail.
func checkIDFully(field, v string, required bool) error {
	if v == "" {
		if required {
			return &DecodeError{Field: field, Problem: "missing"}
		}
		return nil
	}
	if len(v) > MaxIDBytes {
		return &DecodeError{Field: field, Problem: fmt.Sprintf("%d bytes, over the limit of %d", len(v), MaxIDBytes)}
	}
	if !utf8.ValidString(v) {
		return &DecodeError{Field: field, Problem: "not valid UTF-8"}
	}
	if strings.TrimSpace(v) != v {
		return &DecodeError{Field: field, Problem: "leading or trailing space"}
	}
	if strings.IndexFunc(v, unicode.IsControl) >= 0 {
		return &DecodeError{Field: field, Problem: "control character"}
	}
	return nil
}

// Encode returns the JSON envelope of req with Schema set to SchemaVersion when it is 0.
func (req Request) Encode() ([]byte, error) {
	if req.Schema == 0 {
		req.Schema = SchemaVersion
	}
	return json.Marshal(req)
}

// DecodeResult parses a Result envelope, checking its schema version and request id.
func DecodeResult(data []byte) (Result, error) {
	var res Result
	if err := json.Unmarshal(data, &res); err != nil {
		return Result{}, fmt.Errorf("turn: bad result: %w", err)
	}
	if res.Schema != SchemaVersion {
		return Result{}, fmt.Errorf("turn: bad result: schema version %d, this reader knows %d", res.Schema, SchemaVersion)
	}
	if res.RequestID == "" {
		return Result{}, errors.New("turn: bad result: missing request_id")
	}
	return res, nil
}
