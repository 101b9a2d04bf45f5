package turn_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
	"github.com/turnstile-go/turnstile/internal/sqltest"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/session/sqlsession"
	"github.com/turnstile-go/turnstile/turn"
)

// stepAgent is a three-step agent (model, tool, model) written with Input.Step: it counts the
// runs of each step and the keys each ran with, and fails the turn right after step failAfter
// (0: never) on its first run, as a kill between steps would end it.
type stepAgent struct {
	mu        sync.Mutex
	runs      map[string]int      // step name#ordinal -> runs
	keys      map[string][]string // step name#ordinal -> keys it ran with
	failAfter int
	failed    bool
	names     []string // the step names, in order; default model, tool:lookup, model
	deferred  string   // when set, this step name is deferred through the outbox
}

var errKilled = errors.New("killed between steps")

func (a *stepAgent) Respond(ctx context.Context, in turn.Input) (turn.Output, error) {
	names := a.names
	if names == nil {
		names = []string{"model", "tool:lookup", "model"}
	}
	var last string
	j := in.Journal()
	for i, name := range names {
		st := j.Next(name)
		if name == a.deferred {
			if _, err := j.Defer(ctx, st, "email", map[string]string{"to": in.Request.UserID}); err != nil {
				return turn.Output{}, err
			}
		} else {
			out, err := j.Run(ctx, st, func(ctx context.Context, key string) ([]byte, error) {
				a.mu.Lock()
				defer a.mu.Unlock()
				id := fmt.Sprintf("%s#%d", name, st.Ordinal)
				a.runs[id]++
				a.keys[id] = append(a.keys[id], key)
				return []byte(fmt.Sprintf("%q", id+" of "+in.Request.ID)), nil
			})
			if err != nil {
				return turn.Output{}, err
			}
			last = string(out)
		}
		a.mu.Lock()
		kill := !a.failed && a.failAfter == i+1
		a.failed = a.failed || kill
		a.mu.Unlock()
		if kill {
			return turn.Output{}, errKilled
		}
	}
	return turn.Output{Events: []session.Event{{Text: last}}}, nil
}

func newStepAgent(failAfter int) *stepAgent {
	return &stepAgent{runs: map[string]int{}, keys: map[string][]string{}, failAfter: failAfter}
}

// A three-step turn that fails after each step in turn, then runs again: the steps that
// completed do not run again, the rest run once, every step ran with one key, and the turn is
// stored once with one result.
func TestJournalStepsDoNotRunAgain(t *testing.T) {
	t.Parallel()
	for after := 1; after <= 3; after++ {
		t.Run(fmt.Sprintf("fails after step %d", after), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			agent := newStepAgent(after)
			sessions, ib := session.NewMemoryStore(), inbox.NewMemoryInbox()
			r := &turn.Runner{Model: agent, Sessions: sessions, Inbox: ib}
			req := newRequest("c-steps", "u-1", "three steps")
			_, err := r.Run(ctx, req)
			require.ErrorIs(t, err, errKilled)
			require.Equal(t, turn.KindAttempt, turn.Classify(err))

			steps, err := ib.Steps(ctx, r.InboxKey(req))
			require.NoError(t, err)
			require.Len(t, steps, after, "each completed step is recorded before the next starts")

			res, err := r.Run(ctx, req)
			require.NoError(t, err)
			require.Equal(t, 2, res.Attempt)
			require.Equal(t, fmt.Sprintf("%q", "model#3 of "+req.ID), res.Text)
			for _, id := range []string{"model#1", "tool:lookup#2", "model#3"} {
				require.Equal(t, 1, agent.runs[id], "%s ran once over both runs", id)
				require.Len(t, agent.keys[id], 1, id)
			}
			n, _ := historyOf(t, sessions, r.Key(req), req.ID)
			require.Equal(t, 2, n, "the user's message and the answer, once")
		})
	}
}

