package agent_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/attachment"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turn/agent"
	"github.com/turnstile-go/turnstile/turn/internal/journaltest"
)

// readCall is a call of the read_attachment tool.
func readCall(id, ref string, offset, length int64) agent.ToolCall {
	return call(id, agent.AttachmentToolName, fmt.Sprintf(`{"id":%q,"offset":%d,"length":%d}`, ref, offset, length))
}

// A turn through a Runner: the model learns of the request's attachment from the user's
// message, reads it in pages with read_attachment (each read a journal step, recorded), and
// reads nothing of another user's.
func TestAttachmentToolReadsPagesAsSteps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := attachment.NewMemoryStore()
	content := strings.Repeat("0123456789", 3000) // 30,000 bytes
	ref, err := store.Put(ctx, attachment.Owner{App: turn.DefaultApp, User: "u-1"}, "server.log", "text/plain", strings.NewReader(content))
	require.NoError(t, err)
	theirs, err := store.Put(ctx, attachment.Owner{App: turn.DefaultApp, User: "u-2"}, "secret.txt", "", strings.NewReader("their secret"))
	require.NoError(t, err)

	p := &scripted{t: t, script: []func(agent.Request) (agent.Reply, error){
		reply("", readCall("r1", ref.ID, 0, 0), readCall("r2", ref.ID, 29_990, 100)),
		reply("", readCall("r3", theirs.ID, 0, 10), readCall("r4", ref.ID, 30_001, 10)),
		reply("read it"),
	}}
	a, err := agent.New(agent.Config{Provider: p, Tools: []agent.Tool{agent.AttachmentTool(store, 0)}})
	require.NoError(t, err)
	ib := journaltest.New()
	r := &turn.Runner{Model: a, Sessions: session.NewMemoryStore(), Inbox: ib, Attachments: store, TurnTimeout: 10 * time.Second}
	req := input("what failed?").Request
	req.Attachments = []attachment.Ref{ref}
	res, err := r.Run(ctx, req)
	require.NoError(t, err)
	require.Equal(t, "read it", res.Text)

	first := p.reqs[0]
	user := first.Messages[len(first.Messages)-1]
	require.Equal(t, agent.RoleUser, user.Role)
	require.Equal(t, "what failed?\n\n[Attachments of this message, which you can read with the read_attachment tool, by id and byte range:\n- "+
		ref.ID+`: "server.log", text/plain, 30000 bytes]`, user.Text)

	results := p.reqs[1].Messages[len(p.reqs[1].Messages)-1].Results
	require.Len(t, results, 2)
	require.Equal(t, "attachment "+ref.ID+": bytes 0 to 8191 (8192 bytes) of 30000, as text; the next page starts at offset 8192\n"+
		content[:8192], results[0].Output, "length 0 reads a page of 8 KiB")
	require.Equal(t, "attachment "+ref.ID+": bytes 29990 to 29999 (10 bytes) of 30000, as text; this page ends the attachment\n"+
		content[29_990:], results[1].Output, "a read past the end is short")
	results = p.reqs[2].Messages[len(p.reqs[2].Messages)-1].Results
	require.True(t, results[0].IsError)
	require.Contains(t, results[0].Output, "attachment: not found", "another user's attachment is not found (G7)")
	require.NotContains(t, results[0].Output, "secret")
	require.True(t, results[1].IsError)
	require.Contains(t, results[1].Output, "offset 30001 is past the end of the attachment (30000 bytes)")

	var reads int
	for _, s := range journaltest.Steps(t, ib, req) {
		if s.Name == agent.ToolStepPrefix+agent.AttachmentToolName {
			reads++
			var out struct{ Output string }
			require.NoError(t, json.Unmarshal(s.Output, &out))
		}
	}
	require.Equal(t, 4, reads, "each read is a journal step")

	// The next turn's history still lists the attachments of the first message: the session
	// keeps the references with it (turn.UserEvent).
	p.script = []func(agent.Request) (agent.Reply, error){reply("still here")}
	next := input("and the second error?").Request
	next.ConversationID, next.UserID = req.ConversationID, req.UserID
	_, err = r.Run(ctx, next)
	require.NoError(t, err)
	later := p.reqs[len(p.reqs)-1].Messages[0]
	require.Equal(t, agent.RoleUser, later.Role)
	require.Equal(t, "what failed?\n\n[Attachments of this message:\n- "+ref.ID+`: "server.log", text/plain, 30000 bytes]`, later.Text)
}

