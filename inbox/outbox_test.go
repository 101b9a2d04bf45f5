package inbox_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/inbox"
)

// Every IntentStatus reads back from its String, and nothing else parses.
func TestIntentStatusString(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, s := range inbox.IntentStatuses() {
		got, err := inbox.ParseIntentStatus(s.String())
		require.NoError(t, err)
		require.Equal(t, s, got)
		require.False(t, seen[s.String()], "two statuses print %q", s)
		seen[s.String()] = true
	}
	require.Len(t, seen, 3)
	for _, bad := range []string{"", "Pending", "done", "IntentStatus(0)"} {
		_, err := inbox.ParseIntentStatus(bad)
		require.ErrorIs(t, err, inbox.ErrInvalid, bad)
	}
	require.Equal(t, "IntentStatus(9)", inbox.IntentStatus(9).String())
	require.Equal(t, "k#3", inbox.IntentID("k", 3))
}