// A step whose record did not land (the inbox failed) runs again on the next run with the
// same key: the key comes from the step's ordinal and name, not from the run.
func TestJournalStepInFlightRunsAgainWithItsKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	agent := newStepAgent(0)
	ib := &failingRecord{MemoryInbox: inbox.NewMemoryInbox(), failAt: 2}
	r := &turn.Runner{Model: agent, Sessions: session.NewMemoryStore(), Inbox: ib}
	req := newRequest("c-inflight", "u-1", "three steps")
	_, err := r.Run(ctx, req)
	require.ErrorIs(t, err, errRecordLost)
	_, err = r.Run(ctx, req)
	require.NoError(t, err)
	require.Equal(t, 1, agent.runs["model#1"])
	require.Equal(t, 2, agent.runs["tool:lookup#2"], "the step in flight ran again")
	require.Equal(t, agent.keys["tool:lookup#2"][0], agent.keys["tool:lookup#2"][1], "with the same key")
	require.Equal(t, 1, agent.runs["model#3"])
}

var errRecordLost = errors.New("record lost")

// failingRecord loses the record of step failAt once.
type failingRecord struct {
	*inbox.MemoryInbox
	mu     sync.Mutex
	failAt int
}

func (b *failingRecord) RecordStep(ctx context.Context, key string, s inbox.Step) (inbox.Step, error) {
	b.mu.Lock()
	fail := s.Ordinal == b.failAt
	if fail {
		b.failAt = 0
	}
	b.mu.Unlock()
	if fail {
		return inbox.Step{}, errRecordLost
	}
	return b.MemoryInbox.RecordStep(ctx, key, s)
}

// A turn whose steps come out in another order than its journal's (a deploy changed the agent
// between two runs of one request) is dead-lettered with both step names in the reason; a
// re-drive clears the journal, and the request then runs its new steps.
func TestJournalMismatchDeadLettersAndRedriveRunsAfresh(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sessions, ib := session.NewMemoryStore(), inbox.NewMemoryInbox()
	before := newStepAgent(2)
	r := &turn.Runner{Model: before, Sessions: sessions, Inbox: ib}
	req := newRequest("c-deploy", "u-1", "changed agent")
	_, err := r.Run(ctx, req)
	require.ErrorIs(t, err, errKilled)

	after := newStepAgent(0)
	after.names = []string{"model", "tool:refund", "model"}
	r2 := &turn.Runner{Model: after, Sessions: sessions, Inbox: ib}
	_, err = r2.Run(ctx, req)
	require.ErrorIs(t, err, inbox.ErrStepMismatch)
	require.Equal(t, turn.KindPermanent, turn.Classify(err))
	var dl *turn.DeadLetterError
	require.ErrorAs(t, err, &dl)
	require.Contains(t, dl.Reason, `"tool:lookup"`)
	require.Contains(t, dl.Reason, `"tool:refund"`)
	require.Zero(t, after.runs["tool:refund#2"], "the mismatched step did not run")

	_, err = ib.Redrive(ctx, r2.InboxKey(req), "agent v2 deployed")
	require.NoError(t, err)
	res, err := r2.Run(ctx, req)
	require.NoError(t, err)
	require.Contains(t, res.Text, "model#3")
	require.Equal(t, 1, after.runs["tool:refund#2"])
}

// The journal's bounds: a turn past MaxSteps steps, or MaxJournalBytes bytes of outputs, is
// dead-lettered with the bound in its reason.
func TestJournalBounds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, r := range map[string]*turn.Runner{
		"steps": {MaxSteps: 2},
		"bytes": {MaxJournalBytes: 40},
	} {
		r.Model, r.Sessions, r.Inbox = newStepAgent(0), session.NewMemoryStore(), inbox.NewMemoryInbox()
		_, err := r.Run(ctx, newRequest("c-bound-"+name, "u-1", "runaway"))
		require.ErrorIs(t, err, turn.ErrJournalFull, name)
		require.Equal(t, turn.KindPermanent, turn.Classify(err), name)
		require.Contains(t, err.Error(), "Runner.Max", name)
	}
	_, err := (&turn.Runner{Model: newStepAgent(0), Sessions: session.NewMemoryStore(), Inbox: inbox.NewMemoryInbox(), MaxSteps: -1}).Run(ctx, newRequest("c", "u", "x"))
	require.ErrorContains(t, err, "must not be negative")
}

