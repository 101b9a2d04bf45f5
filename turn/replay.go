package turn

import "context"

type replayKey struct{}

// WithReplay returns ctx marked as the context of a replay into a sandbox: recorded requests
// run again, under a group id and stores of the replay's own, to see what a changed prompt or
// model would answer. The consumer's replay mode (consumer.Config.Replay) marks the context of
// every turn; the Runner tells the model through Input.Replay, and a tool reads it with
// IsReplay, so that side effects are stubbed or pointed at a sandbox.
func WithReplay(ctx context.Context) context.Context {
	return context.WithValue(ctx, replayKey{}, true)
}

// IsReplay reports whether ctx, or a context it derives from, was marked by WithReplay.
func IsReplay(ctx context.Context) bool {
	v, _ := ctx.Value(replayKey{}).(bool)
	return v
}
