package turntest_test

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turntest"
)

// refunder refunds through fx once per turn; key derives the tool's call id.
type refunder struct {
	fx  *turntest.Effects
	key func(in turn.Input) string
}

func (m refunder) Respond(_ context.Context, in turn.Input) (turn.Output, error) {
	m.fx.Do(m.key(in), "refund for "+in.Request.ID)
	return turn.Output{Events: []session.Event{{Text: "refunded"}}}, nil
}

// The crash harness runs a model through every point of the crash table. Keyed by the tool's
// name and ordinal, the refund happens once everywhere; keyed by a provider's tool-call id,
// which is new in every response, it happens twice when the turn runs again after a crash
// past the model call. A host's test calls turntest.CheckCrashes(t, cfg), which fails the test
// with these reports.
func ExampleCrashes() {
	for name, key := range map[string]func(turn.Input) string{
		"ordinal":      func(in turn.Input) string { return in.ToolKey("refund#1") },
		"tool-call id": func(in turn.Input) string { return in.ToolKey("call_" + uuid.NewString()) },
	} {
		reports, err := turntest.Crashes(context.Background(), turntest.CrashConfig{
			NewModel: func(fx *turntest.Effects) turn.ModelClient { return refunder{fx: fx, key: key} },
		})
		if err != nil {
			fmt.Println(err)
			return
		}
		for _, r := range reports {
			if !r.OK() {
				fmt.Printf("%s: crash %s: %d refunds done twice\n", name, r.Point, len(r.Duplicates))
			}
		}
	}
	// Unordered output:
	// tool-call id: crash after the model call: 3 refunds done twice
}
