package workflow

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"
	"golang.org/x/sync/semaphore"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/turn"
)

// The activity runs turns with crash isolation, as the consumer does: a request whose last
// attempts ended with their worker while other turns ran (a poison request beside it killed
// the process) runs again alone and is served, and those crashes spend none of its attempts.
// Without isolation they counted, and the request was dead-lettered after three of them.
func TestActivityRunsAloneAfterCrashesBesideOthers(t *testing.T) {
	t.Parallel()
	u := newUnit(t)
	req := request("c-beside-poison", 1, "hello")
	ctx := context.Background()
	for range u.runner.Attempts() { // deliveries that ended with their worker, mid-turn, beside others
		_, err := u.inbox.Begin(turn.WithCrashIsolation(ctx, false), inbox.Delivery{Key: u.runner.InboxKey(req), Conversation: req.ConversationID})
		require.NoError(t, err)
	}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	w := &worker{opts: u.opts, turns: semaphore.NewWeighted(aloneWeight)}
	w.opts.Logger, w.opts.HeartbeatTimeout = discardLogger(), DefaultHeartbeatTimeout
	env.RegisterActivityWithOptions(w.ApplyTurn, activity.RegisterOptions{Name: ActivityName})
	val, err := env.ExecuteActivity(ActivityName, TurnInput{Envelope: Envelope{Request: req}})
	require.NoError(t, err)
	var out Outcome
	require.NoError(t, val.Get(&out))
	require.True(t, out.Published, "served, not dead-lettered: %+v", out)
	require.Len(t, u.publisher.results, 1)
	require.Empty(t, u.publisher.deadLetters)
	require.Len(t, u.model.calls, 1)
}
