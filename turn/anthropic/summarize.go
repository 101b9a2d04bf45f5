package anthropic

import (
	"context"

	"github.com/turnstile-go/turnstile/turn"
)

var _ turn.Summarizer = (*Client)(nil)

// Summarize implements turn.Summarizer with the Client's loop (agent.Agent.Summarize): one
// Messages request, the summarization instruction as its system prompt, no tools. A Runner
// whose Model is the Client compacts with it unless Runner.Summarizer is set. The Client is
// not a turn.TokenCounter: Anthropic's tokenizer is not published, and its count_tokens
// endpoint would cost a request per count, so the Runner counts with turn.EstimateTokens,
// which errs high.
func (c *Client) Summarize(ctx context.Context, in turn.SummaryInput) (string, error) {
	return c.loop.Summarize(ctx, in)
}