// A deferred step becomes one pending intent when its turn commits, however often the turn
// ran; a turn that did not commit has none.
func TestJournalDeferredStepsPromoteOnCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	agent := newStepAgent(2)
	agent.names = []string{"model", "email", "model"}
	agent.deferred = "email"
	ib := inbox.NewMemoryInbox()
	r := &turn.Runner{Model: agent, Sessions: session.NewMemoryStore(), Inbox: ib}
	req := newRequest("c-defer", "u-defer", "send a mail")
	_, err := r.Run(ctx, req)
	require.ErrorIs(t, err, errKilled)
	pending, err := ib.Intents(ctx, inbox.IntentFilter{})
	require.NoError(t, err)
	require.Empty(t, pending, "a turn that did not commit has no intent")

	_, err = r.Run(ctx, req)
	require.NoError(t, err)
	_, err = r.Run(ctx, req) // a redelivery of the done request
	require.NoError(t, err)
	pending, err = ib.Intents(ctx, inbox.IntentFilter{Status: inbox.IntentPending})
	require.NoError(t, err)
	require.Len(t, pending, 1)
	it := pending[0]
	require.Equal(t, inbox.IntentID(r.InboxKey(req), 2), it.ID)
	require.Equal(t, req.ConversationID, it.Conversation)
	payload, err := turn.DecodeIntent(it.Payload)
	require.NoError(t, err)
	require.Equal(t, "email", payload.Tool)
	require.JSONEq(t, `{"to":"u-defer"}`, string(payload.Args))
	in := turn.Input{Request: req, Session: session.Session{Key: r.Key(req)}}
	require.Equal(t, in.ToolKey("email#2"), payload.Key, "the intent carries the step's key")
}

// A zombie that took another path than the committed turn and deferred a step past its last
// one never has that step promoted: only the committed turn's steps are.
func TestJournalZombieDeferredPastTheTurnIsNotPromoted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := sqltest.SQLiteFile(t)
	b := setupSQL(t, db, db)
	req := newRequest("c-zombie-defer", "u-1", "mail me")
	owner := &stepAgent{runs: map[string]int{}, keys: map[string][]string{}, names: []string{"model", "email"}, deferred: "email"}
	zombieAgent := &blockingSteps{stepAgent: &stepAgent{runs: map[string]int{}, keys: map[string][]string{},
		names: []string{"model", "email", "model", "email"}, deferred: "email"},
		at: 3, entered: make(chan struct{}), release: make(chan struct{})}
	zombie := *b.runner
	zombie.Model = zombieAgent
	zombieErr := make(chan error, 1)
	go func() {
		_, err := zombie.Run(ctx, req)
		zombieErr <- err
	}()
	<-zombieAgent.entered // the zombie recorded steps 1 and 2 and is at step 3

	ownerRunner := *b.runner
	ownerRunner.Model = owner
	_, err := ownerRunner.Run(ctx, req)
	require.NoError(t, err)
	close(zombieAgent.release)
	require.Error(t, <-zombieErr, "the zombie's turn does not commit")

	its, err := b.inbox.Intents(ctx, inbox.IntentFilter{})
	require.NoError(t, err)
	require.Len(t, its, 1, "the committed turn's one intent")
	require.Equal(t, 2, its[0].Ordinal)
	steps, err := b.inbox.Steps(ctx, b.runner.InboxKey(req))
	require.NoError(t, err)
	require.Len(t, steps, 4, "the zombie recorded its steps 3 and 4 after the commit")
}

// blockingSteps runs stepAgent but blocks before its step at until released.
type blockingSteps struct {
	*stepAgent
	at      int
	entered chan struct{}
	release chan struct{}
}

