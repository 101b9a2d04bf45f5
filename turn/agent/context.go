package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/turnstile-go/turnstile/turn"
)

// SummaryHeading introduces the conversation's summary in the system prompt (SystemPrompt).
const SummaryHeading = "Summary of the conversation so far (its earlier messages are not repeated below):"

// SystemPrompt returns the system prompt of a turn's model calls: system, then, when the
// Runner gave the turn a summary (turn.Input.Summary), SummaryHeading and the summary. Both
// protocols carry a system prompt outside the alternation of user and assistant messages, so
// the summary never breaks it.
func SystemPrompt(system, summary string) string {
	if summary == "" {
		return system
	}
	return JoinSystem(system, SummaryHeading+"\n"+summary)
}

// JoinSystem joins the parts of a system prompt that are not empty with a blank line: a
// client's own prompt (its Config.SystemPrompt) and a request's (Request.System).
func JoinSystem(parts ...string) string {
	var out string
	for _, p := range parts {
		switch {
		case p == "":
		case out == "":
			out = p
		default:
			out += "\n\n" + p
		}
	}
	return out
}

var (
	_ turn.Summarizer   = (*Agent)(nil)
	_ turn.TokenCounter = (*Agent)(nil)
)

// Summarize implements turn.Summarizer with the Agent's provider: one call whose system
// prompt is the summarization instruction and whose one user message is in.Transcript(),
// with no tools, under the compaction's step (in.Step). Its errors are the provider's; a
// reply with tool calls or without text is an error.
func (a *Agent) Summarize(ctx context.Context, in turn.SummaryInput) (string, error) {
	reply, err := a.cfg.Provider.Complete(ctx, Request{
		System: in.Instruction, Messages: []Message{{Role: RoleUser, Text: in.Transcript()}}, Step: in.Step,
	})
	switch {
	case err != nil:
		return "", err
	case len(reply.ToolCalls) > 0 || reply.Text == "":
		return "", errors.New("agent: the summarizing model's reply has no text, or calls tools")
	}
	return reply.Text, nil
}

// CountTokens implements turn.TokenCounter: the provider's count when it is a
// turn.TokenCounter (turn/chatcompletion's Client is), else turn.EstimateTokens.
func (a *Agent) CountTokens(text string) int {
	if c, ok := a.cfg.Provider.(turn.TokenCounter); ok {
		return c.CountTokens(text)
	}
	return turn.EstimateTokens(text)
}

// messageOverhead is the tokens counted per message beside its content: its role and
// framing (OpenAI's chat format spends 3 to 4 a message).
const messageOverhead = 4

// RequestTokens counts the tokens of req as CountTokens counts them: the system prompt, each
// message's text, tool calls (name and arguments) and results, and the tools' names,
// descriptions and schemas, with a few tokens of framing per message. The Agent fails a turn
// whose model call would exceed the turn's context budget (turn.Input.ContextBudget) by it.
func (a *Agent) RequestTokens(req Request) int {
	n := a.CountTokens(req.System) + messageOverhead
	for _, m := range req.Messages {
		n += a.CountTokens(m.Text) + messageOverhead
		for _, c := range m.ToolCalls {
			n += a.CountTokens(c.Name) + a.CountTokens(string(c.Arguments)) + messageOverhead
		}
		for _, r := range m.Results {
			n += a.CountTokens(r.Output) + messageOverhead
		}
	}
	for _, t := range req.Tools {
		schema, err := json.Marshal(t.Schema)
		if err != nil {
			schema = []byte(fmt.Sprint(t.Schema))
		}
		n += a.CountTokens(t.Name) + a.CountTokens(t.Description) + a.CountTokens(string(schema)) + messageOverhead
	}
	return n
}
