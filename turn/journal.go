package turn

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/turnstile-go/turnstile/inbox"
)

// Bounds of a request's step journal that the Runner applies when its fields are zero.
const (
	// DefaultMaxSteps is Runner.MaxSteps' default: steps one turn may record.
	DefaultMaxSteps = 64
	// DefaultMaxJournalBytes is Runner.MaxJournalBytes' default: 1 MiB of step outputs.
	DefaultMaxJournalBytes = 1 << 20
)

// ErrJournalFull is wrapped by the permanent error of a step that would take a request's
// journal past Runner.MaxSteps steps or Runner.MaxJournalBytes bytes of outputs: a turn that
// runs away (a model that keeps calling tools) is dead-lettered instead of growing its
// journal without bound. The reason names the bound.
var ErrJournalFull = errors.New("turn: step journal full")

// ErrNoOutbox is wrapped by the permanent error of Journal.Defer when the Runner's Inbox is
// not an inbox.Outbox: a deferred side effect has nowhere to wait for its commit.
var ErrNoOutbox = errors.New("turn: the Runner's Inbox has no outbox (inbox.Outbox)")

// Step is one step of a turn, as Journal.Next names it: its ordinal in the turn, its name and
// the idempotency key of its side effects.
type Step struct {
	// Ordinal is the step's 1-based position in the turn: the order of the Next calls.
	Ordinal int
	// Name names what the step does ("model", "tool:refund").
	Name string
	// Key is the step's idempotency key: Input.ToolKey("NAME#ORDINAL"), the same on every
	// run of the turn. Pass it to the service a tool calls.
	Key string
}

// StepFunc runs a step: ctx is the turn's, key the step's idempotency key. Its output is
// recorded when it returns no error; an error is not recorded, so the step runs again on the
// next run of the turn, with the same key.
type StepFunc func(ctx context.Context, key string) ([]byte, error)

// Journal is a turn's step journal: it gives each step of the turn a stable identity (its
// ordinal and name) and records each completed step's output in the Runner's Inbox when that
// Inbox is an inbox.Journal (the memory and SQL inboxes are). When the request runs again
// (after a crash, a revoke, a timeout, a redelivery, a Temporal activity retry), a completed
// step returns its recorded output without running, and only the step that was in flight runs
// again, with the same key. So a kill mid-turn repays no model call that completed.
//
// A turn whose steps come out in another order than the journal's (a deploy that changed the
// agent between two deliveries of one request) fails with a permanent error wrapping
// inbox.ErrStepMismatch, which dead-letters the request with both names in its reason;
// re-driving it (inbox.Inbox.Redrive) clears its journal, so its steps run afresh, each with
// the key of its new identity.
//
// Get one from Input.Journal. Its methods are safe for concurrent use; to run steps in
// parallel (parallel tool calls), take their Next in order first and then Run them at once,
// so that each keeps its ordinal whatever order they finish in.
type Journal struct {
	ib       inbox.Journal // nil: steps run and are not recorded
	byHand   bool          // the journal of an Input built by hand: Defer records nothing
	key      string        // the request's inbox key
	tools    toolScope     // what the steps' keys derive from
	maxSteps int
	maxBytes int

	mu            sync.Mutex
	next          int
	reserved      int                // places under maxSteps taken by steps running or recording now
	reservedBytes int                // bytes of the steps recording now
	steps         map[int]inbox.Step // the recorded steps, loaded and recorded by this run
	bytes         int
	deferred      bool // a deferred step is among steps
	replayed      int  // steps answered from the journal without running
}

// newJournal returns the journal of a turn. loaded are the steps recorded before this run.
func newJournal(ib inbox.Journal, key string, tools toolScope, maxSteps, maxBytes int, loaded []inbox.Step) *Journal {
	j := &Journal{ib: ib, key: key, tools: tools, maxSteps: maxSteps, maxBytes: maxBytes}
	if len(loaded) > 0 { // most turns run no step again: no map until one is recorded
		j.steps = make(map[int]inbox.Step, len(loaded))
	}
	for _, s := range loaded {
		j.steps[s.Ordinal] = s
		j.bytes += len(s.Output)
		j.deferred = j.deferred || s.Deferred
	}
	return j
}

