package inboxtest

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/internal/suite"
)

// eraseCases are the subtests of inbox.Eraser, run when the inbox implements it (under
// "Eraser").
var eraseCases = []suite.Case[inbox.Eraser]{
	{Name: "EraseScopes", Run: testErase},
	{Name: "EraseWholeConversation", Run: testEraseWholeConversation},
	{Name: "EraseMany", Run: testEraseMany},
	{Name: "EraseInvalid", Run: testEraseInvalid},
}

// scoped returns a delivery of conversation whose key ends in suffix.
func scoped(t *testing.T, conversation, suffix string) inbox.Delivery {
	t.Helper()
	return inbox.Delivery{Key: "req-" + randID(t) + suffix, Conversation: conversation, Topic: "requests", Offset: 1}
}

// testErase: the entries a scope selects go whatever their status, with their steps and
// intents (pending ones too); an entry of the conversation under another suffix, and one of
// another conversation under the same suffix, stay.
func testErase(t *testing.T, b inbox.Eraser) {
	ctx := context.Background()
	conv, other := "conv-"+randID(t), "conv-"+randID(t)
	suffix, otherSuffix := "/owner-"+randID(t), "/owner-"+randID(t)
	done, dead, inProgress := scoped(t, conv, suffix), scoped(t, conv, suffix), scoped(t, conv, suffix)
	kept := []inbox.Delivery{scoped(t, conv, otherSuffix), scoped(t, other, suffix)}
	for _, d := range append([]inbox.Delivery{done, dead, inProgress}, kept...) {
		begin(t, b, d)
	}
	intents := 0
	if o, ok := b.(inbox.Outbox); ok {
		// A deferred step of the done request, promoted: a pending intent of its.
		_, err := o.RecordStep(ctx, done.Key, inbox.Step{Ordinal: 1, Name: "tool:send", Output: []byte("payload"), Deferred: true})
		require.NoError(t, err)
		n, err := o.Promote(ctx, done.Key, 0)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		intents = 1
		for _, d := range kept {
			_, err := o.RecordStep(ctx, d.Key, inbox.Step{Ordinal: 1, Name: "tool:send", Output: []byte("payload"), Deferred: true})
			require.NoError(t, err)
			_, err = o.Promote(ctx, d.Key, 0)
			require.NoError(t, err)
		}
	}
	if j, ok := b.(inbox.Journal); ok {
		_, err := j.RecordStep(ctx, inProgress.Key, inbox.Step{Ordinal: 1, Name: "model", Output: []byte("reply")})
		require.NoError(t, err)
	}
	require.NoError(t, b.Complete(ctx, done.Key, []byte("result")))
	require.NoError(t, b.MarkDead(ctx, dead.Key, "poison"))

	n, err := b.Erase(ctx, []inbox.Scope{{Conversation: conv, KeySuffix: suffix}})
	require.NoError(t, err)
	require.EqualValues(t, 3+intents, n, "three entries and their intents")
	for _, d := range []inbox.Delivery{done, dead, inProgress} {
		_, err := b.Get(ctx, d.Key)
		require.ErrorIs(t, err, inbox.ErrNotFound, "%s", d.Key)
		if j, ok := b.(inbox.Journal); ok {
			steps, err := j.Steps(ctx, d.Key)
			require.NoError(t, err)
			require.Empty(t, steps, "%s: its steps go with it", d.Key)
		}
	}
	for _, d := range kept {
		getEntry(t, b, d.Key)
	}
	if o, ok := b.(inbox.Outbox); ok {
		for _, c := range []string{conv, other} {
			its, err := o.Intents(ctx, inbox.IntentFilter{Conversation: c})
			require.NoError(t, err)
			require.Len(t, its, 1, "conversation %s keeps the intent of the entry out of scope", c)
			require.NotEqual(t, done.Key, its[0].Key)
		}
	}

	n, err = b.Erase(ctx, []inbox.Scope{{Conversation: conv, KeySuffix: suffix}})
	require.NoError(t, err)
	require.Zero(t, n, "nothing left to erase")
	// An erased request delivered again runs as new.
	require.Equal(t, inbox.StatusNew, begin(t, b, done).Status)
}

// testEraseWholeConversation: an empty suffix selects every key of the conversation.
func testEraseWholeConversation(t *testing.T, b inbox.Eraser) {
	ctx := context.Background()
	conv := "conv-" + randID(t)
	gone := []inbox.Delivery{scoped(t, conv, "/a"), scoped(t, conv, "/b")}
	kept := scoped(t, "conv-"+randID(t), "/a")
	for _, d := range append(gone, kept) {
		begin(t, b, d)
	}
	n, err := b.Erase(ctx, []inbox.Scope{{Conversation: conv}})
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	for _, d := range gone {
		_, err := b.Get(ctx, d.Key)
		require.ErrorIs(t, err, inbox.ErrNotFound)
	}
	getEntry(t, b, kept.Key)
}

// testEraseMany: more conversations and entries than a store may name in one statement, and
// scopes that select nothing.
func testEraseMany(t *testing.T, b inbox.Eraser) {
	ctx := context.Background()
	const convs = 450
	suffix := "/owner-" + randID(t)
	var scopes []inbox.Scope
	var gone []string
	for i := range convs {
		conv := fmt.Sprintf("conv-%s-%d", randID(t), i)
		scopes = append(scopes, inbox.Scope{Conversation: conv, KeySuffix: suffix})
		if i%10 != 0 {
			continue // a scope without entries
		}
		d := scoped(t, conv, suffix)
		begin(t, b, d)
		gone = append(gone, d.Key)
	}
	kept := scoped(t, scopes[0].Conversation, "/owner-"+randID(t))
	begin(t, b, kept)
	n, err := b.Erase(ctx, scopes)
	require.NoError(t, err)
	require.EqualValues(t, len(gone), n)
	for _, k := range gone {
		_, err := b.Get(ctx, k)
		require.ErrorIs(t, err, inbox.ErrNotFound)
	}
	getEntry(t, b, kept.Key)
}

// testEraseInvalid: an empty conversation or too many scopes are ErrInvalid, with nothing
// erased; no scopes erase nothing; a cancelled context fails.
func testEraseInvalid(t *testing.T, b inbox.Eraser) {
	ctx := context.Background()
	d := scoped(t, "conv-"+randID(t), "/a")
	begin(t, b, d)
	_, err := b.Erase(ctx, []inbox.Scope{{Conversation: d.Conversation}, {KeySuffix: "/a"}})
	require.ErrorIs(t, err, inbox.ErrInvalid)
	_, err = b.Erase(ctx, make([]inbox.Scope, inbox.MaxEraseScopes+1))
	require.ErrorIs(t, err, inbox.ErrInvalid)
	getEntry(t, b, d.Key)

	n, err := b.Erase(ctx, nil)
	require.NoError(t, err)
	require.Zero(t, n)

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = b.Erase(cctx, []inbox.Scope{{Conversation: d.Conversation}})
	require.Error(t, err)
	getEntry(t, b, d.Key)
}
