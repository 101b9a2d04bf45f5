package turn

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/google/uuid"
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
	// Text is the user's message, valid UTF-8, at most the Decoder's MaxTextBytes.
	Text string `json:"text"`
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
	// Field is the JSON field name, or "" when the whole value is at fault.
	Field string
	// Problem says what is wrong, with the limit when one applies.
	Problem string
	// Err is the underlying error, if any.
	Err error
}

// Error formats "turn: bad request: FIELD: PROBLEM[: cause]".
func (e *DecodeError) Error() string {
	msg := "turn: bad request"
	if e.Field != "" {
		msg += ": " + e.Field
	}
	msg += ": " + e.Problem
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the underlying error, if any (a *json.SyntaxError, a uuid parse error).
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
// and match names case-sensitively), plus the case-variant check.
func (d Decoder) Decode(data []byte) (Request, error) {
	if len(data) == 0 {
		return Request{}, &DecodeError{Problem: "empty value"}
	}
	if !utf8.Valid(data) {
		// Checked first so that the whole value is named, not the first bad string.
		return Request{}, &DecodeError{Problem: "value is not valid UTF-8"}
	}
	if limit := d.maxText() + 64<<10 + MaxMetadataEntries*2*MaxMetadataValueBytes; len(data) > limit {
		return Request{}, &DecodeError{Problem: fmt.Sprintf("value is %d bytes, over the limit of %d", len(data), limit)}
	}
	var w wireRequest
	if err := jsonv2.Unmarshal(data, &w); err != nil {
		return Request{}, decodeError(err)
	}
	for name := range w.Unknown {
		if known, ok := caseVariant(name); ok {
			return Request{}, &DecodeError{Field: name, Problem: fmt.Sprintf("differs from the envelope's %q only in case", known)}
		}
	}
	req := w.Request
	if err := d.Validate(req); err != nil {
		return Request{}, err
	}
	if len(req.Metadata) == 0 {
		req.Metadata = nil // {} and absent mean the same
	}
	return req, nil
}

// wireRequest is what Decode unmarshals: the envelope, and the names it does not know, which
// are kept only to find case variants of the names it does.
type wireRequest struct {
	Request
	Unknown map[string]jsontext.Value `json:",embed"`
}

// requestNames are the JSON names of the Request envelope.
var requestNames = []string{"schema", "request_id", "conversation_id", "user_id", "sequence", "text",
	"reply_to", "metadata", "created_at"}

// caseVariant returns the envelope's name that name equals but for case, if there is one.
func caseVariant(name string) (string, bool) {
	for _, known := range requestNames {
		if strings.EqualFold(name, known) {
			return known, true
		}
	}
	return "", false
}

// decodeError turns an error of jsonv2.Unmarshal into a *DecodeError naming the field, taken
// from the error's JSON pointer (RFC 6901): its first token is the envelope's field.
func decodeError(err error) *DecodeError {
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
		return &DecodeError{Problem: "malformed JSON", Err: err}
	case semErr != nil && field == "":
		return &DecodeError{Problem: "value is not a JSON object", Err: err}
	case semErr != nil && semErr.GoType == reflect.TypeFor[time.Time]():
		return &DecodeError{Field: field, Problem: "not an RFC 3339 time", Err: err}
	case semErr != nil && semErr.GoType != nil:
		return &DecodeError{Field: field, Problem: "wrong JSON type, want " + semErr.GoType.String(), Err: err}
	}
	return &DecodeError{Field: field, Problem: "malformed JSON", Err: err}
}

// Validate checks a Request built in code against the rules Decode applies, returning a
// *DecodeError for the first broken one.
func (d Decoder) Validate(req Request) error {
	switch {
	case req.Schema == 0:
		return &DecodeError{Field: "schema", Problem: "missing"}
	case req.Schema != SchemaVersion:
		return &DecodeError{Field: "schema", Problem: fmt.Sprintf("unknown version %d, this reader knows %d", req.Schema, SchemaVersion)}
	}
	if req.ID == "" {
		return &DecodeError{Field: "request_id", Problem: "missing"}
	}
	id, err := uuid.Parse(req.ID)
	if err != nil {
		return &DecodeError{Field: "request_id", Problem: "not a UUID", Err: err}
	}
	if id == uuid.Nil {
		return &DecodeError{Field: "request_id", Problem: "the nil UUID is not an id"}
	}
	// uuid.Parse checked the 8-4-4-4-12 layout of a 36-character id: only its case is left.
	// uuid.Parse also takes upper case, braces, "urn:uuid:" and 32 bare hex digits: four more
	// spellings of one id, which the inbox would take for four requests (G3).
	if len(req.ID) != 36 || strings.ContainsAny(req.ID, "ABCDEF") {
		return &DecodeError{Field: "request_id", Problem: fmt.Sprintf("not in the canonical form (RFC 9562 section 4: lower-case hex, 8-4-4-4-12); write it as %s", id)}
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
	return nil
}

func (d Decoder) maxText() int {
	if d.MaxTextBytes > 0 {
		return d.MaxTextBytes
	}
	return DefaultMaxTextBytes
}

// checkID checks an id field: bounded, valid UTF-8, no control characters or surrounding spaces.
func checkID(field, v string, required bool) error {
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
