package turntest_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turntest"
)

// This file is a host's test, written only against turnstile's public packages: a refund
// agent whose model API names each tool call with a fresh id, as providers do.

// toolCall is one tool call of a model response.
type toolCall struct {
	ID   string          // the provider's tool-call id: new in every response
	Name string          // the tool
	Args json.RawMessage // its arguments
}

// respond stands for the provider: the same request gets the same tool calls, with new ids.
func respond(in turn.Input) []toolCall {
	args, _ := json.Marshal(map[string]any{"order": "A-" + in.Request.ConversationID, "cents": 700})
	return []toolCall{{ID: "call_" + uuid.NewString(), Name: "refund", Args: args}}
}

// refundAgent refunds through fx, keyed by key.
type refundAgent struct {
	fx  *turntest.Effects
	key func(in turn.Input, ordinal int, c toolCall) string
}

func (a refundAgent) Respond(_ context.Context, in turn.Input) (turn.Output, error) {
	var events []session.Event
	for i, c := range respond(in) {
		a.fx.Do(a.key(in, i+1, c), fmt.Sprintf("refund %s for request %s", c.Args, in.Request.ID))
		events = append(events, session.Event{Author: "tool", Text: "refunded", Data: c.Args})
	}
	events = append(events, session.Event{Text: "Your refund is on its way."})
	return turn.Output{Events: events}, nil
}

// Stable call ids: the tool's name and its ordinal in the turn, or a hash of its arguments.
func byOrdinal(in turn.Input, ordinal int, c toolCall) string {
	return in.ToolKey(fmt.Sprintf("%s#%d", c.Name, ordinal))
}

func byArguments(in turn.Input, _ int, c toolCall) string {
	sum := sha256.Sum256(c.Args)
	return in.ToolKey(c.Name + ":" + hex.EncodeToString(sum[:]))
}

// The wrong one: the provider's tool-call id changes when the turn runs again.
func byToolCallID(in turn.Input, _ int, c toolCall) string { return in.ToolKey(c.ID) }

// A host produces requests to the embedded broker, runs a consumer over its agent, and reads
// the results; every refund happens once.
func TestHostRunsItsAgentOnTheEmbeddedBroker(t *testing.T) {
	t.Parallel()
	kc := turntest.NewCluster(t, turntest.Options{})
	requests, results, dlq := kc.CreateTopic(t, "requests", 3), kc.CreateTopic(t, "results", 3), kc.CreateTopic(t, "dlq", 3)
	fx := turntest.NewEffects()
	runner := &turn.Runner{Model: refundAgent{fx: fx, key: byOrdinal}, Sessions: session.NewMemoryStore(), Inbox: inbox.NewMemoryInbox()}
	c, err := consumer.New(consumer.Config{
		Brokers: kc.Brokers(), GroupID: kc.Unique("refunds"), RequestsTopic: requests, ResultsTopic: results,
		DeadLetterTopic: dlq, Sarama: kc.Config(), CommitInterval: 100 * time.Millisecond,
	}, consumer.RunnerHandler(runner))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() { cancel(); require.NoError(t, <-done) }()

	sent := map[string]bool{}
	for i := range 12 {
		req := turntest.NewRequest(fmt.Sprintf("conv-%d", i%4), fmt.Sprintf("user-%d", i%4), "where is my refund?")
		kc.ProduceRequest(t, requests, req)
		sent[req.ID] = true
	}
	got := kc.ReadResults(t, results, len(sent), time.Minute)
	for _, res := range got {
		require.True(t, sent[res.RequestID], "result of a request never sent: %s", res.RequestID)
		require.Equal(t, "Your refund is on its way.", res.Text)
		require.Equal(t, 1, fx.Performed(fmt.Sprintf(`refund {"cents":700,"order":"A-%s"} for request %s`, res.ConversationID, res.RequestID)))
	}
	require.Len(t, got, len(sent))
	require.Empty(t, fx.Duplicates())
}

// The crash harness passes an agent whose keys come from something stable, at every point of
// the crash table.
func TestCrashHarnessPassesStableKeys(t *testing.T) {
	t.Parallel()
	for name, key := range map[string]func(turn.Input, int, toolCall) string{"ordinal": byOrdinal, "arguments": byArguments} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			reports := turntest.CheckCrashes(t, turntest.CrashConfig{
				NewModel: func(fx *turntest.Effects) turn.ModelClient { return refundAgent{fx: fx, key: key} },
			})
			require.Len(t, reports, len(turntest.CrashPoints))
			for _, r := range reports {
				require.True(t, r.OK(), r.String())
				for id, n := range r.ModelCalls {
					if r.Point == turntest.AfterModel {
						require.Equal(t, 2, n, "request %s: the model runs again after a crash past it", id)
					}
				}
			}
		})
	}
}

