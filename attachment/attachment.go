// Package attachment defines where large inputs live while requests, sessions, Kafka records
// and Temporal payloads carry references to them: the Store interface, the Ref a request
// carries, and an in-memory Store.
//
// An attachment is a body of bytes (a pasted log, a document) addressed by its content: its id
// is "sha256:" followed by the 64 lower-case hex digits of the SHA-256 of the bytes. Putting
// the same bytes again gives the same id and stores nothing new.
//
// Attachments are owner-scoped (guarantee G7): every call names an Owner (app, user), and a
// user reaches only the attachments put under their own owner. The same bytes put by two
// users are two entries, so deleting one user's data (Retention.DeleteUser) never touches
// another user's, and an id copied out of one user's request reaches nothing in another's.
//
// The package imports nothing of turnstile. attachment/attachmenttest holds the conformance
// suite every Store implementation runs; attachment/fsattachment is a Store on a filesystem
// directory, attachment/sqlattachment one on PostgreSQL or SQLite. turn.Offload moves a large
// request text into a Store and leaves a reference; turn.Runner.Attachments checks a request's
// references before its turn; turn/agent's AttachmentTool lets the model read them in pages.
package attachment

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Sentinel errors a Store returns, matched with errors.Is. Implementations may wrap them.
var (
	// ErrNotFound: no attachment of that id for the owner, whoever else may have one.
	ErrNotFound = errors.New("attachment: not found")
	// ErrInvalid: the arguments break a rule of the Store contract: an empty or unstorable
	// owner, a malformed id, a name or media type over its limit, a negative offset or length,
	// an offset past the end, a length over MaxReadBytes.
	ErrInvalid = errors.New("attachment: invalid argument")
	// ErrTooLarge: Put was given more bytes than the store's limit (DefaultMaxSize unless the
	// store was configured otherwise).
	ErrTooLarge = errors.New("attachment: too large")
)

// Limits every Store applies.
const (
	// IDPrefix starts every id: the hash function's name and a colon.
	IDPrefix = "sha256:"
	// IDLen is the length of an id in bytes: the prefix and 64 hex digits (71).
	IDLen = len(IDPrefix) + 2*sha256.Size
	// DefaultMaxSize is the most bytes one attachment holds unless a store is configured
	// otherwise: 64 MiB.
	DefaultMaxSize = 64 << 20
	// MaxReadBytes bounds the length of one Read: 4 MiB. Read a larger range in several calls.
	MaxReadBytes = 4 << 20
	// MaxNameBytes bounds Ref.Name: 255 bytes.
	MaxNameBytes = 255
	// MaxMediaTypeBytes bounds Ref.MediaType: 255 bytes.
	MaxMediaTypeBytes = 255
)

// Owner is whose attachments a call reaches: an app (an agent; several may share a Store) and
// one of its users. A user id is the request's user id (turn.Request.UserID).
type Owner struct {
	App  string
	User string
}

// Validate reports an error wrapping ErrInvalid when a field of o is empty, not valid UTF-8,
// or holds NUL (which PostgreSQL's TEXT refuses: no Store takes them, so all behave alike).
func (o Owner) Validate() error {
	switch {
	case o.App == "":
		return fmt.Errorf("%w: owner: empty app", ErrInvalid)
	case o.User == "":
		return fmt.Errorf("%w: owner: empty user", ErrInvalid)
	case !storable(o.App) || !storable(o.User):
		return fmt.Errorf("%w: owner: app and user must be valid UTF-8 without NUL", ErrInvalid)
	}
	return nil
}

// String formats o as app/user for logs.
func (o Owner) String() string { return o.App + "/" + o.User }

