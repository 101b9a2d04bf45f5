package turn

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/turnstile-go/turnstile/session"
)

// Defaults of the context budget.
const (
	// DefaultContextBudget is Runner.ContextBudget's default: 32,000 tokens per model request,
	// within every current model's context window, so that the Runner's part of it (half)
	// keeps a long conversation's cost per turn flat.
	DefaultContextBudget = 32_000
	// MinContextBudget is the smallest Runner.ContextBudget Validate accepts, in tokens.
	MinContextBudget = 128
	// CompactStep is the journal step name of a compaction (Journal.Next).
	CompactStep = "compact"
	// eventOverheadTokens is what counting adds per event or message: its role and framing
	// in the provider's encoding (OpenAI's chat format spends 3 to 4 tokens a message).
	eventOverheadTokens = 4
)

// DefaultSummaryInstruction is the summarization instruction a Runner uses when
// Runner.SummaryInstruction is "". The policy id (Runner.CompactionPolicy) hashes it, so a
// changed instruction starts a new summary instead of extending one written under another.
const DefaultSummaryInstruction = `You maintain the running summary of a conversation between a user and an assistant, so that the assistant can continue it without the messages summarized.
Write a new summary that replaces the previous one: keep every fact the user gave (names, numbers, order ids, dates, addresses, preferences), every commitment and decision the assistant made, the tools called and what they returned that still matters, and the open questions. Copy verbatim every line that starts with "FACT:". Drop small talk. Write plain text, no preamble.`

// ErrOverBudget is wrapped by the permanent error of a turn whose model input cannot fit the
// context budget whatever is compacted: a request (or the session's state) over half of
// Runner.ContextBudget. The reason gives both sizes in tokens. Send large inputs as
// attachments (Request.Attachments) instead.
var ErrOverBudget = errors.New("turn: model input over the context budget")

// ErrSummaryTooLong is wrapped by the error of a compaction whose summary is empty or over
// its budget (an eighth of Runner.ContextBudget): a failed attempt, never a truncated summary.
var ErrSummaryTooLong = errors.New("turn: summary over its budget")

// TokenCounter counts the tokens of a text as a model's tokenizer does. turn/chatcompletion's
// Client counts with OpenAI's encodings; EstimateTokens is the fallback.
type TokenCounter interface {
	CountTokens(text string) int
}

// TokenCounterFunc adapts a function to TokenCounter.
type TokenCounterFunc func(text string) int

// CountTokens calls f.
func (f TokenCounterFunc) CountTokens(text string) int { return f(text) }

// EstimateTokens estimates the tokens of text without a tokenizer: one token per three bytes
// of UTF-8, rounded up. BPE tokenizers (OpenAI's o200k and cl100k, Anthropic's) average about
// four bytes a token on English text and code and two to three on other scripts, so on those
// the estimate errs high. It errs low on text of short separated pieces: single digits or
// letters between spaces, IP addresses and number tables take one token per one to two bytes
// (up to three times the estimate; o200k splits digits from the space before them). For logs
// of that kind, give the Runner a tokenizer (Runner.Tokens) or a smaller ContextBudget.
func EstimateTokens(text string) int { return (len(text) + 2) / 3 }

// Summarizer writes the summary of a conversation's beginning for a compaction: the previous
// summary and the events to fold into it in, the new summary out. It is called as a journal
// step of the turn (CompactStep), so a summary that was written is never paid for again when
// the turn runs again; like a model it may be called again for the same step after a crash.
type Summarizer interface {
	Summarize(ctx context.Context, in SummaryInput) (string, error)
}

// SummarizerFunc adapts a function to Summarizer.
type SummarizerFunc func(ctx context.Context, in SummaryInput) (string, error)

// Summarize calls f.
func (f SummarizerFunc) Summarize(ctx context.Context, in SummaryInput) (string, error) {
	return f(ctx, in)
}

