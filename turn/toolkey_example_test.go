package turn_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
)

// providerCall is a tool call as a model API returns it: its id is new in every response.
type providerCall struct {
	ID   string
	Name string
	Args json.RawMessage
}

// callsOf stands for the model API: the same request gets the same calls, with fresh ids.
func callsOf(in turn.Input) []providerCall {
	return []providerCall{
		{ID: "call_" + uuid.NewString(), Name: "refund", Args: json.RawMessage(`{"order":"A-1","cents":700}`)},
		{ID: "call_" + uuid.NewString(), Name: "email", Args: json.RawMessage(`{"to":"ada@example.com"}`)},
		{ID: "call_" + uuid.NewString(), Name: "refund", Args: json.RawMessage(`{"order":"A-2","cents":100}`)},
	}
}

// ordinalKeys keys each call by the tool's name and its ordinal among the turn's calls of it.
func ordinalKeys(in turn.Input, calls []providerCall) []string {
	seen := map[string]int{}
	var keys []string
	for _, c := range calls {
		seen[c.Name]++
		keys = append(keys, in.ToolKey(fmt.Sprintf("%s#%d", c.Name, seen[c.Name])))
	}
	return keys
}

// argumentKeys keys each call by the tool's name and a hash of its arguments.
func argumentKeys(in turn.Input, calls []providerCall) []string {
	var keys []string
	for _, c := range calls {
		sum := sha256.Sum256(c.Args)
		keys = append(keys, in.ToolKey(c.Name+":"+hex.EncodeToString(sum[:])))
	}
	return keys
}

// The call id comes from the tool's name and its ordinal in the turn: a re-run of the turn,
// whose tool calls the provider names afresh, yields the same keys.
func ExampleToolKey() {
	in := turn.Input{Request: turn.Request{ID: "6f1b7c1e-2d8f-4a53-9c1e-0f6f3a3c2b10"}}
	first, rerun := ordinalKeys(in, callsOf(in)), ordinalKeys(in, callsOf(in))
	fmt.Println(first[0] == rerun[0], first[1] == rerun[1], first[2] == rerun[2])
	// A key from the provider's tool-call id differs in the re-run: the refund would happen twice.
	c1, c2 := callsOf(in)[0], callsOf(in)[0]
	fmt.Println(in.ToolKey(c1.ID) == in.ToolKey(c2.ID))
	// Output:
	// true true true
	// false
}

// A re-run of the same request (after a crash past the model call), whose tool calls come
// back with different ids, derives the same keys from names and ordinals or from argument
// hashes, and different ones from the provider's ids.
func TestToolKeyStableAcrossRerunsWithNewToolCallIDs(t *testing.T) {
	t.Parallel()
	var runs [][]string
	var ids [][]string
	model := turn.ModelFunc(func(_ context.Context, in turn.Input) (turn.Output, error) {
		calls := callsOf(in)
		keys := append(ordinalKeys(in, calls), argumentKeys(in, calls)...)
		var byID []string
		for _, c := range calls {
			byID = append(byID, in.ToolKey(c.ID))
		}
		runs, ids = append(runs, keys), append(ids, byID)
		return turn.Output{}, fmt.Errorf("crash after the tool calls (attempt %d)", in.Attempt)
	})
	r := &turn.Runner{Model: model, Sessions: session.NewMemoryStore(), Inbox: inbox.NewMemoryInbox(), MaxAttempts: 3,
		Logger: slog.New(slog.DiscardHandler)}
	req := turn.Request{Schema: turn.SchemaVersion, ID: uuid.NewString(), ConversationID: "c", UserID: "u", Text: "refund both"}
	for range 3 {
		_, err := r.Run(context.Background(), req)
		require.Error(t, err)
	}
	require.Len(t, runs, 3)
	require.Equal(t, runs[0], runs[1])
	require.Equal(t, runs[0], runs[2])
	require.Len(t, runs[0], 6)
	require.Len(t, uniq(runs[0]), 6, "each call has a key of its own")
	for i := range ids[0] {
		require.NotEqual(t, ids[0][i], ids[1][i], "the provider's ids give new keys: the wrong choice")
	}
}

func uniq(ss []string) map[string]bool {
	m := map[string]bool{}
	for _, s := range ss {
		m[s] = true
	}
	return m
}
