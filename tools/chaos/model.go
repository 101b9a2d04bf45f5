package chaos

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
)

// modelFaults are the faults the fake model injects by itself.
type modelFaults struct {
	Seed uint64
	// SlowShare of the requests sleep up to SlowMax; FailShare fail their first attempt.
	SlowShare, FailShare float64
	SlowMax              time.Duration
	// BurstLength is how long the model answers 429 after SIGUSR1.
	BurstLength time.Duration
}

// fate is what the model does with one request, the same on every member and attempt.
type fate struct {
	slow      time.Duration
	failFirst bool
}

// fateOf draws the fate of a request from the seed and its id.
func (f modelFaults) fateOf(requestID string) fate {
	h := fnv.New64a()
	_ = binary.Write(h, binary.LittleEndian, f.Seed)
	h.Write([]byte(requestID))
	x := h.Sum64()
	u := func(shift uint) float64 { return float64((x>>shift)&0xffff) / 0x10000 }
	var out fate
	if u(0) < f.SlowShare {
		out.slow = 200*time.Millisecond + time.Duration(u(16)*float64(max(0, f.SlowMax-200*time.Millisecond)))
	}
	out.failFirst = u(32) < f.FailShare
	return out
}

// poisonSuffix ends the text of a request whose model call kills its member.
const poisonSuffix = " poison"

// userText is the message of the n-th (1-based) request of a conversation, of kind k.
func userText(conv string, n int, k kind) string {
	return fmt.Sprintf("%s #%d", conv, n) + k.suffix()
}

// replyText is the model's answer to text when the last user message of the history it was
// given is prev ("" for none). The checker rebuilds it from the stored history: a reply that
// quotes another message than the one before it in the session is a context miss.
func replyText(text, prev string) string {
	if prev == "" {
		return fmt.Sprintf("re %q; nothing before", text)
	}
	return fmt.Sprintf("re %q; before it %q", text, prev)
}

// model is the fake LLM of the members: a three-step agent on the turn's step journal
// (turn.Journal). Step 1 ("model") plans; step 2 ("tool:refund") issues a refund through an
// idempotent service (a PostgreSQL table keyed by the step's key, as a payment API dedups on
// an idempotency key); step 3 defers an email (Journal.Defer), which the relay delivers once
// the turn commits; step 4 ("model") answers by quoting the user's previous message from the
// history. Each model step counts its execution in the chaos_steps table right before it
// returns, so a step cut before its end (a kill while it sleeps) is no execution, and one
// counted twice ran again after it had completed once: a model call the journal did not save.
//
// It is also the turns' summarizer (turn.Summarizer, as turn/agent's Agent is through its
// provider): the members' Runners compact (HistoryLimit chaosHistoryLimit), and each
// compaction step counts its execution in chaos_compactions as its last act, as a model step
// does in chaos_steps.
type model struct {
	db         *sql.DB
	refund     string
	ran        string
	compacted  string
	faults     modelFaults
	burstUntil atomic.Int64 // Unix nanoseconds
}

func newModel(db *sql.DB, prefix string, f modelFaults) *model {
	return &model{
		db: db, faults: f,
		refund: `INSERT INTO ` + prefix + `chaos_refunds AS r (tool_key, request_id, conversation) VALUES ($1, $2, $3)
			ON CONFLICT (tool_key) DO UPDATE SET calls = r.calls + 1`,
		ran: `INSERT INTO ` + prefix + `chaos_steps AS s (request_id, ordinal) VALUES ($1, $2)
			ON CONFLICT (request_id, ordinal) DO UPDATE SET runs = s.runs + 1`,
		compacted: `INSERT INTO ` + prefix + `chaos_compactions AS c (request_id, ordinal) VALUES ($1, $2)
			ON CONFLICT (request_id, ordinal) DO UPDATE SET runs = c.runs + 1`,
	}
}

// chaosHistoryLimit is the members' and workers' turn.Runner.HistoryLimit: a conversation
// compacts when more than 6 events are uncovered (its fifth turn, then every third), folding
// all but its last turn, so that every cell's conversations compact under the kills.
const chaosHistoryLimit = 6

// Summarize implements turn.Summarizer: the summary is the previous one and the folded user
// messages, one a line, so that the checker knows what each checkpoint must say (every user
// message it covers, in order: summaryText). A 429 burst reaches it as it reaches the model.
func (m *model) Summarize(ctx context.Context, in turn.SummaryInput) (string, error) {
	if time.Now().UnixNano() < m.burstUntil.Load() {
		return "", turn.RetryAfter(250*time.Millisecond, errors.New("HTTP 429 Too Many Requests (chaos burst, summarizing)"))
	}
	var lines []string
	if in.Previous != "" {
		lines = append(lines, in.Previous)
	}
	for _, e := range in.Events {
		if e.Author == "user" {
			lines = append(lines, e.Text)
		}
	}
	if _, err := m.db.ExecContext(ctx, m.compacted, in.Request.ID, in.Step.Ordinal); err != nil {
		return "", unavailable(ctx, "compaction count", err)
	}
	return summaryText(lines), nil
}

