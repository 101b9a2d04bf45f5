package turn_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/attachment"
	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/turn"
)

func TestDecodeAttachments(t *testing.T) {
	t.Parallel()
	log := strings.Repeat("a log line\n", 10)
	refs := []attachment.Ref{
		{ID: attachment.IDOf([]byte(log)), Size: int64(len(log)), Name: "server.log", MediaType: "text/plain"},
		{ID: attachment.IDOf(nil)},
	}
	req := newRequest("c-1", "u-1", "see the log")
	req.Attachments = refs
	data, err := req.Encode()
	require.NoError(t, err)
	got, err := turn.Decode(data)
	require.NoError(t, err)
	require.Equal(t, refs, got.Attachments)

	req.Attachments = []attachment.Ref{}
	data, err = req.Encode()
	require.NoError(t, err)
	require.NotContains(t, string(data), "attachments", "no attachments, no field")
	got, err = turn.Decode([]byte(strings.Replace(string(data), `"text"`, `"attachments":[],"text"`, 1)))
	require.NoError(t, err)
	require.Nil(t, got.Attachments, "[] and absent mean the same")
}

func TestValidateAttachments(t *testing.T) {
	t.Parallel()
	id := attachment.IDOf([]byte("x"))
	many := make([]attachment.Ref, turn.MaxAttachments+1)
	for i := range many {
		many[i] = attachment.Ref{ID: attachment.IDOf(fmt.Appendf(nil, "%d", i))}
	}
	for _, c := range []struct {
		refs    []attachment.Ref
		problem string
	}{
		{many, "attachments: 65 entries, over the limit of 64"},
		{[]attachment.Ref{{ID: id}, {ID: "sha256:abc"}}, "attachments: entry 1: attachment: invalid argument: attachment id"},
		{[]attachment.Ref{{ID: id, Size: -1}}, "entry 0: attachment: invalid argument: attachment " + id + ": negative size -1"},
		{[]attachment.Ref{{ID: id, Name: "a\nb"}}, "entry 0: attachment: invalid argument: attachment name: control character"},
		{[]attachment.Ref{{ID: id}, {ID: id, Size: 1}}, "entry 1: id " + id + " is entry 0's too"},
	} {
		req := newRequest("c-1", "u-1", "hi")
		req.Attachments = c.refs
		err := turn.Decoder{}.Validate(req)
		var de *turn.DecodeError
		require.ErrorAs(t, err, &de)
		require.Equal(t, "attachments", de.Field)
		require.ErrorContains(t, err, c.problem)
		data, encErr := req.Encode()
		require.NoError(t, encErr)
		_, decErr := turn.Decode(data)
		require.Equal(t, err.Error(), decErr.Error(), "Decode refuses what Validate refuses")
	}
	require.NoError(t, turn.Decoder{}.Validate(func() turn.Request {
		r := newRequest("c-1", "u-1", "hi")
		r.Attachments = many[:turn.MaxAttachments]
		return r
	}()))
}

// A name of a reference that differs from its own only in case would be read as that name by
// encoding/json, and ignored by Decode: two readers of one record would disagree on which
// attachment it carries.
func TestDecodeRefusesCaseVariantsInAttachments(t *testing.T) {
	t.Parallel()
	base := `{"schema":1,"request_id":"6f1b7c1e-2d8f-4a53-9c1e-0f6f3a3c2b10","conversation_id":"c","user_id":"u","text":"hi",`
	id := attachment.IDOf(nil)
	for data, problem := range map[string]string{
		base + `"attachments":[{"id":"` + id + `","ID":"sha256:x"}]}`:    `attachments: entry 0: name "ID" differs from "id" only in case`,
		base + `"attachments":[{"id":"` + id + `","Media_Type":"x"}]}`:   `attachments: entry 0: name "Media_Type" differs from "media_type" only in case`,
		base + `"attachments":[{"id":"` + id + `"}],"Attachments":null}`: `Attachments: differs from the envelope's "attachments" only in case`,
	} {
		_, err := turn.Decode([]byte(data))
		require.ErrorContains(t, err, problem, data)
	}
}