func storable(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

// Ref is a reference to an attachment, as a request carries it:
//
//	{"id":"sha256:9f86d0...","size":6291456,"name":"server.log","media_type":"text/plain"}
//
// ID and Size are the content's; Name and MediaType describe it for the model and are
// optional.
type Ref struct {
	// ID is "sha256:" and the 64 lower-case hex digits of the content's SHA-256.
	ID string `json:"id"`
	// Size is the content's length in bytes.
	Size int64 `json:"size"`
	// Name is a file name or a short label ("server.log"), at most MaxNameBytes of valid
	// UTF-8 without control characters; "" for none.
	Name string `json:"name,omitempty"`
	// MediaType is the content's media type ("text/plain; charset=utf-8"), at most
	// MaxMediaTypeBytes of printable ASCII; "" for none.
	MediaType string `json:"media_type,omitempty"`
}

// Validate reports the first rule r breaks, wrapping ErrInvalid: a malformed ID (ParseID), a
// negative Size, or a Name or MediaType over its limit or with characters it may not hold
// (they are shown to the model and in logs). turn's request decoders call it.
func (r Ref) Validate() error {
	if _, err := ParseID(r.ID); err != nil {
		return err
	}
	if r.Size < 0 {
		return fmt.Errorf("%w: attachment %s: negative size %d", ErrInvalid, r.ID, r.Size)
	}
	return ValidateLabels(r.Name, r.MediaType)
}

// ValidateLabels checks an attachment's name and media type as Ref.Validate does: a name of at
// most MaxNameBytes of valid UTF-8 without control characters, a media type of at most
// MaxMediaTypeBytes of printable ASCII (space to tilde). Both may be empty. Errors wrap
// ErrInvalid.
func ValidateLabels(name, mediaType string) error {
	switch {
	case len(name) > MaxNameBytes:
		return fmt.Errorf("%w: attachment name: %d bytes, over the limit of %d", ErrInvalid, len(name), MaxNameBytes)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: attachment name: not valid UTF-8", ErrInvalid)
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return fmt.Errorf("%w: attachment name: control character", ErrInvalid)
	case len(mediaType) > MaxMediaTypeBytes:
		return fmt.Errorf("%w: attachment media type: %d bytes, over the limit of %d", ErrInvalid, len(mediaType), MaxMediaTypeBytes)
	case strings.IndexFunc(mediaType, func(c rune) bool { return c < ' ' || c > '~' }) >= 0:
		return fmt.Errorf("%w: attachment media type: want printable ASCII", ErrInvalid)
	}
	return nil
}

// ParseID returns the SHA-256 digest that id names: id must be IDPrefix followed by exactly 64
// lower-case hex digits (other spellings of one digest are refused, so that one content has
// one id). Errors wrap ErrInvalid and quote at most 80 bytes of id.
func ParseID(id string) ([sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	hexPart, ok := strings.CutPrefix(id, IDPrefix)
	if !ok || len(id) != IDLen || strings.ContainsAny(hexPart, "ABCDEF") {
		return sum, fmt.Errorf("%w: attachment id %.80q: want %q and 64 lower-case hex digits", ErrInvalid, id, IDPrefix)
	}
	if _, err := hex.Decode(sum[:], []byte(hexPart)); err != nil {
		return sum, fmt.Errorf("%w: attachment id %.80q: want %q and 64 lower-case hex digits", ErrInvalid, id, IDPrefix)
	}
	return sum, nil
}

// FormatID returns the id of a content whose SHA-256 digest is sum.
func FormatID(sum [sha256.Size]byte) string { return IDPrefix + hex.EncodeToString(sum[:]) }

// IDOf returns the id of content.
func IDOf(content []byte) string { return FormatID(sha256.Sum256(content)) }

// CheckRange checks a Read of length bytes at offset in an attachment of size bytes and
// returns the end of the range, clipped at size (a range past the end is read short). Errors
// wrap ErrInvalid: a negative offset or length, a length over MaxReadBytes, an offset past the
// end (offset > size; offset == size reads nothing). Stores call it so that all answer alike.
func CheckRange(size, offset, length int64) (end int64, err error) {
	switch {
	case offset < 0:
		return 0, fmt.Errorf("%w: negative offset %d", ErrInvalid, offset)
	case length < 0:
		return 0, fmt.Errorf("%w: negative length %d", ErrInvalid, length)
	case length > MaxReadBytes:
		return 0, fmt.Errorf("%w: length %d is over the limit of %d bytes a read", ErrInvalid, length, MaxReadBytes)
	case offset > size:
		return 0, fmt.Errorf("%w: offset %d is past the end of the attachment (%d bytes)", ErrInvalid, offset, size)
	}
	return min(size, offset+length), nil
}

// CheckPut checks what a Put checks before it reads the content: ctx, the owner
// (Owner.Validate) and the labels (ValidateLabels). Errors: ctx's, wrapping ErrInvalid.
func CheckPut(ctx context.Context, owner Owner, name, mediaType string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := owner.Validate(); err != nil {
		return err
	}
	return ValidateLabels(name, mediaType)
}

// CheckCall checks what Stat, Read and Delete check first: ctx, the owner (Owner.Validate) and
// the id (ParseID), whose digest it returns. Errors: ctx's, wrapping ErrInvalid.
func CheckCall(ctx context.Context, owner Owner, id string) ([sha256.Size]byte, error) {
	if err := ctx.Err(); err != nil {
		return [sha256.Size]byte{}, err
	}
	if err := owner.Validate(); err != nil {
		return [sha256.Size]byte{}, err
	}
	return ParseID(id)
}

// Store is the attachment store: a shared, durable home for large inputs that every worker
// reaches, addressed by owner and content hash.
//
// Every method first checks its context, the owner (Owner.Validate) and the id (ParseID), and
// a call for an id the owner has not put gets ErrNotFound, whoever else has it (G7).
// Implementations are safe for concurrent use by many goroutines (and, for a shared database
// or directory, processes). Infrastructure failures (a lost connection, a busy database, a
// full disk) come back wrapped; implementations should make the retryable ones satisfy
// `interface{ Retryable() bool }`, as the session stores do. What a Store returns is the
// caller's; it keeps no reference to what it was given.
type Store interface {
	// Put stores the bytes r yields until io.EOF under owner and returns their Ref. The same
	// bytes put again by the same owner store nothing new and return the stored Ref: its Name
	// and MediaType are the first Put's, and the entry's time (see Retention.DeleteIdle) is
	// now. Concurrent Puts of the same bytes by one owner all succeed with the same Ref. A Put
	// that fails (r's error, a cancelled context, ErrTooLarge) stores nothing.
	// Errors: ErrInvalid (the owner, or name and mediaType as ValidateLabels checks them),
	// ErrTooLarge, r's error (wrapped), ctx's error.
	Put(ctx context.Context, owner Owner, name, mediaType string, r io.Reader) (Ref, error)
	// Stat returns the Ref of an attachment of owner. Errors: ErrNotFound, ErrInvalid.
	Stat(ctx context.Context, owner Owner, id string) (Ref, error)
	// Read returns the bytes [offset, offset+length) of an attachment of owner, short when
	// the range passes the end, empty at the end (offset equal to the size) or for length 0.
	// Its cost grows with length, not with the attachment's size.
	// Errors: ErrNotFound, ErrInvalid (the owner, the id, the range as CheckRange checks it).
	Read(ctx context.Context, owner Owner, id string, offset, length int64) ([]byte, error)
	// Delete removes an attachment of owner; other owners' entries of the same bytes stay.
	// Errors: ErrNotFound, ErrInvalid.
	Delete(ctx context.Context, owner Owner, id string) error
}

// Retention is a Store that deletes attachments in bulk: all of one user's (a data-deletion
// request) and those not put for too long. MemoryStore, fsattachment and sqlattachment
// implement it; attachmenttest checks it on every Store that does.
//
// A request that refers to a deleted attachment is dead-lettered by turn.Runner with the id in
// its reason; one whose turn is already stored completes without it.
type Retention interface {
	Store
	// DeleteUser deletes every attachment of user in app and returns how many it deleted (0
	// when there were none). Errors: ErrInvalid (an empty app or user).
	DeleteUser(ctx context.Context, app, user string) (int64, error)
	// DeleteIdle deletes the attachments of app whose last Put was before the given time, and
	// returns how many it deleted. An attachment put again while DeleteIdle runs is either
	// deleted whole or kept whole. Errors: ErrInvalid (an empty app).
	DeleteIdle(ctx context.Context, app string, before time.Time) (int64, error)
}

// UserCounter is a Retention that counts a user's attachments: what DeleteUser would delete
// now (turn.Retention.EraseUser's dry run). MemoryStore, fsattachment and sqlattachment
// implement it.
type UserCounter interface {
	Retention
	// CountUser returns how many attachments user has in app. Errors: ErrInvalid (an empty
	// app or user).
	CountUser(ctx context.Context, app, user string) (int64, error)
}

// PutBytes puts content, held in memory, into s under owner: s.Put with a reader of content.
// Errors: s.Put's.
func PutBytes(ctx context.Context, s Store, owner Owner, name, mediaType string, content []byte) (Ref, error) {
	return s.Put(ctx, owner, name, mediaType, bytes.NewReader(content))
}

// ReadChunks reads r to its end and hands fn its bytes in order, in chunks of chunkSize bytes
// (the last may be shorter; empty content makes no call), then returns the content's id and
// size: the reading half of a Store's Put. fn's slice is reused for the next chunk: copy what
// it keeps. It checks ctx before each chunk, and fails with ErrTooLarge as soon as r yields
// more than maxSize bytes (maxSize <= 0 means DefaultMaxSize). A chunkSize <= 0 means 256 KiB.
// Errors: ctx's, r's (wrapped), fn's, ErrTooLarge (wrapped, with the limit).
func ReadChunks(ctx context.Context, r io.Reader, chunkSize int, maxSize int64, fn func(chunk []byte) error) (id string, size int64, err error) {
	if chunkSize <= 0 {
		chunkSize = 256 << 10
	}
	if maxSize <= 0 {
		maxSize = DefaultMaxSize
	}
	h := sha256.New()
	buf := make([]byte, chunkSize)
	for {
		if err := ctx.Err(); err != nil {
			return "", 0, err
		}
		n, rerr := fill(r, buf)
		if n > 0 {
			if size += int64(n); size > maxSize {
				return "", 0, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, maxSize)
			}
			h.Write(buf[:n])
			if err := fn(buf[:n]); err != nil {
				return "", 0, err
			}
		}
		switch {
		case rerr == io.EOF:
			var sum [sha256.Size]byte
			return FormatID([sha256.Size]byte(h.Sum(sum[:0]))), size, nil
		case rerr != nil:
			return "", 0, fmt.Errorf("attachment: read the content: %w", rerr)
		}
	}
}

// fill reads from r until buf is full, r ends (io.EOF, returned with the bytes before it) or
// r fails. Unlike io.ReadFull it keeps r's own errors apart from its end: a body cut short
// (io.ErrUnexpectedEOF from r) is an error, never the end of the content.
func fill(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
