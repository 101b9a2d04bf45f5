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
	// A fixed vector (computed independently with Python uuid.uuid5), so that a change of derivation (which would re-run every side effect of
	// requests in flight during an upgrade) fails here.
	require.Equal(t, "03c03a32-076e-5c21-87b5-fd2a19ee6fc0", turn.ToolKey("6f1b7c1e-2d8f-4a53-9c1e-0f6f3a3c2b10", "refund"))
}
