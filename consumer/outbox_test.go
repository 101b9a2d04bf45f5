package consumer_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
)

// A member that loses its partition mid-turn, with a model that ignores cancellation (a
// zombie), keeps running and recording steps after the partition's new owner committed the
// turn. The new owner's turn answers the steps the zombie completed from the journal; the
// deferred step the zombie records past the committed turn's end is never an intent; the
// committed turn's one intent is the only one, delivered once.
func TestZombieDeferredIntentsAreNeverDelivered(t *testing.T) {
	t.Parallel()
	e := setup(t, 1, 1)
	req := request("zombie-mail", "mail me")
	entered, release, finished := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	var modelRuns sync.Map // member name -> runs of its model step
	steps := func(member string, zombie bool) func(ctx context.Context, in turn.Input) (turn.Output, error) {
		return func(ctx context.Context, in turn.Input) (turn.Output, error) {
			j := in.Journal()
			if _, err := j.Run(ctx, j.Next("model"), func(context.Context, string) ([]byte, error) {
				n, _ := modelRuns.LoadOrStore(member, new(int))
				*n.(*int)++
				return []byte(`"plan: mail the user"`), nil
			}); err != nil {
				return turn.Output{}, err
			}
			if _, err := j.Defer(ctx, j.Next("email"), "email", map[string]string{"from": member}); err != nil {
				return turn.Output{}, err
			}
			if zombie {
				close(entered)
				<-release // ignores ctx, as a zombie's model does
				defer close(finished)
				late := context.WithoutCancel(ctx)
				if _, err := j.Run(late, j.Next("model"), func(context.Context, string) ([]byte, error) { return []byte(`"again"`), nil }); err != nil {
					return turn.Output{}, err
				}
				if _, err := j.Defer(late, j.Next("email"), "email", map[string]string{"from": member, "late": "yes"}); err != nil {
					return turn.Output{}, err
				}
			}
			return turn.Output{Events: []session.Event{{Text: "mailed by " + member}}}, nil
		}
	}
	a := e.start(memberOpts{model: steps("a", true)})
	e.produce(req)
	recv(t, entered, "the zombie's model, after its deferred step")
	e.start(memberOpts{model: steps("b", false)})
	a.cancel() // a leaves while its model hangs; the partition moves to b
	eventually(t, func() bool { return a.c.Stats().Released == 1 }, "a released its partition")
	results := e.resultsByID(1)
	require.Len(t, results[req.ID], 1)
	res, err := turn.DecodeResult(results[req.ID][0].Value)
	require.NoError(t, err)
	require.Equal(t, "mailed by b", res.Text)
	releaseOnce.Do(func() { close(release) })
	recv(t, finished, "the zombie's late steps")

	ctx := context.Background()
	key := turn.InboxKey(turn.DefaultApp, req)
	recorded, err := e.inbox.Steps(ctx, key)
	require.NoError(t, err)
	require.Len(t, recorded, 4, "the zombie recorded its steps 3 and 4 after the commit")
	n, _ := modelRuns.Load("a")
	require.Equal(t, 1, *n.(*int), "the zombie ran the model step")
	_, ranAtB := modelRuns.Load("b")
	require.False(t, ranAtB, "the new owner answered the completed model step from the journal")

	its, err := e.inbox.Intents(ctx, inbox.IntentFilter{})
	require.NoError(t, err)
	require.Len(t, its, 1, "only the committed turn's deferred step is an intent")
	require.Equal(t, inbox.IntentID(key, 2), its[0].ID)
	payload, err := turn.DecodeIntent(its[0].Payload)
	require.NoError(t, err)
	require.JSONEq(t, `{"from":"a"}`, string(payload.Args), "the committed turn used the step a recorded first")
	deliverAll(t, e.inbox, 1)
}

// deliverAll claims every due intent of ob once, as a relay would, marks each delivered, and
// checks there were want and that none is left to claim.
func deliverAll(t *testing.T, ob inbox.Outbox, want int) {
	t.Helper()
	ctx := context.Background()
	claimed, err := ob.Claim(ctx, 100, time.Minute)
	require.NoError(t, err)
	require.Len(t, claimed, want)
	for _, it := range claimed {
		require.NoError(t, ob.Delivered(ctx, it.ID, it.Attempts))
	}
	again, err := ob.Claim(ctx, 100, time.Minute)
	require.NoError(t, err)
	require.Empty(t, again)
	delivered, err := ob.Intents(ctx, inbox.IntentFilter{Status: inbox.IntentDelivered})
	require.NoError(t, err)
	require.Len(t, delivered, want)
}
