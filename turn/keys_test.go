package turn_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
)

// Golden tests: the inbox key, the tool keys and the event ids are stored data (inbox rows,
// payment and mail services' dedup tables, session events). A change of their bytes would
// orphan every inbox entry and re-run every side effect of the requests in flight during an
// upgrade, so each is pinned here for fixed inputs. The vectors were computed apart from this
// package, with Python's uuid module:
//
//	U = uuid.NAMESPACE_URL
//	ns = lambda name: uuid.uuid5(U, "https://github.com/turnstile-go/turnstile/" + name)
//	lp = lambda *ps: "".join(f"{len(p.encode())}:{p}" for p in ps)
//	inbox key: rid + "/" + str(uuid.uuid5(ns("inbox-scope"), lp(app, user, conversation)))
//	tool key, version 1 (ToolKey):  uuid.uuid5(ns("tool-key"), f"{len(rid)}:{rid}{call}")
//	tool key, version 2 (SessionToolKey, Input.ToolKey):
//	           uuid.uuid5(ns("tool-key/v2"), lp(app, user, conversation, rid, call))
//	event id:  uuid.uuid5(ns("event-id"), f"{rid}\x00{index}")
const goldenRequestID = "6f1b7c1e-2d8f-4a53-9c1e-0f6f3a3c2b10"

func TestInboxKeyGolden(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ app, user, conversation, want string }{
		{turn.DefaultApp, "u-12", "c-7731", goldenRequestID + "/9d005692-061b-5303-a18b-6bc66636f83b"},
		{"support", "u-12", "c-7731", goldenRequestID + "/45ad3985-10f7-562a-8f0d-4992967e7ff8"},
		// Lengths are counted in bytes.
		{turn.DefaultApp, "u-ü", "c-7731", goldenRequestID + "/02818135-0657-59e9-8d4c-e8409563c69b"},
	} {
		req := turn.Request{ID: goldenRequestID, UserID: c.user, ConversationID: c.conversation}
		require.Equal(t, c.want, turn.InboxKey(c.app, req), "%+v", c)
		r := &turn.Runner{App: c.app}
		require.Equal(t, c.want, r.InboxKey(req), "Runner.InboxKey with App %q", c.app)
	}
	require.Equal(t, turn.InboxKey(turn.DefaultApp, turn.Request{ID: goldenRequestID, UserID: "u-12", ConversationID: "c-7731"}),
		(&turn.Runner{}).InboxKey(turn.Request{ID: goldenRequestID, UserID: "u-12", ConversationID: "c-7731"}),
		"a Runner without App uses DefaultApp")
}

func TestToolKeyGolden(t *testing.T) {
	t.Parallel()
	key := session.Key{App: turn.DefaultApp, User: "u-12", Conversation: "c-7731"}
	in := turn.Input{Request: turn.Request{ID: goldenRequestID, UserID: key.User, ConversationID: key.Conversation}}
	for _, c := range []struct{ call, v1, v2 string }{
		{"refund", "03c03a32-076e-5c21-87b5-fd2a19ee6fc0", "1a085ab5-5ba8-5c66-820d-b89779ebbfd3"},
		{"lookup", "6b037d03-0ba4-57f5-a310-81df48c8f316", "067166b4-6186-5f20-95d5-14253d5c2ebc"},
		{"", "c6cc9d81-f46b-5d53-9ae2-9644188bb170", "31e94f0f-8132-596b-963b-ac81d82c0e9a"},
	} {
		require.Equal(t, c.v1, turn.ToolKey(goldenRequestID, c.call), "ToolKey (version 1), call %q", c.call)
		require.Equal(t, c.v2, turn.SessionToolKey(key, goldenRequestID, c.call), "SessionToolKey (version 2), call %q", c.call)
		require.Equal(t, c.v2, in.ToolKey(c.call), "Input.ToolKey(%q) is SessionToolKey with the turn's session key", c.call)
	}
}

// The event ids of a turn: the user's message is event 0, the model's events follow.
func TestEventIDGolden(t *testing.T) {
	t.Parallel()
	model := turn.ModelFunc(func(context.Context, turn.Input) (turn.Output, error) {
		return turn.Output{Events: []session.Event{{Author: "tool", Text: "looked up"}, {Text: "here it is"}}}, nil
	})
	sessions := session.NewMemoryStore()
	r := &turn.Runner{Model: model, Sessions: sessions, Inbox: inbox.NewMemoryInbox()}
	req := turn.Request{Schema: turn.SchemaVersion, ID: goldenRequestID, ConversationID: "c-7731", UserID: "u-12", Text: "hello"}
	_, err := r.Run(context.Background(), req)
	require.NoError(t, err)
	events, err := sessions.FindTurn(context.Background(), r.Key(req), goldenRequestID)
	require.NoError(t, err)
	var ids []string
	for _, e := range events {
		ids = append(ids, e.ID)
	}
	require.Equal(t, []string{
		"208afa61-b7db-5bb6-b00c-1ad0b5e26e2b",
		"685d6f7c-131f-501d-b333-a8489e618d6a",
		"99a47f51-c544-56a7-b947-ad5cfd7b292a",
	}, ids)
}
