package sessiontest_test

import (
	"context"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/session/sessiontest"
)

// lastTurnOnly is a Store whose duplicate check sees only the newest turn, as a store that
// dedups from the recent events it loads would: an older request's turn is stored again
// (under a mangled id, so the inner store accepts it).
type lastTurnOnly struct{ *session.MemoryStore }

func (s lastTurnOnly) Append(ctx context.Context, key session.Key, v int64, t session.Turn) (session.Appended, error) {
	sess, err := s.Get(ctx, key, 1)
	if err == nil && len(sess.Events) == 1 && sess.Events[0].RequestID != t.RequestID {
		if _, err := s.FindTurn(ctx, key, t.RequestID); err == nil {
			t.RequestID += "-again"
			for i := range t.Events {
				t.Events[i].RequestID = ""
			}
		}
	}
	return s.MemoryStore.Append(ctx, key, v, t)
}

// The suite must fail a store that stores an older request's turn a second time: the Runner
// relies on that rule after an inbox purge or an offset reset. The suite runs against the
// broken store in a child process, whose failure is the expected outcome.
func TestSuiteCatchesOldDuplicate(t *testing.T) {
	if os.Getenv("SESSIONTEST_BROKEN_STORE") == "1" {
		sessiontest.Run(t, func(*testing.T) session.Store { return lastTurnOnly{session.NewMemoryStore()} })
		return
	}
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSuiteCatchesOldDuplicate$", "-test.count=1")
	cmd.Env = append(os.Environ(), "SESSIONTEST_BROKEN_STORE=1")
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "the suite passed a store that stores a turn twice:\n%s", out)
	require.Contains(t, string(out), "an older request's turn is not stored twice")
}