// SummaryInput is what a Summarizer gets.
type SummaryInput struct {
	// Request is the request whose turn compacts (for its ids; its text is not summarized).
	Request Request
	// Instruction is the summarization instruction (Runner.SummaryInstruction, or
	// DefaultSummaryInstruction).
	Instruction string
	// Previous is the summary of the events before Events; "" for the first compaction.
	Previous string
	// PreviousPolicy is the policy Previous was written under when it is not this
	// compaction's (Runner.CompactionPolicy changed); "" otherwise.
	PreviousPolicy string
	// Events are the events to fold in, oldest first: whole turns, no checkpoint.
	Events []session.Event
	// MaxTokens is the most tokens the summary may take; a longer one fails the attempt
	// (ErrSummaryTooLong).
	MaxTokens int
	// Step is the compaction's journal step; its Key is stable across runs of the turn.
	Step Step
	// Checkpoint is what the checkpoint of this summary will record: the seqs it folds
	// (From, Through: the whole range past the previous checkpoint, checkpoints included),
	// Policy and PreviousPolicy. Tokens is 0: the summary is not written yet. A decorator
	// (turn/turnotel's span) reads the compaction's figures from it.
	Checkpoint session.CheckpointData
}

// Transcript renders the previous summary and the events as the text a summarizing model
// reads (its user message), one line per event: "[seq N] author: text", with the Data of an
// event without text (a tool call) or of a user message (its attachments) after it. Both
// shipped summarizers (the default one and turn/agent's) send it, so that a summary reads
// the same whatever writes it.
func (in SummaryInput) Transcript() string {
	var b strings.Builder
	if in.Previous != "" {
		b.WriteString("Previous summary")
		if in.PreviousPolicy != "" {
			b.WriteString(" (written under an earlier summarization policy, " + in.PreviousPolicy + ")")
		}
		b.WriteString(":\n")
		b.WriteString(in.Previous)
		b.WriteString("\n\n")
	}
	b.WriteString("Messages to fold into the summary:\n")
	for _, e := range in.Events {
		b.WriteString("[seq ")
		b.WriteString(strconv.FormatInt(e.Seq, 10))
		b.WriteString("] ")
		b.WriteString(cmp.Or(e.Author, "assistant"))
		b.WriteString(": ")
		b.WriteString(e.Text)
		// Data is what an event without text says (a tool call), or a user message's
		// attachments; a final answer's Data is the provider's metadata, noise to a summary.
		if len(e.Data) > 0 && (e.Text == "" || e.Author == "user") {
			b.WriteString(" ")
			b.Write(e.Data)
		}
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "\nWrite the new summary in at most %d tokens.", in.MaxTokens)
	return b.String()
}

// modelSummarizer is the Summarizer of a Model that is not one: it asks the model itself, as
// a turn of an empty session whose message is the instruction and the transcript, and takes
// the text of its last event. Steps the model takes run unrecorded: the compaction is the
// recorded step.
type modelSummarizer struct{ m ModelClient }

func (s modelSummarizer) Summarize(ctx context.Context, in SummaryInput) (string, error) {
	req := in.Request
	req.Text = in.Instruction + "\n\n" + in.Transcript()
	out, err := s.m.Respond(ctx, Input{Request: req, Session: session.Session{Key: session.Key{User: req.UserID, Conversation: req.ConversationID}}})
	if err != nil {
		return "", err
	}
	if len(out.Events) == 0 {
		return "", errors.New("summarizing model returned no events")
	}
	return out.Events[len(out.Events)-1].Text, nil
}

// contextBudget, summarizer, tokens and summaryInstruction are the effective settings.
func (r *Runner) contextBudget() int { return cmp.Or(r.ContextBudget, DefaultContextBudget) }
func (r *Runner) summaryInstruction() string {
	return cmp.Or(r.SummaryInstruction, DefaultSummaryInstruction)
}
func (r *Runner) summarizer() Summarizer {
	if r.Summarizer != nil {
		return r.Summarizer
	}
	return ModelSummarizer(r.Model)
}
func (r *Runner) tokens() TokenCounter {
	if r.Tokens != nil {
		return r.Tokens
	}
	return ModelTokenCounter(r.Model)
}

// ModelSummarizer returns the Summarizer a Runner whose Summarizer is nil compacts with: m
// itself when it is a Summarizer, else m asked with the summarization instruction and the
// transcript as the message of a turn of an empty session. A decorator of a ModelClient
// (turn/turnotel's) implements Summarize with it, so that wrapping a Model changes nothing.
func ModelSummarizer(m ModelClient) Summarizer {
	if s, ok := m.(Summarizer); ok {
		return s
	}
	return modelSummarizer{m}
}