// attachmentBundle is setup with an attachment store holding one attachment of user u-1.
func attachmentBundle(t *testing.T) (*bundle, *attachment.MemoryStore, attachment.Ref) {
	t.Helper()
	b := setup(t)
	store := attachment.NewMemoryStore()
	b.runner.App = "support"
	b.runner.Attachments = store
	ref, err := store.Put(context.Background(), attachment.Owner{App: "support", User: "u-1"}, "server.log", "text/plain", strings.NewReader("boom"))
	require.NoError(t, err)
	return b, store, ref
}

func TestRunChecksAttachments(t *testing.T) {
	t.Parallel()
	b, _, ref := attachmentBundle(t)
	var seen []attachment.Ref
	b.runner.Model = turn.ModelFunc(func(_ context.Context, in turn.Input) (turn.Output, error) {
		seen = in.Request.Attachments
		return b.model.Respond(context.Background(), in)
	})
	req := newRequest("c-ok", "u-1", "see the log")
	req.Attachments = []attachment.Ref{ref}
	_, err := b.runner.Run(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, []attachment.Ref{ref}, seen, "the model gets the references")
}

// A request whose attachment the store does not hold for its user, or of another size, or
// that carries attachments to a Runner without a store, is dead-lettered at once with the
// attachment's id in its reason; the model is never called (issue 35: never a silent drop).
func TestRunDeadLettersMissingAttachments(t *testing.T) {
	t.Parallel()
	missing := attachment.Ref{ID: attachment.IDOf([]byte("never put")), Size: 9, Name: "gone.log"}
	same := func(r attachment.Ref) attachment.Ref { return r }
	for name, c := range map[string]struct {
		user   string
		ref    func(attachment.Ref) attachment.Ref
		store  attachment.Store // instead of the bundle's; nil keeps it
		reason string
	}{
		"missing":       {"u-1", func(attachment.Ref) attachment.Ref { return missing }, nil, `attachment ` + missing.ID + ` ("gone.log") of user u-1 in app support: attachment: not found`},
		"another user":  {"u-2", same, nil, `("server.log") of user u-2 in app support: attachment: not found`},
		"size differs":  {"u-1", func(r attachment.Ref) attachment.Ref { r.Size++; return r }, nil, `("server.log"): the request says 5 bytes, the store holds 4`},
		"no store":      {"u-1", same, noStore{}, `has no attachment store (Runner.Attachments): attachment sha256:`},
		"store refuses": {"u-1", same, refusing{}, `("server.log") of user u-1 in app support: attachment: invalid argument: refused`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b, _, ref := attachmentBundle(t)
			switch c.store.(type) {
			case nil:
			case noStore:
				b.runner.Attachments = nil
			default:
				b.runner.Attachments = c.store
			}
			req := newRequest("c-"+name, c.user, "see the log")
			req.Attachments = []attachment.Ref{c.ref(ref)}
			_, err := b.runner.Run(context.Background(), req)
			var dead *turn.DeadLetterError
			require.ErrorAs(t, err, &dead)
			require.Equal(t, turn.KindPermanent, dead.Kind)
			require.Contains(t, dead.Reason, c.reason)
			require.Contains(t, dead.Reason, req.Attachments[0].ID)
			require.Zero(t, b.model.calls.Load(), "the model is not called")
			entry, err := b.inbox.Get(context.Background(), b.runner.InboxKey(req))
			require.NoError(t, err)
			require.Equal(t, inbox.StatusDead, entry.Status)
		})
	}
}

// A store's outage is no fault of the request: the attempt is given back.
func TestRunAttachmentStoreOutageIsRetried(t *testing.T) {
	t.Parallel()
	b, _, ref := attachmentBundle(t)
	b.runner.Attachments = refusing{err: retryableErr{}}
	req := newRequest("c-outage", "u-1", "see the log")
	req.Attachments = []attachment.Ref{ref}
	_, err := b.runner.Run(context.Background(), req)
	require.Equal(t, turn.KindUnavailable, turn.Classify(err), "%v", err)
	require.Zero(t, b.model.calls.Load())
}

