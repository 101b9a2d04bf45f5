package chatcompletion_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turn/chatcompletion"
)

// The client counts with tiktoken's encoding of an OpenAI model (the same count again from
// its cache), and with the estimate for a model tiktoken does not know.
func TestCountTokens(t *testing.T) {
	t.Parallel()
	c, err := chatcompletion.New(chatcompletion.Config{BaseURL: "http://127.0.0.1:1/v1", Model: "gpt-4o"})
	require.NoError(t, err)
	require.Equal(t, 2, c.CountTokens("hello world"), "o200k_base: two tokens")
	long := strings.Repeat("the order A-10296 was charged twice; ", 20)
	n := c.CountTokens(long)
	require.Positive(t, n)
	require.Less(t, n, turn.EstimateTokens(long), "the estimate errs high")
	require.Equal(t, n, c.CountTokens(long), "cached")
	require.Greater(t, c.CountTokens(long+" and a second time"), n, "another text is counted anew")

	local, err := chatcompletion.New(chatcompletion.Config{BaseURL: "http://127.0.0.1:1/v1", Model: "llama3.2"})
	require.NoError(t, err)
	require.Equal(t, turn.EstimateTokens(long), local.CountTokens(long))
}
