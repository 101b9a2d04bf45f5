package chatcompletion

import (
	"context"
	"hash/maphash"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/tiktoken-go/tokenizer"

	"github.com/turnstile-go/turnstile/turn"
)

var (
	_ turn.Summarizer   = (*Client)(nil)
	_ turn.TokenCounter = (*Client)(nil)
)

// Summarize implements turn.Summarizer with the Client's loop (agent.Agent.Summarize): one
// request to the server, the summarization instruction as its system prompt, no tools. A
// Runner whose Model is the Client compacts with it unless Runner.Summarizer is set.
func (c *Client) Summarize(ctx context.Context, in turn.SummaryInput) (string, error) {
	return c.loop.Summarize(ctx, in)
}

// CountTokens implements turn.TokenCounter: the tokens of text in the encoding of
// Config.Model as OpenAI's tiktoken counts them (github.com/tiktoken-go/tokenizer, which
// embeds the vocabularies: o200k_base for gpt-4o, gpt-4.1, gpt-5 and the o-series, cl100k_base
// for gpt-4 and gpt-3.5), or turn.EstimateTokens for a model tiktoken does not know (an
// Ollama or vLLM model), whose tokenizer this client cannot see.
//
// Counts are cached by a hash of the text (the last 16,384 texts counted): a Runner counts a
// conversation's recent events on every turn, and the agent loop a turn's messages on every
// model call, and tokenizing costs about a microsecond a token.
func (c *Client) CountTokens(text string) int {
	codec := c.codec()
	if codec == nil || len(text) < minCachedText {
		return c.count(codec, text)
	}
	key := tokenKey{hash: maphash.String(tokenSeed, text), size: len(text)}
	if n, ok := c.counted.Get(key); ok {
		return n
	}
	n := c.count(codec, text)
	c.counted.Add(key, n)
	return n
}

// count counts text with codec, or estimates it without one.
func (c *Client) count(codec tokenizer.Codec, text string) int {
	if codec == nil {
		return turn.EstimateTokens(text)
	}
	n, err := codec.Count(text)
	if err != nil {
		return turn.EstimateTokens(text)
	}
	return n
}

// Token counts are cached for texts of at least minCachedText bytes, up to tokenCacheSize.
const (
	minCachedText  = 64
	tokenCacheSize = 16_384
)

// tokenKey is a counted text's cache key: its hash and its length.
type tokenKey struct {
	hash uint64
	size int
}

// tokenSeed seeds the text hashes of every Client's cache.
var tokenSeed = maphash.MakeSeed()

// codec returns the tokenizer of the Client's model, nil when tiktoken has none; it is made
// once, on first use, for the vocabularies are large.
func (c *Client) codec() tokenizer.Codec {
	c.codecOnce.Do(func() {
		if codec, err := tokenizer.ForModel(tokenizer.Model(c.cfg.Model)); err == nil {
			c.tokens = codec
			c.counted, _ = lru.New[tokenKey, int](tokenCacheSize) // a positive size never fails
		}
	})
	return c.tokens
}