// Next names the turn's next step: it takes the next ordinal (1 for the first call) and
// derives the step's key. Name is what the step does; it must be the same on every run of the
// turn (no provider call id, no time). Next records nothing.
func (j *Journal) Next(name string) Step {
	j.mu.Lock()
	j.next++
	n := j.next
	j.mu.Unlock()
	return Step{Ordinal: n, Name: name, Key: j.tools.toolKey(name + "#" + strconv.Itoa(n))}
}

// Run runs step s through fn, or returns its recorded output without calling fn when an
// earlier run of the turn completed it. fn's output is recorded before Run returns, so the
// next step starts only after this one is durable.
//
// Errors: fn's, as it returned it (not recorded: the step runs again on the next run);
// a permanent error wrapping inbox.ErrStepMismatch when the journal holds another step at
// s.Ordinal; a permanent error wrapping ErrJournalFull past the Runner's bounds; the inbox's
// error when the record failed (the step then runs again on the next run, with its key).
func (j *Journal) Run(ctx context.Context, s Step, fn StepFunc) ([]byte, error) {
	if rec, ok, err := j.recorded(s, false); ok || err != nil {
		return rec.Output, err
	}
	// The step's place under MaxSteps is taken before fn runs: a step past the bound must not
	// perform its side effect (a refund, a paid model call) and then be refused.
	if err := j.reserve(s); err != nil {
		return nil, err
	}
	out, err := fn(ctx, s.Key)
	if err != nil {
		j.release(0)
		return nil, err
	}
	rec, err := j.record(ctx, inbox.Step{Ordinal: s.Ordinal, Name: s.Name, Output: out})
	return rec.Output, err
}

// Defer records step s as a deferred side effect instead of running it: the intent to call
// tool with args (encoded as JSON) and s.Key, which the Runner promotes to the outbox when
// the turn commits and a relay (inbox.Relay) delivers after. A turn that never commits
// (abandoned, a zombie's, dead-lettered) delivers nothing. Deferring a step an earlier run
// deferred returns its intent as recorded then.
//
// On the journal of an Input built by hand (a host's unit test) Defer returns the intent it
// would record and records nothing: there is no outbox, so nothing is delivered.
//
// Errors: a permanent error wrapping ErrNoOutbox when the Runner's Inbox is not an
// inbox.Outbox; Run's mismatch and bound errors; args that do not encode; the inbox's error.
func (j *Journal) Defer(ctx context.Context, s Step, tool string, args any) (Intent, error) {
	if _, ok := j.ib.(inbox.Outbox); !ok && !j.byHand {
		return Intent{}, Permanent(fmt.Errorf("%w: cannot defer %s", ErrNoOutbox, s.Name))
	}
	rec, ok, err := j.recorded(s, true)
	if !ok && err == nil {
		raw, merr := json.Marshal(args)
		if merr != nil {
			return Intent{}, Permanent(fmt.Errorf("turn: defer %s: encode arguments: %w", s.Name, merr))
		}
		data, merr := json.Marshal(Intent{Tool: tool, Args: raw, Key: s.Key})
		if merr != nil {
			return Intent{}, Permanent(fmt.Errorf("turn: defer %s: %w", s.Name, merr))
		}
		if err = j.reserve(s); err == nil {
			rec, err = j.record(ctx, inbox.Step{Ordinal: s.Ordinal, Name: s.Name, Output: data, Deferred: true})
		}
	}
	if err != nil {
		return Intent{}, err
	}
	return DecodeIntent(rec.Output)
}