// Pages never cut a character: a page that would end inside one ends before it, and an
// offset inside one skips its tail; bytes that are not UTF-8 come in base64.
func TestAttachmentToolPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := attachment.NewMemoryStore()
	owner := attachment.Owner{App: "support", User: "u-1"}
	text := "aé" + strings.Repeat("b", 10) // é is 2 bytes: 1 and 2
	ref, err := store.Put(ctx, owner, "", "", strings.NewReader(text))
	require.NoError(t, err)
	binary, err := store.Put(ctx, owner, "", "", strings.NewReader("\xff\xfe\x00\x01"))
	require.NoError(t, err)
	tool := agent.AttachmentTool(store, 2)
	var got []string
	p := &scripted{t: t, script: []func(agent.Request) (agent.Reply, error){
		reply("", readCall("a", ref.ID, 0, 100), readCall("b", ref.ID, 2, 2), readCall("c", binary.ID, 0, 2), readCall("d", ref.ID, 13, 1)),
		func(req agent.Request) (agent.Reply, error) {
			for _, r := range req.Messages[len(req.Messages)-1].Results {
				got = append(got, r.Output)
			}
			return agent.Reply{Text: "ok"}, nil
		},
	}}
	a, err := agent.New(agent.Config{Provider: p, Tools: []agent.Tool{tool}})
	require.NoError(t, err)
	in := input("x")
	in.Session.Key.App = "support"
	_, err = a.Respond(ctx, in)
	require.NoError(t, err)
	require.Equal(t, []string{
		"attachment " + ref.ID + ": bytes 0 to 0 (1 bytes) of 13, as text; the next page starts at offset 1; the page ends before a character it would cut\na",
		"attachment " + ref.ID + ": bytes 3 to 3 (1 bytes) of 13, as text; the next page starts at offset 4; 1 bytes of a character cut at the requested offset skipped\nb",
		"attachment " + binary.ID + ": bytes 0 to 1 (2 bytes) of 4, as base64 (not UTF-8 text); the next page starts at offset 2\n" + base64.StdEncoding.EncodeToString([]byte("\xff\xfe")),
		"attachment " + ref.ID + ": offset 13 is its end (13 bytes); nothing more to read",
	}, got)
}

// Without the tool the note still lists the attachments, without the offer to read them; a
// tool gets the turn's session key.
func TestAttachmentNoteWithoutTool(t *testing.T) {
	t.Parallel()
	var got session.Key
	who := agent.NewTool("who", "", func(_ context.Context, c agent.Call, _ struct{}) (string, error) {
		got = c.Session
		return "", nil
	})
	p := &scripted{t: t, script: []func(agent.Request) (agent.Reply, error){reply("", call("w", "who", `{}`)), reply("ok")}}
	a, err := agent.New(agent.Config{Provider: p, Tools: []agent.Tool{who}})
	require.NoError(t, err)
	in := input("hi")
	in.Session.Key = session.Key{} // empty, as in an Input built by hand
	in.Request.Attachments = []attachment.Ref{{ID: attachment.IDOf(nil), Size: 0}}
	_, err = a.Respond(context.Background(), in)
	require.NoError(t, err)
	require.Equal(t, "hi\n\n[Attachments of this message:\n- "+attachment.IDOf(nil)+`: "", 0 bytes]`, p.reqs[0].Messages[0].Text)
	require.Equal(t, session.Key{App: turn.DefaultApp, User: in.Request.UserID, Conversation: in.Request.ConversationID}, got)
}
