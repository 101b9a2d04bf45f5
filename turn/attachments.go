package turn

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/turnstile-go/turnstile/attachment"
	"github.com/turnstile-go/turnstile/session"
)

// ErrNoAttachmentStore is wrapped by the permanent error of a request that carries attachment
// references to a Runner whose Attachments is nil: the request is dead-lettered with the first
// reference's id in its reason, never run without its attachments.
var ErrNoAttachmentStore = errors.New("turn: the request carries attachments and the Runner has no attachment store (Runner.Attachments)")

// checkAttachments checks Request.Attachments as Decoder.Validate does: at most
// MaxAttachments, each valid (attachment.Ref.Validate), no id twice. Its errors are
// *DecodeError on the field "attachments".
func checkAttachments(refs []attachment.Ref) error {
	if len(refs) > MaxAttachments {
		return &DecodeError{Field: "attachments", Problem: fmt.Sprintf("%d entries, over the limit of %d", len(refs), MaxAttachments)}
	}
	for i, r := range refs {
		if err := r.Validate(); err != nil {
			return &DecodeError{Field: "attachments", Problem: fmt.Sprintf("entry %d", i), Err: err}
		}
		for j := range i {
			if refs[j].ID == r.ID {
				return &DecodeError{Field: "attachments", Problem: fmt.Sprintf("entry %d: id %s is entry %d's too", i, r.ID, j)}
			}
		}
	}
	return nil
}

// checkAttachments checks, before the model is called, that the attachment store holds every
// attachment req refers to, for req's owner (the Runner's App, req.UserID) and of the size
// the reference gives. A missing one, a size that differs, an owner the store refuses, or
// references with no store configured are permanent errors naming the attachment's id (the
// request is dead-lettered: a turn never runs without its input); a store's other errors are
// returned wrapped, retryable when the store says so.
func (r *Runner) checkAttachments(ctx context.Context, req Request) error {
	if len(req.Attachments) == 0 {
		return nil
	}
	if r.Attachments == nil {
		return Permanent(fmt.Errorf("%w: attachment %s", ErrNoAttachmentStore, req.Attachments[0].ID))
	}
	owner := attachment.Owner{App: r.app(), User: req.UserID}
	for _, ref := range req.Attachments {
		got, err := r.Attachments.Stat(ctx, owner, ref.ID)
		switch {
		case errors.Is(err, attachment.ErrNotFound), errors.Is(err, attachment.ErrInvalid):
			return Permanent(fmt.Errorf("attachment %s (%q) of user %s in app %s: %w", ref.ID, ref.Name, owner.User, owner.App, err))
		case err != nil:
			return fmt.Errorf("attachment %s: stat: %w", ref.ID, err)
		case got.Size != ref.Size:
			return Permanent(fmt.Errorf("attachment %s (%q): the request says %d bytes, the store holds %d", ref.ID, ref.Name, ref.Size, got.Size))
		}
	}
	return nil
}

// DefaultOffloadBytes is Offload's threshold when it is given none: a text over 16 KiB goes to
// the attachment store. A request's text must fit three eighths of the Runner's context
// budget (half, less a summary's eighth: ErrOverBudget), about 12,000 tokens at
// DefaultContextBudget, which EstimateTokens reaches at 36 KB and a dense text sooner; 16 KiB
// keeps a request well inside it.
const DefaultOffloadBytes = 16 << 10

// offloadPreviewBytes bounds the beginning of an offloaded text that stays in Request.Text.
const offloadPreviewBytes = 1 << 10

// Offload is the producer's side of attachments by reference: when req.Text is longer than
// threshold bytes (DefaultOffloadBytes when threshold <= 0), it puts the text into store as an
// attachment of (app, req.UserID) named "message.txt" of media type "text/plain;
// charset=utf-8", appends its Ref to req.Attachments, and leaves in req.Text the text's first
// bytes (at most 1 KiB and half of threshold, cut at a character boundary) followed by a note
// that the message continues in that attachment, with its id and size. The request then
// travels as a small record however long the text was (a 6 MB pasted log makes a record of
// about 1.5 KB), and the model reads the rest by range (turn/agent's AttachmentTool). app is the
// consuming Runner's App ("" means DefaultApp). A text within threshold is left as it is.
//
// It reports whether it moved the text. Errors: a nil store or req; req already holding
// MaxAttachments attachments; the store's (attachment.ErrInvalid for an empty user id,
// attachment.ErrTooLarge for a text over the store's limit), in which case req is unchanged.
func Offload(ctx context.Context, store attachment.Store, app string, req *Request, threshold int) (bool, error) {
	switch {
	case store == nil || req == nil:
		return false, errors.New("turn: Offload needs a store and a request")
	case threshold <= 0:
		threshold = DefaultOffloadBytes
	}
	if len(req.Text) <= threshold {
		return false, nil
	}
	if len(req.Attachments) >= MaxAttachments {
		return false, fmt.Errorf("turn: offload request %s: it holds %d attachments already, the limit", req.ID, len(req.Attachments))
	}
	owner := attachment.Owner{App: cmp.Or(app, DefaultApp), User: req.UserID}
	ref, err := store.Put(ctx, owner, "message.txt", "text/plain; charset=utf-8", strings.NewReader(req.Text))
	if err != nil {
		return false, fmt.Errorf("turn: offload request %s: %w", req.ID, err)
	}
	preview := req.Text[:min(offloadPreviewBytes, threshold/2)]
	for len(preview) > 0 && !utf8.ValidString(preview) {
		preview = preview[:len(preview)-1] // a character cut at the end
	}
	req.Attachments = append(req.Attachments, ref)
	req.Text = fmt.Sprintf("%s\n\n[The message is cut here. The whole message, %d bytes, is attachment %s (%q).]",
		preview, ref.Size, ref.ID, ref.Name)
	return true, nil
}

// UserEventData is the Data of the user's event of a turn whose request carried attachments,
// as JSON: {"attachments":[{"id":"sha256:...","size":6000000,"name":"log.txt"}]}. The session
// so keeps the references with the message, for the model's later turns (turn/agent's
// History lists them) and for audit. Package turn owns the format; UserEvent writes it.
type UserEventData struct {
	Attachments []attachment.Ref `json:"attachments,omitempty"`
}

// UserEvent returns the session event of req's message: Author "user", Text req.Text, and,
// when req carries attachments, Data a UserEventData listing them.
func UserEvent(req Request) session.Event {
	e := session.Event{Author: "user", Text: req.Text}
	if len(req.Attachments) > 0 {
		e.Data, _ = json.Marshal(UserEventData{Attachments: req.Attachments}) // strings and numbers
	}
	return e
}

// AttachmentsOf returns the attachment references a user event of UserEvent holds; none for
// another event.
func AttachmentsOf(e session.Event) []attachment.Ref {
	if e.Author != "user" || len(e.Data) == 0 {
		return nil
	}
	var d UserEventData
	if json.Unmarshal(e.Data, &d) != nil {
		return nil
	}
	return d.Attachments
}