// recorded returns the step recorded at s.Ordinal, if any: ok when it matches s (name and
// kind), a permanent mismatch error when it does not, and a permanent error for a step
// name a SQL inbox could not store as it is (invalid UTF-8, a NUL), which would mismatch
// itself on the next run.
func (j *Journal) recorded(s Step, deferred bool) (inbox.Step, bool, error) {
	if !utf8.ValidString(s.Name) || strings.ContainsRune(s.Name, 0) || s.Name == "" {
		return inbox.Step{}, false, Permanent(fmt.Errorf("%w: step %d's name %q is empty or not valid UTF-8 text (a NUL or invalid bytes)", inbox.ErrInvalid, s.Ordinal, s.Name))
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	rec, ok := j.steps[s.Ordinal]
	switch {
	case !ok:
		return inbox.Step{}, false, nil
	case rec.Name != s.Name || rec.Deferred != deferred:
		return inbox.Step{}, false, j.mismatch(s, deferred, rec)
	}
	j.replayed++
	return rec, true, nil
}

func (j *Journal) mismatch(s Step, deferred bool, rec inbox.Step) error {
	return Permanent(fmt.Errorf("%w: step %d is %q in the journal and %q in this run (did the agent change since the request's last run? re-drive the request to run its steps afresh)",
		inbox.ErrStepMismatch, s.Ordinal, kindName(rec.Name, rec.Deferred), kindName(s.Name, deferred)))
}

// reserve takes a place for step s under MaxSteps before it runs, so that steps run at once
// (parallel tool calls) cannot pass the bound together. record, or release on a failure,
// gives the place back.
func (j *Journal) reserve(s Step) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if n := len(j.steps) + j.reserved + 1; n > j.maxSteps {
		return Permanent(fmt.Errorf("%w: step %d (%s) is past the bound of %d steps a turn (Runner.MaxSteps)", ErrJournalFull, s.Ordinal, s.Name, j.maxSteps))
	}
	j.reserved++
	return nil
}

// release gives back a reserved place and bytes reserved bytes.
func (j *Journal) release(bytes int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.reserved--
	j.reservedBytes -= bytes
}

func kindName(name string, deferred bool) string {
	if deferred {
		return name + " (deferred)"
	}
	return name
}

// record stores s, whose place reserve took, within the byte bound (checked with the bytes
// of the steps recording at the same time), and returns the step the journal holds at its
// ordinal. The byte bound can only be checked once the step ran: a step whose output takes
// the journal past MaxJournalBytes has had its effect.
func (j *Journal) record(ctx context.Context, s inbox.Step) (inbox.Step, error) {
	j.mu.Lock()
	size := j.bytes + j.reservedBytes + len(s.Output)
	if size > j.maxBytes {
		j.reserved--
		j.mu.Unlock()
		return inbox.Step{}, Permanent(fmt.Errorf("%w: step %d (%s) takes the journal to %d bytes, past the bound of %d (Runner.MaxJournalBytes)", ErrJournalFull, s.Ordinal, s.Name, size, j.maxBytes))
	}
	j.reservedBytes += len(s.Output)
	j.mu.Unlock()
	stored := s
	if j.ib != nil {
		var err error
		stored, err = j.ib.RecordStep(ctx, j.key, s)
		switch {
		case errors.Is(err, inbox.ErrStepMismatch):
			j.release(len(s.Output))
			return inbox.Step{}, j.mismatch(Step{Ordinal: s.Ordinal, Name: s.Name}, s.Deferred, stored)
		case err != nil:
			j.release(len(s.Output))
			return inbox.Step{}, fmt.Errorf("turn: record step %d (%s): %w", s.Ordinal, s.Name, err)
		}
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.reserved--
	j.reservedBytes -= len(s.Output)
	if _, ok := j.steps[s.Ordinal]; !ok {
		if j.steps == nil {
			j.steps = make(map[int]inbox.Step)
		}
		j.steps[s.Ordinal] = stored
		j.bytes += len(stored.Output)
		j.deferred = j.deferred || stored.Deferred
	}
	return stored, nil
}

// nextRecorded returns the name of the step an earlier run recorded at the ordinal the next
// Next call takes, and whether there is one.
func (j *Journal) nextRecorded() (string, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	s, ok := j.steps[j.next+1]
	return s.Name, ok
}

// through returns what the turn's commit promotes: the turn's last step's ordinal when the
// journal holds a deferred step, noPromote when it holds none.
func (j *Journal) through() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.deferred || j.next == 0 { // no step of this turn can be a deferred one
		return noPromote
	}
	return j.next
}

