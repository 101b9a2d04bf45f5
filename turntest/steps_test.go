package turntest_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turntest"
)

// threeStepAgent is a model, tool, model turn written with the step journal: the tool step
// refunds through fx with its step key.
type threeStepAgent struct{ fx *turntest.Effects }

func (a threeStepAgent) Respond(ctx context.Context, in turn.Input) (turn.Output, error) {
	plan, err := in.Step(ctx, "model", func(context.Context, string) ([]byte, error) {
		return []byte(`"refund order A-1"`), nil
	})
	if err != nil {
		return turn.Output{}, err
	}
	refund, err := in.Step(ctx, "tool:refund", func(_ context.Context, key string) ([]byte, error) {
		a.fx.Do(key, "refund A-1 700 for "+in.Request.ID)
		return []byte(`"refunded"`), nil
	})
	if err != nil {
		return turn.Output{}, err
	}
	answer, err := in.Step(ctx, "model", func(context.Context, string) ([]byte, error) {
		return []byte(fmt.Sprintf("%q", "done: "+string(plan)+" "+string(refund))), nil
	})
	if err != nil {
		return turn.Output{}, err
	}
	return turn.Output{Events: []session.Event{{Text: string(answer)}}}, nil
}

// A three-step turn (model, tool, model) killed during and after each step in turn: the steps
// whose record landed never run again, the step in flight runs again (with the same key: no
// duplicate refund), and each request has one turn and one result.
func TestCrashHarnessThreeStepTurn(t *testing.T) {
	t.Parallel()
	reports := turntest.CheckCrashes(t, turntest.CrashConfig{
		NewModel: func(fx *turntest.Effects) turn.ModelClient { return threeStepAgent{fx: fx} },
		Steps:    3,
	})
	require.Len(t, reports, len(turntest.CrashPointsFor(3)))
	points := map[turntest.CrashPoint]bool{}
	for _, r := range reports {
		points[r.Point] = true
		require.True(t, r.OK(), r.String())
		require.Len(t, r.StepRuns, 3, "%s: three requests ran steps", r.Point)
		for id, runs := range r.StepRuns {
			for ordinal := 1; ordinal <= 3; ordinal++ {
				want := 1
				if r.Point == turntest.DuringStep(ordinal) {
					want = 2 // in flight when the process died: it runs again
				}
				require.Equal(t, want, runs[ordinal], "%s: request %s: runs of step %d", r.Point, id, ordinal)
			}
		}
	}
	for i := 1; i <= 3; i++ {
		require.True(t, points[turntest.DuringStep(i)] && points[turntest.AfterStep(i)], "step %d's crash points ran", i)
	}
}

// A harness told of steps the turn does not take reports the points it never reached.
func TestCrashHarnessReportsStepsNeverReached(t *testing.T) {
	t.Parallel()
	reports, err := turntest.Crashes(context.Background(), turntest.CrashConfig{
		NewModel: func(fx *turntest.Effects) turn.ModelClient { return threeStepAgent{fx: fx} },
		Steps:    4,
	})
	require.NoError(t, err)
	var unreached int
	for _, r := range reports {
		if r.Point == turntest.DuringStep(4) || r.Point == turntest.AfterStep(4) {
			require.False(t, r.OK())
			require.Contains(t, r.String(), "never reached")
			unreached++
		} else {
			require.True(t, r.OK(), r.String())
		}
	}
	require.Equal(t, 2, unreached)
}