func (a *blockingSteps) Respond(ctx context.Context, in turn.Input) (turn.Output, error) {
	j := in.Journal()
	var last string
	for i, name := range a.names {
		if i+1 == a.at {
			close(a.entered)
			<-a.release
		}
		st := j.Next(name)
		if name == a.deferred {
			if _, err := j.Defer(ctx, st, "email", map[string]int{"n": i}); err != nil {
				return turn.Output{}, err
			}
			continue
		}
		out, err := j.Run(ctx, st, func(context.Context, string) ([]byte, error) { return []byte(`"zombie"`), nil })
		if err != nil {
			return turn.Output{}, err
		}
		last = string(out)
	}
	return turn.Output{Events: []session.Event{{Text: last}}}, nil
}

// Without an outbox, Defer fails the turn permanently with ErrNoOutbox.
func TestJournalDeferWithoutOutbox(t *testing.T) {
	t.Parallel()
	agent := newStepAgent(0)
	agent.names, agent.deferred = []string{"email"}, "email"
	r := &turn.Runner{Model: agent, Sessions: session.NewMemoryStore(), Inbox: struct{ inbox.Inbox }{inbox.NewMemoryInbox()}}
	_, err := r.Run(context.Background(), newRequest("c", "u", "x"))
	require.ErrorIs(t, err, turn.ErrNoOutbox)
	require.Equal(t, turn.KindPermanent, turn.Classify(err))
}

// On the joint path (one SQLite database) the deferred steps are promoted in the transaction
// that stores the turn, and a steps-answered rerun still yields one intent.
func TestJournalJointPathPromotesInTheCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := sqltest.SQLiteFile(t)
	b := setupSQL(t, db, db)
	agent := newStepAgent(1)
	agent.names, agent.deferred = []string{"model", "email", "model"}, "email"
	b.runner.Model = agent
	req := newRequest("c-joint-defer", "u-1", "mail")
	_, err := b.runner.Run(ctx, req)
	require.ErrorIs(t, err, errKilled)
	res, err := b.runner.Run(ctx, req)
	require.NoError(t, err)
	require.Zero(t, b.inbox.completes.Load(), "the joint path completed in the append's transaction")
	require.Equal(t, 1, agent.runs["model#1"])
	its, err := b.inbox.Intents(ctx, inbox.IntentFilter{Status: inbox.IntentPending})
	require.NoError(t, err)
	require.Len(t, its, 1)
	require.True(t, strings.HasSuffix(its[0].ID, "#2"))
	require.NotEmpty(t, res.Text)
}

// RunStep records a Go value as JSON and gives it back decoded on a run that finds it.
func TestRunStepRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	type lookup struct {
		Order  string `json:"order"`
		Amount int    `json:"amount"`
	}
	var calls int
	model := turn.ModelFunc(func(ctx context.Context, in turn.Input) (turn.Output, error) {
		v, err := turn.RunStep(ctx, &in, "tool:lookup", func(ctx context.Context, key string) (lookup, error) {
			calls++
			return lookup{Order: "A-1", Amount: 700}, nil
		})
		if err != nil {
			return turn.Output{}, err
		}
		if calls == 1 {
			return turn.Output{}, errKilled
		}
		return turn.Output{Events: []session.Event{{Text: fmt.Sprintf("%s %d", v.Order, v.Amount)}}}, nil
	})
	r := &turn.Runner{Model: model, Sessions: session.NewMemoryStore(), Inbox: inbox.NewMemoryInbox(), TurnTimeout: time.Minute}
	req := newRequest("c-runstep", "u-1", "lookup")
	_, err := r.Run(ctx, req)
	require.ErrorIs(t, err, errKilled)
	calls++ // the second run must not call the step: it would see calls == 3
	res, err := r.Run(ctx, req)
	require.NoError(t, err)
	require.Equal(t, "A-1 700", res.Text)
	require.Equal(t, 2, calls)
}