// Replayed returns how many steps this run of the turn answered from the journal without
// running them.
func (j *Journal) Replayed() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.replayed
}

// Intent is a deferred side effect as turnstile encodes it in the outbox (inbox.Intent's
// Payload, as JSON): the tool to call, its arguments and the step's idempotency key. Package
// turn owns this format; DecodeIntent reads it.
type Intent struct {
	// Tool is the deferred tool's name.
	Tool string `json:"tool"`
	// Args are the tool's arguments, as JSON.
	Args json.RawMessage `json:"args"`
	// Key is the step's idempotency key (Step.Key): pass it to the service the tool calls.
	Key string `json:"key"`
}

// DecodeIntent decodes an inbox.Intent's Payload. Errors: a payload that is not an Intent's
// JSON, or has no tool or key.
func DecodeIntent(payload []byte) (Intent, error) {
	var in Intent
	if err := json.Unmarshal(payload, &in); err != nil {
		return Intent{}, fmt.Errorf("turn: decode intent: %w", err)
	}
	if in.Tool == "" || in.Key == "" {
		return Intent{}, fmt.Errorf("turn: decode intent: no tool or key in %.80q", payload)
	}
	return in, nil
}

// Journal returns the turn's step journal. The Runner sets it on the Input it gives the
// model; an Input built by hand (a host's unit test) gets one on first use that records
// nothing, so its steps always run and its deferred steps only return their intents. Copies of an Input share its journal once it has one.
func (in *Input) Journal() *Journal {
	if in.journal == nil {
		in.journal = newJournal(nil, "", in.toolScope(), DefaultMaxSteps, DefaultMaxJournalBytes, nil)
		in.journal.byHand = true
	}
	return in.journal
}

// Step runs fn as the turn's next step, named name: in.Journal().Run(ctx,
// in.Journal().Next(name), fn). See Journal for what is recorded and when. Errors: Run's.
func (in *Input) Step(ctx context.Context, name string, fn StepFunc) ([]byte, error) {
	j := in.Journal()
	return j.Run(ctx, j.Next(name), fn)
}

// RunStep is Input.Step for a step whose output is a Go value: fn's result is recorded as
// JSON and decoded back into a T on a run that finds it recorded. Errors: Step's, and a
// permanent error when the output does not encode or the recorded one does not decode.
func RunStep[T any](ctx context.Context, in *Input, name string, fn func(ctx context.Context, key string) (T, error)) (T, error) {
	var zero T
	out, err := in.Step(ctx, name, func(ctx context.Context, key string) ([]byte, error) {
		v, err := fn(ctx, key)
		if err != nil {
			return nil, err
		}
		data, err := json.Marshal(v)
		if err != nil {
			return nil, Permanent(fmt.Errorf("turn: step %s: encode output: %w", name, err))
		}
		return data, nil
	})
	if err != nil {
		return zero, err
	}
	var v T
	if err := json.Unmarshal(out, &v); err != nil {
		return zero, Permanent(fmt.Errorf("turn: step %s: decode recorded output: %w", name, err))
	}
	return v, nil
}

// maxSteps and maxJournalBytes are the effective journal bounds.
func (r *Runner) maxSteps() int        { return cmp.Or(r.MaxSteps, DefaultMaxSteps) }
func (r *Runner) maxJournalBytes() int { return cmp.Or(r.MaxJournalBytes, DefaultMaxJournalBytes) }
