package agent

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/turnstile-go/turnstile/attachment"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
)

// AttachmentToolName is the name of the tool AttachmentTool makes.
const AttachmentToolName = "read_attachment"

// DefaultAttachmentPage is AttachmentTool's page when it is given none: 8 KiB, the most bytes
// one call reads.
const DefaultAttachmentPage = 8 << 10

// attachmentArgs are the arguments of the read_attachment tool.
type attachmentArgs struct {
	ID     string `json:"id" jsonschema:"description=the attachment's id as the message lists it (sha256: and 64 hex digits)"`
	Offset int64  `json:"offset,omitempty" jsonschema:"description=the first byte to read; 0 (the default) for the start"`
	Length int64  `json:"length,omitempty" jsonschema:"description=how many bytes to read; 0 (the default) or more than a page reads a page"`
}

// AttachmentTool returns the built-in tool "read_attachment" that lets the model read the
// attachments a request carries (turn.Request.Attachments, listed in the user's message by the
// Agent) from store, by range: arguments {"id", "offset", "length"} in bytes, offset 0 and
// length one page by default, length capped at a page of pageBytes (DefaultAttachmentPage,
// 8 KiB, when pageBytes <= 0; at most attachment.MaxReadBytes), so that a 6 MB log is read in
// pages and no tool output floods the model's context.
//
// It reads only attachments of the turn's owner: the app and user of the turn's session
// (Call.Session), as put under attachment.Owner{App: the Runner's App, User: the request's
// user} (turn.Offload does); an id of another user's attachment is not found (G7). Each call
// is a journal step like any tool's: a turn run again after a crash gets its pages from the
// journal, not from the store. Its pages count towards the turn's journal bound
// (turn.Runner.MaxJournalBytes: the default 1 MiB holds about 120 pages of 8 KiB) and, as
// tool events, towards the session's history.
//
// The output is a line saying which bytes it holds and where the next page starts, then the
// bytes: as text when they are UTF-8 (a page never ends inside a character: it ends before
// one cut at the page's end, and one cut at its start is skipped, both said in the line), else
// in base64, which the line says too. A missing attachment, a malformed id or an offset past
// the end goes back to the model as the tool's error output.
func AttachmentTool(store attachment.Store, pageBytes int) Tool {
	page := min(int64(cmp.Or(max(pageBytes, 0), DefaultAttachmentPage)), attachment.MaxReadBytes)
	desc := fmt.Sprintf("Reads an attachment of the user's message (the message lists each one's id, name and size) by range: "+
		"at most %d bytes a call, from offset (0 for the start). The output starts with a line giving the range read and the "+
		"offset of the next page. Read a large attachment page by page, or jump to the offsets you need.", page)
	return NewTool(AttachmentToolName, desc, func(ctx context.Context, call Call, args attachmentArgs) (string, error) {
		if store == nil {
			return "", turn.Permanent(errors.New("agent: AttachmentTool has no store"))
		}
		length := args.Length
		if length == 0 || length > page {
			length = page
		}
		owner := attachment.Owner{App: call.Session.App, User: call.Session.User}
		ref, err := store.Stat(ctx, owner, args.ID)
		if err != nil {
			return "", err
		}
		data, err := store.Read(ctx, owner, args.ID, args.Offset, length)
		if err != nil {
			return "", err
		}
		return attachmentPage(ref, args.Offset, data), nil
	})
}

// attachmentPage formats the bytes data read at offset of the attachment ref as the tool's
// output.
func attachmentPage(ref attachment.Ref, offset int64, data []byte) string {
	if len(data) == 0 {
		return fmt.Sprintf("attachment %s: offset %d is its end (%d bytes); nothing more to read", ref.ID, offset, ref.Size)
	}
	var notes []string
	if skip := cutStart(data); skip > 0 {
		data, offset = data[skip:], offset+int64(skip)
		notes = append(notes, fmt.Sprintf("%d bytes of a character cut at the requested offset skipped", skip))
	}
	if end := offset + int64(len(data)); end < ref.Size {
		if keep := cutEnd(data); keep < len(data) && keep > 0 {
			data = data[:keep]
			notes = append(notes, "the page ends before a character it would cut")
		}
	}
	end := offset + int64(len(data))
	next := fmt.Sprintf("the next page starts at offset %d", end)
	if end >= ref.Size {
		next = "this page ends the attachment"
	}
	body, encoding := string(data), "text"
	if !utf8.Valid(data) {
		body, encoding = base64.StdEncoding.EncodeToString(data), "base64 (not UTF-8 text)"
	}
	if len(notes) > 0 {
		next += "; " + strings.Join(notes, "; ")
	}
	return fmt.Sprintf("attachment %s: bytes %d to %d (%d bytes) of %d, as %s; %s\n%s",
		ref.ID, offset, end-1, len(data), ref.Size, encoding, next, body)
}

// cutStart returns how many bytes at the start of data are the tail of a character that
// starts before it: UTF-8 continuation bytes, at most 3, when a full character follows them.
func cutStart(data []byte) int {
	n := 0
	for n < min(3, len(data)) && !utf8.RuneStart(data[n]) {
		n++
	}
	if n == 0 || n == len(data) || !utf8.FullRune(data[n:]) {
		return 0 // not text, or not cut: keep the bytes as they are
	}
	return n
}

// cutEnd returns the length of data without a character its end cuts short (the start of a
// multi-byte character whose other bytes are past the end); len(data) when it cuts none.
func cutEnd(data []byte) int {
	for i := len(data) - 1; i >= max(0, len(data)-utf8.UTFMax); i-- {
		if utf8.RuneStart(data[i]) {
			if !utf8.FullRune(data[i:]) {
				return i
			}
			break
		}
	}
	return len(data)
}

// turnKey returns the session key of in's turn (Call.Session): the session's app, with the
// request's user and conversation (an Input built by hand may leave the session's key
// empty), as turn.Input.ToolKey scopes its keys.
func turnKey(in turn.Input) session.Key {
	key := in.Session.Key
	key.App = cmp.Or(key.App, turn.DefaultApp)
	key.User, key.Conversation = in.Request.UserID, in.Request.ConversationID
	return key
}

// userText returns the user message of req for the model: its text, and, when it carries
// attachments, a note listing them (id, name, media type, size) and, when the Agent has the
// read_attachment tool, how to read them.
func (a *Agent) userText(req turn.Request) string {
	_, readable := a.tools[AttachmentToolName]
	return req.Text + attachmentNote(req.Attachments, readable)
}

// attachmentNote returns the note that lists a message's attachments (id, name, media type,
// size) after its text, saying how to read them when readable; "" for none.
func attachmentNote(refs []attachment.Ref, readable bool) string {
	if len(refs) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n\n[Attachments of this message")
	if readable {
		b.WriteString(", which you can read with the " + AttachmentToolName + " tool, by id and byte range")
	}
	b.WriteString(":")
	for _, r := range refs {
		fmt.Fprintf(&b, "\n- %s: %q", r.ID, r.Name)
		if r.MediaType != "" {
			b.WriteString(", " + r.MediaType)
		}
		fmt.Fprintf(&b, ", %d bytes", r.Size)
	}
	b.WriteString("]")
	return b.String()
}