// summaryText is the summary of a conversation's user messages, oldest first.
func summaryText(userTexts []string) string { return strings.Join(userTexts, "\n") }

// burst makes every call for the next BurstLength a rate limit (HTTP 429).
func (m *model) burst() {
	m.burstUntil.Store(time.Now().Add(m.faults.BurstLength).UnixNano())
}

// Respond implements turn.ModelClient.
func (m *model) Respond(ctx context.Context, in turn.Input) (turn.Output, error) {
	// The faults of the whole turn come before any step.
	if time.Now().UnixNano() < m.burstUntil.Load() {
		return turn.Output{}, turn.RetryAfter(250*time.Millisecond, errors.New("HTTP 429 Too Many Requests (chaos burst)"))
	}
	switch {
	case strings.HasSuffix(in.Request.Text, poisonSuffix):
		os.Exit(exitPoison) // the crash loop of G5: every attempt takes its member down
	case strings.HasSuffix(in.Request.Text, kindPanicModel.suffix()):
		panic("chaos: the model panics on request " + in.Request.ID)
	case strings.HasSuffix(in.Request.Text, kindLimited.suffix()):
		return turn.Output{}, turn.RetryAfter(100*time.Millisecond, errors.New("HTTP 429 Too Many Requests (always, for this request)"))
	}
	f := m.faults.fateOf(in.Request.ID)
	j := in.Journal()

	plan := j.Next("model")
	if _, err := j.Run(ctx, plan, func(ctx context.Context, _ string) ([]byte, error) {
		if f.slow > 0 {
			select {
			case <-time.After(f.slow):
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
		}
		return m.counted(ctx, in.Request.ID, plan, []byte(`{"plan":["refund","email","answer"]}`))
	}); err != nil {
		return turn.Output{}, err
	}

	if _, err := j.Run(ctx, j.Next("tool:"+refundTool), func(ctx context.Context, key string) ([]byte, error) {
		if _, err := m.db.ExecContext(ctx, m.refund, key, in.Request.ID, in.Request.ConversationID); err != nil {
			return nil, unavailable(ctx, "refund service", err)
		}
		if f.failFirst && in.Attempt == 1 {
			// Not recorded: the step runs again on the next attempt, with the same key.
			return nil, errors.New("model: HTTP 500 (chaos failure after the refund)")
		}
		return []byte(`{"refunded":true}`), nil
	}); err != nil {
		return turn.Output{}, err
	}

	if _, err := j.Defer(ctx, j.Next(emailTool), emailTool, emailArgs{Conversation: in.Request.ConversationID, RequestID: in.Request.ID}); err != nil {
		return turn.Output{}, err
	}

	answer := j.Next("model")
	reply, err := j.Run(ctx, answer, func(ctx context.Context, _ string) ([]byte, error) {
		return m.counted(ctx, in.Request.ID, answer, []byte(replyText(in.Request.Text, lastUser(in.Session.Events))))
	})
	if err != nil {
		return turn.Output{}, err
	}
	return turn.Output{Events: []session.Event{{Author: "assistant", Text: string(reply)}}}, nil
}

// modelOrdinals are the ordinals of the agent's model steps: the plan and the answer, one
// later in a turn that compacted (its compaction is step 1).
var modelOrdinals = []int{1, 4}

// refundTool names the agent's refund step ("tool:refund").
const refundTool = "refund"

// counted counts an execution of the model step s of request id and returns out: the last
// thing a model step does, so that a step cut before it is no execution.
func (m *model) counted(ctx context.Context, id string, s turn.Step, out []byte) ([]byte, error) {
	if _, err := m.db.ExecContext(ctx, m.ran, id, s.Ordinal); err != nil {
		return nil, unavailable(ctx, "model step count", err)
	}
	return out, nil
}

// unavailable is the error of a call to the database on behalf of a step: ctx's cause when
// the turn's context ended, a turn.Unavailable otherwise (a killed connection is not the
// request's fault).
func unavailable(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return turn.Unavailable(fmt.Errorf("%s: %w", what, err))
}

// lastUser returns the text of the last user event, or "".
func lastUser(events []session.Event) string {
	for i := len(events) - 1; i >= 0; i-- {
		if events[i].Author == "user" {
			return events[i].Text
		}
	}
	return ""
}

// panickyStore is the members' session store: Append panics for the turn of a request of
// kindPanicStore, every time; every other call goes to the store.
type panickyStore struct {
	session.Store
}

// Append implements session.Store.
func (s panickyStore) Append(ctx context.Context, key session.Key, expectedVersion int64, t session.Turn) (session.Appended, error) {
	for _, e := range t.Events {
		if strings.HasSuffix(e.Text, kindPanicStore.suffix()) {
			panic("chaos: the session store panics on request " + t.RequestID)
		}
	}
	return s.Store.Append(ctx, key, expectedVersion, t)
}

// CheckConcurrency passes the store's own answer on, when it has one.
func (s panickyStore) CheckConcurrency(n int) error {
	if c, ok := s.Store.(interface{ CheckConcurrency(n int) error }); ok {
		return c.CheckConcurrency(n)
	}
	return nil
}
