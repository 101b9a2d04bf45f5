package turn_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/turn"
)

func TestToolKey(t *testing.T) {
	t.Parallel()
	id := uuid.NewString()
	k := turn.ToolKey(id, "refund")
	require.Equal(t, k, turn.ToolKey(id, "refund"), "stable")
	require.NotEqual(t, k, turn.ToolKey(id, "email"))
	require.NotEqual(t, k, turn.ToolKey(uuid.NewString(), "refund"))
	require.NotEqual(t, turn.ToolKey("a", "b\x00c"), turn.ToolKey("a\x00b", "c"))
	parsed, err := uuid.Parse(k)
	require.NoError(t, err)
	require.Equal(t, uuid.Version(5), parsed.Version())
	// The bytes for fixed inputs are pinned in TestToolKeyGolden.
}