// noStore stands for a Runner without an attachment store in TestRunDeadLettersMissingAttachments.
type noStore struct{ attachment.Store }

// refusing is an attachment store whose Stat fails with err (ErrInvalid when nil).
type refusing struct {
	attachment.Store
	err error
}

func (r refusing) Stat(context.Context, attachment.Owner, string) (attachment.Ref, error) {
	if r.err != nil {
		return attachment.Ref{}, r.err
	}
	return attachment.Ref{}, fmt.Errorf("%w: refused", attachment.ErrInvalid)
}

func TestOffload(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := attachment.NewMemoryStore()
	long := strings.Repeat("é", 100) + strings.Repeat("0123456789", 10_000) // 100,200 bytes
	req := newRequest("c-1", "u-1", long)
	moved, err := turn.Offload(ctx, store, "support", &req, 0)
	require.NoError(t, err)
	require.True(t, moved)
	require.Len(t, req.Attachments, 1)
	ref := req.Attachments[0]
	require.Equal(t, attachment.Ref{ID: attachment.IDOf([]byte(long)), Size: int64(len(long)), Name: "message.txt",
		MediaType: "text/plain; charset=utf-8"}, ref)
	require.Less(t, len(req.Text), 1300)
	require.True(t, strings.HasPrefix(req.Text, strings.Repeat("é", 100)), "the text's beginning stays")
	require.Contains(t, req.Text, fmt.Sprintf("The whole message, %d bytes, is attachment %s", len(long), ref.ID))
	require.NoError(t, turn.Decoder{}.Validate(req))
	got, err := store.Read(ctx, attachment.Owner{App: "support", User: "u-1"}, ref.ID, 0, int64(len(long)))
	require.NoError(t, err)
	require.Equal(t, long, string(got))

	short := newRequest("c-1", "u-1", "short")
	moved, err = turn.Offload(ctx, store, "", &short, 0)
	require.NoError(t, err)
	require.False(t, moved)
	require.Equal(t, "short", short.Text)
	require.Nil(t, short.Attachments)

	// A threshold of 10 cuts at a character boundary: 5 bytes would split an "é".
	small := newRequest("c-1", "u-1", "aéééééééééé")
	_, err = turn.Offload(ctx, store, "", &small, 10)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(small.Text, "aéé\n\n["), small.Text)
	_, err = store.Stat(ctx, attachment.Owner{App: turn.DefaultApp, User: "u-1"}, small.Attachments[0].ID)
	require.NoError(t, err, `"" is the default app`)

	full := newRequest("c-1", "u-1", long)
	full.Attachments = make([]attachment.Ref, turn.MaxAttachments)
	_, err = turn.Offload(ctx, store, "", &full, 0)
	require.ErrorContains(t, err, "holds 64 attachments already")
	require.Equal(t, long, full.Text, "a failed Offload leaves the request as it was")
	_, err = turn.Offload(ctx, nil, "", &full, 0)
	require.Error(t, err)
	noUser := newRequest("c-1", "", long)
	_, err = turn.Offload(ctx, store, "", &noUser, 0)
	require.ErrorIs(t, err, attachment.ErrInvalid)
	require.Equal(t, long, noUser.Text)
}

// A producer moves a 6 MB pasted log into the attachment store its consumers' Runner reads
// (Runner.Attachments), and produces a record of about 1.4 KB.
func ExampleOffload() {
	ctx := context.Background()
	store := attachment.NewMemoryStore() // in production: fsattachment or sqlattachment, shared with the consumers
	req := turn.Request{Schema: turn.SchemaVersion, ID: "6f1b7c1e-2d8f-4a53-9c1e-0f6f3a3c2b10", ConversationID: "c-7731",
		UserID: "u-12", Text: "why does it crash?\n" + strings.Repeat("2026-12-01 05:00:00 ERROR boom\n", 200_000)}
	if _, err := turn.Offload(ctx, store, "support", &req, 0); err != nil {
		fmt.Println(err)
		return
	}
	record, err := req.Encode()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(len(record) < 2000, req.Attachments[0].Size, req.Attachments[0].Name)
	// Output:
	// true 6200019 message.txt
}