// ModelTokenCounter returns the TokenCounter a Runner whose Tokens is nil counts with: m
// itself when it is a TokenCounter, else EstimateTokens.
func ModelTokenCounter(m ModelClient) TokenCounter {
	if c, ok := m.(TokenCounter); ok {
		return c
	}
	return TokenCounterFunc(EstimateTokens)
}

// CompactionPolicy returns the id of the Runner's compaction policy, "p1-" and 8 hex digits
// of a SHA-256 of the summarization instruction: what a summary keeps. A checkpoint records
// it (session.CheckpointData.Policy); a turn whose latest checkpoint has another policy
// compacts at once, telling the summarizer the old summary's policy and recording it as
// PreviousPolicy, so summaries of two policies are never mixed without a record. The budget
// is not part of it: it sizes summaries, and Runners of two budgets on one conversation (a
// rolling deploy) would otherwise rewrite its summary at every turn.
func (r *Runner) CompactionPolicy() string {
	sum := sha256.Sum256([]byte(r.summaryInstruction()))
	return "p1-" + hex.EncodeToString(sum[:4])
}

// view is what the model sees of a session: the latest checkpoint and the events after the
// range it covers.
type view struct {
	sess      session.Session // as loaded; Events may reach before the checkpoint
	cp        session.Checkpoint
	hasCP     bool
	uncovered []session.Event // the events after cp.Through, checkpoints left out
}

// loadView loads the session, creating it on first use, and reads back as far as the latest
// checkpoint's range needs: the window of HistoryLimit events first, more when the events the
// checkpoint does not cover reach before it (a turn that added more events than the window).
// No event leaves the model's view uncovered (G4).
func (r *Runner) loadView(ctx context.Context, key session.Key) (view, error) {
	sess, err := r.getOrCreate(ctx, key)
	if err != nil {
		return view{}, err
	}
	for {
		cp, idx, err := session.LatestCheckpoint(sess.Events)
		if err != nil {
			return view{}, Permanent(err)
		}
		need := int64(1) // the first seq the model must see
		if idx >= 0 {
			need = cp.Through + 1
		}
		if len(sess.Events) == 0 || sess.Events[0].Seq <= need || int64(len(sess.Events)) >= sess.EventCount {
			return view{sess: sess, cp: cp, hasCP: idx >= 0, uncovered: uncovered(sess.Events, need)}, nil
		}
		recent := sess.EventCount - need + 1
		if idx < 0 { // the checkpoint, if any, is before the window: read further back
			recent = min(sess.EventCount, 4*int64(len(sess.Events)))
		}
		if sess, err = r.Sessions.Get(ctx, key, int(recent)); err != nil {
			return view{}, fmt.Errorf("session get %d events: %w", recent, err)
		}
	}
}

// uncovered returns the events from seq need on, checkpoints left out (an earlier checkpoint
// than the latest may lie past the latest's range: a compaction need not fold the turn that
// stored the one before). Without a checkpoint in that range (most turns) it is a subslice of
// events: no copy on the turn's path.
func uncovered(events []session.Event, need int64) []session.Event {
	start := 0
	for start < len(events) && events[start].Seq < need {
		start++
	}
	events = events[start:len(events):len(events)]
	for i, e := range events {
		if e.Author == session.AuthorCheckpoint {
			out := append(make([]session.Event, 0, len(events)-1), events[:i]...)
			for _, e := range events[i+1:] {
				if e.Author != session.AuthorCheckpoint {
					out = append(out, e)
				}
			}
			return out
		}
	}
	return events
}

// checkAuthors refuses a model's events that take the author the Runner keeps for its
// checkpoints (session.AuthorCheckpoint): stored, such an event would read as the latest
// summary, or fail every later turn of the conversation as an unreadable one. A permanent
// error: the model's output, not the attempt, is at fault.
func checkAuthors(events []session.Event) error {
	for i, e := range events {
		if e.Author == session.AuthorCheckpoint {
			return Permanent(fmt.Errorf("model: event %d has the author %q, which the Runner keeps for its checkpoints", i, e.Author))
		}
	}
	return nil
}