// An Input built by hand gets a journal that records nothing: its steps always run, with
// ordinals and keys in order.
func TestHandBuiltInputJournal(t *testing.T) {
	t.Parallel()
	in := turn.Input{Request: newRequest("c", "u", "x")}
	a, b := in.Journal().Next("model"), in.Journal().Next("model")
	require.Equal(t, 1, a.Ordinal)
	require.Equal(t, 2, b.Ordinal)
	require.NotEqual(t, a.Key, b.Key)
	require.Equal(t, in.ToolKey("model#1"), a.Key)
	var runs int
	for range 2 {
		_, err := in.Step(context.Background(), "tool:x", func(context.Context, string) ([]byte, error) { runs++; return []byte("1"), nil })
		require.NoError(t, err)
	}
	require.Equal(t, 2, runs)
	st := in.Journal().Next("email")
	it, err := in.Journal().Defer(context.Background(), st, "email", map[string]string{"to": "u"})
	require.NoError(t, err, "a hand-built Input's journal returns the intent it would record")
	require.Equal(t, turn.Intent{Tool: "email", Args: []byte(`{"to":"u"}`), Key: st.Key}, it)
}

// An intent whose delivery fails with turn.Permanent is buried at once by the relay, not
// retried: turn's permanent errors satisfy interface{ Permanent() bool }.
func TestRelayBuriesTurnPermanentAtOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	agent := newStepAgent(0)
	agent.names, agent.deferred = []string{"email"}, "email"
	ib := inbox.NewMemoryInbox()
	r := &turn.Runner{Model: agent, Sessions: session.NewMemoryStore(), Inbox: ib}
	_, err := r.Run(ctx, newRequest("c-bury", "u-1", "mail"))
	require.NoError(t, err)
	settled := make(chan error, 10)
	relay := &inbox.Relay{Outbox: ib, Poll: 10 * time.Millisecond,
		Deliver:   func(context.Context, inbox.Intent) error { return turn.Permanent(errors.New("550 no such mailbox")) },
		OnSettled: func(_ inbox.Intent, err error) { settled <- err },
	}
	done := make(chan error, 1)
	go func() { done <- relay.Run(ctx) }()
	require.ErrorContains(t, <-settled, "550 no such mailbox")
	cancel()
	require.NoError(t, <-done)
	dead, err := ib.Intents(context.Background(), inbox.IntentFilter{Status: inbox.IntentDead})
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Equal(t, 1, dead[0].Attempts, "buried after its first attempt")
	require.Contains(t, dead[0].Reason, "550 no such mailbox")
}

// With the batched SQL stores (Options.Batch: the appends of concurrent turns in one
// transaction, joins called again when another caller's fails), each turn's deferred step is
// promoted once, in the transaction that stores the turn.
func TestJournalBatchedStoresPromoteOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := sqltest.SQLiteFile(t)
	batch := sqlsession.Batching{Size: 8, Wait: 5 * time.Millisecond}
	sessions, err := sqlsession.New(db, sqlsession.SQLite, sqlsession.Options{Batch: batch})
	require.NoError(t, err)
	require.NoError(t, sessions.Migrate(ctx))
	ib, err := sqlinbox.New(db, sqlinbox.SQLite, sqlinbox.Options{Batch: batch})
	require.NoError(t, err)
	require.NoError(t, ib.Migrate(ctx))
	agent := newStepAgent(0)
	agent.names, agent.deferred = []string{"model", "email", "model"}, "email"
	r := &turn.Runner{Model: agent, Sessions: sessions, Inbox: ib}
	const turns = 16
	var wg sync.WaitGroup
	errs := make(chan error, turns)
	for i := range turns {
		wg.Go(func() {
			_, err := r.Run(ctx, newRequest(fmt.Sprintf("c-batch-%d", i), "u-1", "mail"))
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	its, err := ib.Intents(ctx, inbox.IntentFilter{Status: inbox.IntentPending})
	require.NoError(t, err)
	require.Len(t, its, turns, "one intent per turn")
	seen := map[string]bool{}
	for _, it := range its {
		require.False(t, seen[it.Conversation], it.Conversation)
		seen[it.Conversation] = true
	}
}
