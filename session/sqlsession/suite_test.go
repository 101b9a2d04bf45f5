package sqlsession_test

import (
	"context"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/internal/sqltest"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/session/sessiontest"
)

// splitAppender breaks the TxAppender contract the way a naive one would: it commits the turn,
// then runs join in a transaction of its own, so a crash between the two stores the turn
// without the joined write (for the Runner: a turn stored, its request not done).
type splitAppender struct{ session.TxAppender }

func (s splitAppender) AppendTx(ctx context.Context, key session.Key, v int64, t session.Turn, join session.JoinFunc) (session.Appended, error) {
	ap, err := s.Append(ctx, key, v, t)
	if err != nil || ap.Duplicate {
		return ap, err
	}
	tx, err := s.TxDB().BeginTx(ctx, nil)
	if err != nil {
		return session.Appended{}, err
	}
	defer func() { _ = tx.Rollback() }()
	if err := join(ctx, tx, ap.Events); err != nil {
		return session.Appended{}, err
	}
	return ap, tx.Commit()
}

// The suites must fail a TxAppender whose turn and joined write are not one transaction. They
// run against splitAppender in a child process, whose failure is the expected outcome.
func TestSuiteCatchesASplitAppendTx(t *testing.T) {
	if os.Getenv("SQLSESSION_SPLIT_APPENDER") == "1" {
		sessiontest.Run(t, func(t *testing.T) session.Store {
			s, _ := newStore(t, sqltest.SQLiteFileDB)
			return splitAppender{s}
		})
		sessiontest.RunJoint(t, func(t *testing.T) (session.TxAppender, inbox.TxCompleter) {
			s, b := newPair(t, sqltest.SQLiteFileDB)
			return splitAppender{s}, b
		})
		return
	}
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSuiteCatchesASplitAppendTx$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "SQLSESSION_SPLIT_APPENDER=1")
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "the suites passed a split AppendTx:\n%s", out)
	require.Contains(t, string(out), "--- FAIL: TestSuiteCatchesASplitAppendTx/AppendTx/JoinErrorRollsBackTheTurn")
	require.Contains(t, string(out), "--- FAIL: TestSuiteCatchesASplitAppendTx/CrashBeforeCommitStoresNeither")
}