// eventTokens counts an event as the model's input holds it.
func eventTokens(c TokenCounter, e session.Event) int {
	n := c.CountTokens(e.Text) + eventOverheadTokens
	if len(e.Data) > 0 {
		n += c.CountTokens(string(e.Data))
	}
	return n
}

// compaction is a compaction step's recorded output.
type compaction struct {
	Summary string `json:"summary"`
	session.CheckpointData
}

// compact keeps the model's input of the turn of in within the context budget: when the
// Runner's part of it (state, summary, the uncovered events, the request) is over half the
// budget, when more events are uncovered than HistoryLimit, or when the latest checkpoint has
// another policy, it folds the oldest uncovered turns into a new summary, as the journal step
// CompactStep (several, for a backlog over half the budget: chunkEnd), until the rest takes
// at most a quarter of the budget and half the window. A summarizer's failure fails the turn
// only when its input is over three quarters of the budget; else the turn goes on without
// compacting. It returns the checkpoint event to store with the turn (ok false when none ran)
// and updates in.Session.Events and in.Summary to what the model then sees.
func (r *Runner) compact(ctx context.Context, v view, in *Input) (session.Event, bool, error) {
	budget, counter, policy := r.contextBudget(), r.tokens(), r.CompactionPolicy()
	summaryMax := budget / 8
	fixed := counter.CountTokens(in.Request.Text) + counter.CountTokens(string(v.sess.State)) + 2*eventOverheadTokens
	if fixed+summaryMax > budget/2 {
		return session.Event{}, false, Permanent(fmt.Errorf("%w: the request and the session's state take %d tokens, and with a summary's %d that is over half the context budget of %d tokens (Runner.ContextBudget); send large inputs as attachments",
			ErrOverBudget, fixed, summaryMax, budget))
	}
	total := fixed
	if v.hasCP {
		total += counter.CountTokens(v.cp.Summary) + eventOverheadTokens
	}
	for _, e := range v.uncovered {
		total += eventTokens(counter, e)
	}
	stale := v.hasCP && v.cp.Policy != policy
	if total <= budget/2 && len(v.uncovered) <= r.historyLimit() && !stale {
		return session.Event{}, false, nil
	}
	if name, ok := in.Journal().nextRecorded(); ok && name != CompactStep {
		// An earlier run of this turn went on without compacting (it began before the
		// conversation needed it, under another budget, or before a deploy that brought
		// compaction): follow its journal rather than dead-letter a step mismatch; the next
		// turn compacts.
		return session.Event{}, false, nil
	}
	// Fold whole turns, oldest first, so that no tool call is parted from its output.
	rest := total - fixed
	if v.hasCP {
		rest -= counter.CountTokens(v.cp.Summary) + eventOverheadTokens
	}
	target := min(budget/4, budget/2-fixed-summaryMax)
	n := 0
	for n < len(v.uncovered) && (rest > target || len(v.uncovered)-n > r.historyLimit()/2 || n == 0) {
		id := v.uncovered[n].RequestID
		for n < len(v.uncovered) && v.uncovered[n].RequestID == id {
			rest -= eventTokens(counter, v.uncovered[n])
			n++
		}
	}
	if n == 0 {
		return session.Event{}, false, nil // a stale policy with nothing new to fold: keep it
	}
	folded := v.uncovered[:n]
	data := session.CheckpointData{From: folded[0].Seq, Policy: policy}
	sin := SummaryInput{Request: in.Request, Instruction: r.summaryInstruction(), MaxTokens: summaryMax}
	if v.hasCP {
		sin.Previous = v.cp.Summary
		data.From = v.cp.Through + 1
		if stale {
			sin.PreviousPolicy, data.PreviousPolicy = v.cp.Policy, v.cp.Policy
		}
	}
	// Fold in chunks of whole turns of at most half the budget each, so that no summarizer
	// request passes the budget either: a backlog (a deploy that brought compaction to long
	// conversations) folds in several steps of one turn, each summary the next one's Previous.
	var c compaction
	for start := 0; start < n; {
		end := chunkEnd(counter, folded, start, budget/2)
		sin.Events, data.Through = folded[start:end], folded[end-1].Seq
		var err error
		if c, err = r.compactStep(ctx, in, sin, data, counter); err != nil {
			var se *summarizerError
			if errors.As(err, &se) && ctx.Err() == nil && total <= budget*3/4 {
				// The input still fits with room for the turn: go on without this compaction
				// rather than fail a turn that needs none yet; the next turn tries again.
				r.logger().Warn("compaction failed; the turn goes on without it, its input still fits the budget",
					"request_id", in.Request.ID, "conversation_id", in.Request.ConversationID, "tokens", total, "budget", budget, "err", err)
				return session.Event{}, false, nil
			}
			return session.Event{}, false, err
		}
		sin.Previous, sin.PreviousPolicy = c.Summary, ""
		start = end
	}
	ev, err := session.NewCheckpointEvent(session.Checkpoint{Summary: c.Summary, CheckpointData: c.CheckpointData})
	if err != nil {
		return session.Event{}, false, Permanent(err)
	}
	in.Summary = c.Summary
	in.Session.Events = v.uncovered[n:]
	return ev, true, nil
}

