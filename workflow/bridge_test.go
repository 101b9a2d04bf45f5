package workflow

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/turnstile-go/turnstile/turn"
)

// Temporal's errors map to the kinds that steer the consumer: transient ones spend no attempt
// and are never dead-lettered, what Temporal can never accept is permanent, and a context the
// consumer ended is abandonment.
func TestClassifyTemporal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, tc := range map[string]struct {
		err  error
		want turn.Kind
	}{
		"unavailable":        {serviceerror.NewUnavailable("frontend down"), turn.KindUnavailable},
		"resource exhausted": {serviceerror.NewResourceExhausted(0, "rps limit"), turn.KindUnavailable},
		"deadline exceeded":  {serviceerror.NewDeadlineExceeded("slow"), turn.KindUnavailable},
		"closing run":        {serviceerror.NewFailedPrecondition("workflow is closing"), turn.KindUnavailable},
		"signal limit":       {serviceerror.NewInvalidArgument("exceeded workflow execution limit for signal events"), turn.KindUnavailable}, // the dev server's words
		"too large":          {serviceerror.NewInvalidArgument("Blob data size exceeds limit."), turn.KindPermanent},
		"invalid id":         {serviceerror.NewInvalidArgument("WorkflowId is too long"), turn.KindPermanent},
		"client timeout":     {context.DeadlineExceeded, turn.KindUnavailable},
	} {
		require.Equal(t, tc.want, turn.Classify(classifyTemporal(ctx, tc.err)), name)
	}
	ended, cancel := context.WithCancel(ctx)
	cancel()
	require.Equal(t, turn.KindAbandoned, turn.Classify(classifyTemporal(ended, errors.New("canceled"))))
}

// A request too large for a signal is permanent (the consumer dead-letters it) and never
// reaches the server.
func TestHandleTooLargeIsPermanent(t *testing.T) {
	t.Parallel()
	c, err := client.NewLazyClient(client.Options{HostPort: "127.0.0.1:1"})
	require.NoError(t, err)
	defer c.Close()
	b, err := NewBridge(c, BridgeOptions{TaskQueue: "q", MaxPayloadBytes: 64 << 10})
	require.NoError(t, err)
	_, err = b.Handle(context.Background(), request("c-big", 1, strings.Repeat("x", 100<<10)))
	require.Equal(t, turn.KindPermanent, turn.Classify(err))
	require.ErrorContains(t, err, "over the limit")
	_, err = NewBridge(c, BridgeOptions{})
	require.ErrorContains(t, err, "TaskQueue")
}
