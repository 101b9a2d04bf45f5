package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
)

// DefaultMaxModelSteps is Config.MaxModelSteps' default: model calls one turn may make.
const DefaultMaxModelSteps = 8

// ErrInvalidConfig is wrapped by New's errors, which name the field.
var ErrInvalidConfig = errors.New("agent: invalid config")

// ErrTooManySteps is wrapped by the permanent error of a turn whose model still asks for
// tools after Config.MaxModelSteps model calls: a model that keeps calling tools is
// dead-lettered with the bound in its reason instead of running on.
var ErrTooManySteps = errors.New("agent: model steps exhausted")

// Step names in the journal (turn.Journal.Next): the model call, and a tool call as
// ToolStepPrefix + the tool's name.
const (
	ModelStep      = "model"
	ToolStepPrefix = "tool:"
)

// callID is the pattern of the tool-call ids the loop keeps as the provider sent them: the
// characters Anthropic allows in a tool_use id (^[a-zA-Z0-9_-]+$), which OpenAI's ids use too.
var callID = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,256}$`)

// Config configures an Agent. Provider is required.
type Config struct {
	// Provider makes the model calls.
	Provider Provider
	// System is the system prompt of every model call; "" for none.
	System string
	// Tools are the tools the model may call (NewTool, NewDeferred), with unique names.
	Tools []Tool
	// MaxModelSteps bounds the model calls of one turn; 0 means DefaultMaxModelSteps. A turn
	// whose last allowed call still asks for tools fails with a permanent error wrapping
	// ErrTooManySteps. Each model call and each tool call is a journal step, so keep the
	// Runner's MaxSteps above MaxModelSteps times (1 + the tool calls of one reply).
	MaxModelSteps int
}

// Agent is the tool loop of a turn, a turn.ModelClient: it calls the model, runs the tools it
// asks for, and calls it again with their outputs until it answers without tools. Make one
// with New; it is safe for concurrent use. See the package doc for the journal steps and the
// session events of a turn.
type Agent struct {
	cfg   Config
	tools map[string]Tool
	specs []ToolSpec
	max   int
}

var _ turn.ModelClient = (*Agent)(nil)

// New returns an Agent for cfg. Errors: wrapping ErrInvalidConfig for a nil Provider or a
// negative MaxModelSteps; wrapping ErrInvalidTool for an invalid tool or a repeated name
// (ValidateTools).
func New(cfg Config) (*Agent, error) {
	switch {
	case cfg.Provider == nil:
		return nil, fmt.Errorf("%w: Provider: nil", ErrInvalidConfig)
	case cfg.MaxModelSteps < 0:
		return nil, fmt.Errorf("%w: MaxModelSteps: negative (%d); use 0 for %d", ErrInvalidConfig, cfg.MaxModelSteps, DefaultMaxModelSteps)
	}
	if err := ValidateTools(cfg.Tools); err != nil {
		return nil, err
	}
	a := &Agent{cfg: cfg, tools: make(map[string]Tool, len(cfg.Tools)), max: cfg.MaxModelSteps}
	if a.max == 0 {
		a.max = DefaultMaxModelSteps
	}
	for _, t := range cfg.Tools {
		a.tools[t.name] = t
		a.specs = append(a.specs, t.Spec())
	}
	return a, nil
}

// Respond runs the turn's tool loop. The history is History(in.Session.Events) and then
// in.Request.Text as a user message, with a note listing in.Request.Attachments (id, name,
// media type, size) when it has some. Each model call is a journal step (ModelStep) recording
// the Reply; each tool call of a reply takes its step (ToolStepPrefix + name) in call order,
// then the calls run in parallel, each through turn.Journal.Run (NewTool) or
// turn.Journal.Defer (NewDeferred). A call of a tool the Agent does not have goes back to the
// model as an error output, with no step.
//
// The Output's events are, per model call with tools, its assistant event (AssistantEvent)
// and its tools' outputs (ToolEvent) in call order, then the final answer last: Author
// "assistant", Text the reply's text, Data the reply's Data.
//
// Errors: the provider's, as it mapped them; a tool's turn-level error (see NewTool); the
// journal's (turn.Journal.Run, turn.Journal.Defer); a permanent error wrapping ErrTooManySteps
// past MaxModelSteps; a failed attempt for a final reply with no text.
func (a *Agent) Respond(ctx context.Context, in turn.Input) (turn.Output, error) {
	j := in.Journal()
	history := append(History(in.Session.Events), Message{Role: RoleUser, Text: a.userText(in.Request)})
	call := modelCall{system: SystemPrompt(a.cfg.System, in.Summary), budget: in.ContextBudget}
	var events []session.Event
	for n := 1; ; n++ {
		reply, err := a.model(ctx, j, call, history)
		if err != nil {
			return turn.Output{}, err
		}
		if len(reply.ToolCalls) == 0 {
			events = append(events, session.Event{Author: AuthorAssistant, Text: reply.Text, Data: reply.Data})
			return turn.Output{Events: events}, nil
		}
		if n >= a.max { // its tools' outputs would need another model call
			return turn.Output{}, turn.Permanent(fmt.Errorf("%w: the model still asks for tools after %d model calls (agent MaxModelSteps)", ErrTooManySteps, a.max))
		}
		ev, err := AssistantEvent(reply.Text, reply.ToolCalls)
		if err != nil {
			return turn.Output{}, turn.Permanent(err)
		}
		results, err := a.runTools(ctx, j, in.Replay, turnKey(in), reply.ToolCalls)
		if err != nil {
			return turn.Output{}, err
		}
		events = append(events, ev)
		for _, r := range results {
			events = append(events, ToolEvent(r))
		}
		history = append(history,
			Message{Role: RoleAssistant, Text: reply.Text, ToolCalls: reply.ToolCalls},
			Message{Role: RoleTool, Results: results})
	}
}

// modelCall is what the model calls of one turn share: the system prompt (with the
// conversation's summary) and the context budget in tokens (0: none).
type modelCall struct {
	system string
	budget int
}

// model runs the turn's next model call as a journal step and returns its reply, the
// recorded one when an earlier run completed the step.
func (a *Agent) model(ctx context.Context, j *turn.Journal, call modelCall, history []Message) (Reply, error) {
	step := j.Next(ModelStep)
	out, err := j.Run(ctx, step, func(ctx context.Context, _ string) ([]byte, error) {
		req := Request{System: call.system, Messages: history, Tools: a.specs, Step: step}
		if n := a.RequestTokens(req); call.budget > 0 && n > call.budget {
			return nil, turn.Permanent(fmt.Errorf("%w: model call %d would send %d tokens, the budget is %d (turn.Runner.ContextBudget); the turn's own tool outputs grew past it: read attachments in smaller pages",
				turn.ErrOverBudget, step.Ordinal, n, call.budget))
		}
		reply, err := a.cfg.Provider.Complete(ctx, req)
		if err != nil {
			return nil, err
		}
		if len(reply.ToolCalls) == 0 && reply.Text == "" {
			return nil, errors.New("agent: the model's reply has neither text nor tool calls")
		}
		normalize(&reply, step, history)
		data, err := json.Marshal(reply)
		if err != nil {
			return nil, turn.Permanent(fmt.Errorf("agent: encode the model's reply: %w", err))
		}
		return data, nil
	})
	if err != nil {
		return Reply{}, err
	}
	var reply Reply
	if err := json.Unmarshal(out, &reply); err != nil {
		return Reply{}, turn.Permanent(fmt.Errorf("agent: decode the recorded model step: %w", err))
	}
	return reply, nil
}

// normalize gives every tool call of a reply an id no other call in history (this turn's
// earlier replies and the session's) has, and JSON arguments, so the reply is recorded, and
// sent back, as a valid message: Anthropic wants tool_use ids unique in a conversation, and
// some servers number their calls per reply ("1", "2") or send none. A replaced id is
// "call_" with the step key's first 12 characters and the call's index, unique across turns.
func normalize(reply *Reply, step turn.Step, history []Message) {
	seen := make(map[string]bool, len(reply.ToolCalls))
	for _, m := range history {
		for _, c := range m.ToolCalls {
			seen[c.ID] = true
		}
	}
	for k := range reply.ToolCalls {
		c := &reply.ToolCalls[k]
		if c.ID == "" || seen[c.ID] || !callID.MatchString(c.ID) {
			c.ID = "call_" + strings.ReplaceAll(step.Key[:min(12, len(step.Key))], "-", "") + "_" + strconv.Itoa(k+1)
		}
		seen[c.ID] = true
		if !json.Valid(c.Arguments) {
			c.Arguments = RawArguments(string(c.Arguments))
		}
	}
}

// runTools runs the calls of one reply: their steps taken in call order, then the calls in
// parallel. It returns a result per call, in call order, or the first turn-level error.
func (a *Agent) runTools(ctx context.Context, j *turn.Journal, replay bool, key session.Key, calls []ToolCall) ([]ToolResult, error) {
	results := make([]ToolResult, len(calls))
	steps := make([]turn.Step, len(calls))
	for k, c := range calls {
		if _, ok := a.tools[c.Name]; ok {
			steps[k] = j.Next(ToolStepPrefix + c.Name)
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	for k, c := range calls {
		t, ok := a.tools[c.Name]
		if !ok {
			results[k] = ToolResult{CallID: c.ID, Name: c.Name, IsError: true,
				Output: fmt.Sprintf("error: unknown tool %q; the tools are the ones in this request's tool list", c.Name)}
			continue
		}
		call := Call{ID: c.ID, Name: c.Name, Ordinal: steps[k].Ordinal, Key: steps[k].Key, Arguments: c.Arguments, Replay: replay, Session: key}
		g.Go(func() (err error) {
			defer func() {
				if v := recover(); v != nil {
					err = turn.Recovered("tool "+c.Name, v)
				}
			}()
			var r toolOutput
			if t.Deferred() {
				r, err = deferCall(gctx, j, steps[k], t, call)
			} else {
				r, err = runCall(gctx, j, steps[k], t, call)
			}
			results[k] = ToolResult{CallID: c.ID, Name: c.Name, Output: r.Output, IsError: r.IsError}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return results, nil
}

// toolOutput is a tool step's output as the journal records it.
type toolOutput struct {
	Output  string `json:"output"`
	IsError bool   `json:"is_error,omitempty"`
}

// runCall runs a regular tool's call as its journal step.
func runCall(ctx context.Context, j *turn.Journal, s turn.Step, t Tool, call Call) (toolOutput, error) {
	out, err := j.Run(ctx, s, func(ctx context.Context, _ string) ([]byte, error) {
		text, err := t.run(ctx, call)
		r := toolOutput{Output: text}
		if err != nil {
			if turnLevel(ctx, err) {
				return nil, err
			}
			r = toolOutput{Output: "error: " + err.Error(), IsError: true}
		}
		return json.Marshal(r) // a string and a bool
	})
	if err != nil {
		return toolOutput{}, err
	}
	var r toolOutput
	if err := json.Unmarshal(out, &r); err != nil {
		return toolOutput{}, turn.Permanent(fmt.Errorf("agent: decode the recorded step %d (%s): %w", s.Ordinal, s.Name, err))
	}
	return r, nil
}

// deferCall records a deferred tool's call as a deferred journal step.
func deferCall(ctx context.Context, j *turn.Journal, s turn.Step, t Tool, call Call) (toolOutput, error) {
	args, err := t.decode(call.Arguments)
	if err != nil {
		return toolOutput{Output: "error: " + err.Error(), IsError: true}, nil
	}
	if _, err := j.Defer(ctx, s, t.name, args); err != nil {
		return toolOutput{}, err
	}
	return toolOutput{Output: "queued: " + t.name + " will run once this turn completes; do not call it again for the same request"}, nil
}

// turnLevel reports a tool error that fails the turn instead of going back to the model.
func turnLevel(ctx context.Context, err error) bool {
	var pe *turn.PanicError
	switch {
	case ctx.Err() != nil, errors.Is(err, context.Canceled), errors.Is(err, turn.ErrAbandoned), errors.As(err, &pe):
		return true
	}
	switch turn.Classify(err) {
	case turn.KindPermanent, turn.KindRateLimited, turn.KindRunAlone:
		return true
	}
	return false
}