// The crash harness catches an agent that keys its refund with the provider's tool-call id:
// after a crash past the model call, the re-run refunds again under a new key.
func TestCrashHarnessCatchesKeysFromChangingIDs(t *testing.T) {
	t.Parallel()
	requireCaughtAfterModel(t, func(fx *turntest.Effects) turn.ModelClient { return refundAgent{fx: fx, key: byToolCallID} },
		func(r turntest.CrashReport, d turntest.Duplicate) {
			require.Equal(t, 1, d.Intended)
			require.Len(t, d.Keys, 2)
			require.NotEqual(t, d.Keys[0], d.Keys[1])
			require.Contains(t, r.String(), "not the model's tool-call id")
		})

	// CheckCrashes fails the host's test with that report.
	ft := &fakeT{TB: t}
	ft.run(func() {
		turntest.CheckCrashes(ft, turntest.CrashConfig{
			NewModel: func(fx *turntest.Effects) turn.ModelClient { return refundAgent{fx: fx, key: byToolCallID} },
		})
	})
	require.True(t, ft.failed)
	require.Contains(t, ft.msg, "crash after the model call")
	require.Contains(t, ft.msg, "happened 2 times")
}

// twinRefunder refunds 700 cents to the user twice in every turn, under the keys key gives the
// ordinals 1 and 2: two intended refunds that look alike (the same description), as when a
// user asks for two refunds of the same amount.
type twinRefunder struct {
	fx  *turntest.Effects
	key func(in turn.Input, ordinal int) string
}

func (m twinRefunder) Respond(_ context.Context, in turn.Input) (turn.Output, error) {
	for i := range 2 {
		m.fx.Do(m.key(in, i+1), "refund 700 cents to "+in.Request.UserID)
	}
	return turn.Output{Events: []session.Event{{Text: "refunded twice"}}}, nil
}

// Issue 23: the harness identifies an effect by its key, so two equal-looking refunds of one
// turn, and equal-looking refunds of the user's three requests, pass; keyed by a changing id,
// the re-run's two refunds are still caught as two refunds too many.
func TestCrashHarnessPassesEqualLookingIntendedEffects(t *testing.T) {
	t.Parallel()
	stable := func(in turn.Input, ordinal int) string { return in.ToolKey(fmt.Sprintf("refund#%d", ordinal)) }
	reports := turntest.CheckCrashes(t, turntest.CrashConfig{
		NewModel: func(fx *turntest.Effects) turn.ModelClient { return twinRefunder{fx: fx, key: stable} },
	})
	require.Len(t, reports, len(turntest.CrashPoints))
	for _, r := range reports {
		require.True(t, r.OK(), r.String())
	}

	changing := func(in turn.Input, _ int) string { return in.ToolKey("call_" + uuid.NewString()) }
	requireCaughtAfterModel(t, func(fx *turntest.Effects) turn.ModelClient { return twinRefunder{fx: fx, key: changing} },
		func(r turntest.CrashReport, d turntest.Duplicate) {
			require.Equal(t, "refund 700 cents to crash-user", d.Effect)
			require.Equal(t, 2, d.Intended)
			require.Len(t, d.Keys, 4)
			require.Contains(t, r.String(), "happened 4 times (one run of the turn does it 2 times)")
		})
}

// requireCaughtAfterModel runs the crash harness on the model newModel builds, whose keys
// change between runs, and requires that only the crash after the model call shows
// duplicates: one per request of the default three, each passed to check.
func requireCaughtAfterModel(t *testing.T, newModel func(fx *turntest.Effects) turn.ModelClient, check func(turntest.CrashReport, turntest.Duplicate)) {
	t.Helper()
	reports, err := turntest.Crashes(context.Background(), turntest.CrashConfig{NewModel: newModel})
	require.NoError(t, err)
	require.Len(t, reports, len(turntest.CrashPoints))
	for _, r := range reports {
		require.Empty(t, r.Problems, r.String())
		if r.Point != turntest.AfterModel {
			require.Empty(t, r.Duplicates, "%s: the model ran once per request", r.Point)
			continue
		}
		require.Len(t, r.Duplicates, 3, "each of the three requests' effects done again: %s", r)
		ids := map[string]bool{}
		for _, d := range r.Duplicates {
			ids[d.RequestID] = true
			check(r, d)
		}
		require.Len(t, ids, 3, "one duplicate per request")
	}
}

// Outside the harness Effects cannot tell the runs of a turn apart: the keys decide what is
// performed, and Duplicates finds nothing.
func TestEffectsOutsideTheHarness(t *testing.T) {
	t.Parallel()
	fx := turntest.NewEffects()
	require.True(t, fx.Do("k1", "refund 700"))
	require.True(t, fx.Do("k2", "refund 700"))
	require.False(t, fx.Do("k1", "refund 700"), "a key is performed once")
	require.Equal(t, 2, fx.Performed("refund 700"))
	require.Empty(t, fx.Duplicates())
}
