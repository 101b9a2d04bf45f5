package workflow

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/turn"
)

// Every turn.Kind has an activity error type of its own, and only the permanent one is left
// out of the retry policy's retries: a kind added to turn without a type here, or two kinds
// sharing one, fails this test.
func TestEveryKindHasAnErrorType(t *testing.T) {
	t.Parallel()
	types := map[string]turn.Kind{}
	for _, k := range turn.Kinds() {
		typ := errorType(k)
		require.NotEmpty(t, typ, "kind %v", k)
		require.False(t, strings.HasPrefix(typ, "Kind("), "kind %d has no name", int(k))
		prev, dup := types[typ]
		require.False(t, dup, "kinds %v and %v share the error type %q", prev, k, typ)
		types[typ] = k
	}
	for _, reserved := range []string{errTypeDuplicate, errTypeContinuing} {
		_, clash := types[reserved]
		require.False(t, clash, "a kind's error type is the workflow's own %q", reserved)
	}
	opts := (&worker{opts: WorkerOptions{Runner: &turn.Runner{}}}).activityOptions()
	require.Equal(t, []string{errorType(turn.KindPermanent)}, opts.RetryPolicy.NonRetryableErrorTypes)
}