// chunkEnd returns the end of the chunk of whole turns of events that starts at start and
// takes at most limit tokens (one turn at least, whatever its size).
func chunkEnd(counter TokenCounter, events []session.Event, start, limit int) int {
	end, size := start, 0
	for end < len(events) {
		id, next, turnSize := events[end].RequestID, end, 0
		for next < len(events) && events[next].RequestID == id {
			turnSize += eventTokens(counter, events[next])
			next++
		}
		if end > start && size+turnSize > limit {
			break
		}
		end, size = next, size+turnSize
	}
	return end
}

// compactStep runs one summary of a compaction as the journal step CompactStep: the recorded
// one when an earlier run of the turn completed it. A panic in the summarizer fails the
// attempt (a *PanicError).
func (r *Runner) compactStep(ctx context.Context, in *Input, sin SummaryInput, data session.CheckpointData, counter TokenCounter) (compaction, error) {
	summaryMax := sin.MaxTokens
	j := in.Journal()
	step := j.Next(CompactStep)
	sin.Step, sin.Checkpoint = step, data
	out, err := j.Run(ctx, step, func(ctx context.Context, _ string) (_ []byte, err error) {
		defer func() {
			if v := recover(); v != nil {
				err = &summarizerError{Recovered("summarizer", v)}
			}
		}()
		summary, err := r.summarizer().Summarize(ctx, sin)
		if err != nil {
			return nil, &summarizerError{fmt.Errorf("compaction: summarize seqs %d to %d: %w", data.From, data.Through, err)}
		}
		data.Tokens = counter.CountTokens(summary)
		if summary == "" || data.Tokens > summaryMax {
			return nil, &summarizerError{fmt.Errorf("%w: the summary of seqs %d to %d takes %d tokens, the bound is 1 to %d (an eighth of Runner.ContextBudget)",
				ErrSummaryTooLong, data.From, data.Through, data.Tokens, summaryMax)}
		}
		return json.Marshal(compaction{Summary: summary, CheckpointData: data}) // strings and numbers
	})
	if err != nil {
		return compaction{}, err
	}
	var c compaction
	if err := json.Unmarshal(out, &c); err != nil || c.Summary == "" {
		return compaction{}, Permanent(fmt.Errorf("turn: decode the recorded compaction step %d: %.80q", step.Ordinal, out))
	}
	return c, nil
}

// summarizerError marks an error of the summarizer itself (its error, its panic, a summary
// out of bounds), which a turn whose input still fits may go on without; a journal or store
// error is not one.
type summarizerError struct{ err error }

func (e *summarizerError) Error() string { return e.err.Error() }
func (e *summarizerError) Unwrap() error { return e.err }

// checkState refuses a model's new state that would take more than a quarter of the context
// budget: stored, it would leave later requests too little room and refuse them all
// (ErrOverBudget). A permanent error of the turn that writes it, with both sizes.
func (r *Runner) checkState(state []byte) error {
	if len(state) == 0 {
		return nil
	}
	budget := r.contextBudget()
	if n := r.tokens().CountTokens(string(state)); n > budget/4 {
		return Permanent(fmt.Errorf("%w: the model's new session state takes %d tokens, over a quarter of the context budget of %d tokens (Runner.ContextBudget); keep large data in an attachment or the host's own store",
			ErrOverBudget, n, budget))
	}
	return nil
}
