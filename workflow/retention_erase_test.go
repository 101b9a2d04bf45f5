package workflow

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/protobuf/proto"

	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
	"github.com/turnstile-go/turnstile/internal/sqltest"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/session/sqlsession"
	"github.com/turnstile-go/turnstile/turn"
)

// eraseModel answers with its request's text (which holds its user's marker) in a journaled
// model step, a tool's output, a deferred tool's arguments (an outbox payload), the session
// state and the answer.
var eraseModel = turn.ModelFunc(func(ctx context.Context, in turn.Input) (turn.Output, error) {
	text := in.Request.Text
	for _, step := range []string{"model", "tool:lookup"} {
		if _, err := in.Step(ctx, step, func(context.Context, string) ([]byte, error) { return json.Marshal(step + " of " + text) }); err != nil {
			return turn.Output{}, err
		}
	}
	j := in.Journal()
	if _, err := j.Defer(ctx, j.Next("tool:send_email"), "send_email", map[string]string{"body": text}); err != nil {
		return turn.Output{}, err
	}
	state, err := json.Marshal(map[string]string{"last": text})
	if err != nil {
		return turn.Output{}, err
	}
	return turn.Output{Events: []session.Event{{Text: "answer to " + text}}, State: state}, nil
})

// The acceptance line of issue 40 in Temporal mode, on SQLite and PostgreSQL stores: user A's
// marker text goes through every path (a conversation with two applied turns: history,
// answers, journal steps, outbox payloads, state, ledger; a conversation held at a gap, all
// its requests pending: only its workflow history and the ledger have them, and its run
// carries TurnstileUser from its start). One call, turn.Retention.EraseUser with
// UserEraser as its External, removes them: no A marker is left in any column of any table,
// nor in the history of any run of the test's workflows (open or closed); user B's rows and
// history keep theirs; the dry run counted what the deletion deleted.
func TestDevServerEraseUserEverywhere(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	for _, kind := range []sqltest.DB{sqltest.SQLiteFileDB, sqltest.PostgresDB} {
		t.Run(kind.Name, func(t *testing.T) {
			ctx := context.Background()
			db := kind.Open(t)
			prefix := sqltest.Prefix(t, db, kind.Postgres)
			dialect := sqlsession.SQLite
			if kind.Postgres {
				dialect = sqlsession.PostgreSQL
			}
			sessions, err := sqlsession.New(db, dialect, sqlsession.Options{TablePrefix: prefix})
			require.NoError(t, err)
			require.NoError(t, sessions.Migrate(ctx))
			ib, err := sqlinbox.New(db, sqlinbox.Dialect(dialect), sqlinbox.Options{TablePrefix: prefix})
			require.NoError(t, err)
			require.NoError(t, ib.Migrate(ctx))
			ledger, err := NewSQLLedger(db, SQLDialect(dialect), prefix)
			require.NoError(t, err)
			require.NoError(t, ledger.Migrate(ctx))
			s.taskQueue = s.cluster.Unique("tq") // a worker of this subtest's stores
			s.startWorker(func(o *WorkerOptions) {
				o.Runner = &turn.Runner{Model: eraseModel, Sessions: sessions, Inbox: ib, TurnTimeout: 30 * time.Second}
				o.States = ledger
			})
			b := s.bridge(BridgeOptions{Ledger: ledger, Config: Config{SearchAttributes: true}})

			userA, userB := s.cluster.Unique("a"), s.cluster.Unique("b")
			markA, markB := "MARKER-A-"+uuid.NewString(), "MARKER-B-"+uuid.NewString()
			applied, held, other := s.cluster.Unique("applied"), s.cluster.Unique("held"), s.cluster.Unique("other")
			send := func(user, conv string, seq int64, mark string) {
				req := request(conv, seq, fmt.Sprintf("message %d: %s", seq, mark))
				req.UserID = user
				_, err := b.Handle(ctx, req)
				require.NoError(t, err)
			}
			send(userA, applied, 1, markA)
			send(userA, applied, 2, markA)
			send(userA, held, 2, markA) // 1 never comes: both held
			send(userA, held, 3, markA)
			send(userB, other, 1, markB)
			s.waitApplied(b, applied, 2)
			s.waitApplied(b, other, 1)
			require.Eventually(t, func() bool {
				st, err := s.status(ctx, b, held)
				return err == nil && st.Pending == 2 && st.Applied == 0
			}, wait, 50*time.Millisecond)
			list := func(q string) int {
				resp, err := s.client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: q})
				require.NoError(t, err)
				return len(resp.Executions)
			}
			require.Eventually(t, func() bool {
				return list(fmt.Sprintf("TurnstileUser = '%s' AND WorkflowId = '%s'", userA, b.WorkflowID(held))) == 1
			}, wait, 100*time.Millisecond, "the held run has its user from its start")
			require.Positive(t, sqltest.FindText(t, db, kind.Postgres, prefix, markA)[prefix+"inbox_steps.output"], "A's marker planted")
			beforeB := sqltest.FindText(t, db, kind.Postgres, prefix, markB)
			require.Positive(t, s.historiesWith(t, b, markA), "A's marker in the histories")
			historiesB := s.historiesWith(t, b, markB)
			require.Positive(t, historiesB)

			ret := turn.Retention{Inbox: ib, Sessions: sessions,
				External: UserEraser{Client: s.client, Options: UserDeletion{IDPrefix: b.opts.IDPrefix, Ledger: ledger}}}
			dry, err := ret.EraseUser(ctx, userA, true)
			require.NoError(t, err)
			require.ElementsMatch(t, []string{applied, held}, dry.Conversations)
			require.Equal(t, int64(2), dry.Count(turn.ErasedWorkflowRuns), "%+v", dry)
			require.Equal(t, int64(4), dry.Count(turn.ErasedLedgerRows), "four hand-offs: %+v", dry)
			require.Equal(t, int64(2), dry.Count(turn.ErasedInboxEntries))
			require.Equal(t, int64(2), dry.Count(turn.ErasedOutboxIntents))
			require.Equal(t, int64(1), dry.Count(turn.ErasedSessions))
			done, err := ret.EraseUser(ctx, userA, false)
			require.NoError(t, err)
			require.Equal(t, dry.Kinds, done.Kinds, "the dry run counted what the deletion deleted")
			require.Equal(t, dry.Conversations, done.Conversations)

			require.Empty(t, sqltest.FindText(t, db, kind.Postgres, prefix, markA), "no copy of A's marker in any table")
			require.Equal(t, beforeB, sqltest.FindText(t, db, kind.Postgres, prefix, markB), "B's rows untouched")
			require.Eventually(t, func() bool { return s.historiesWith(t, b, markA) == 0 }, 3*wait, 500*time.Millisecond,
				"no history of any run holds A's marker")
			require.Equal(t, historiesB, s.historiesWith(t, b, markB), "B's history stays")
		})
	}
}

// historiesWith counts the runs whose history holds text among every run (open and closed)
// of the bridge's workflows (its IDPrefix, which is this test's), and the runs the
// visibility store no longer lists but whose workflow ids it listed before are read by id:
// a run deleted is NotFound.
func (s *stack) historiesWith(t *testing.T, b *Bridge, text string) int {
	t.Helper()
	ctx := context.Background()
	var token []byte
	n := 0
	for {
		resp, err := s.client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: fmt.Sprintf("WorkflowId STARTS_WITH '%s'", b.opts.IDPrefix), NextPageToken: token})
		require.NoError(t, err)
		for _, e := range resp.GetExecutions() {
			if historyHolds(t, s, e.GetExecution().GetWorkflowId(), e.GetExecution().GetRunId(), text) {
				n++
			}
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return n
		}
	}
}

// historyHolds reports whether the history of the run holds text in an event's bytes; a run
// that is gone holds nothing.
func historyHolds(t *testing.T, s *stack, workflowID, runID, text string) bool {
	t.Helper()
	it := s.client.GetWorkflowHistory(context.Background(), workflowID, runID, false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) || err != nil && strings.Contains(err.Error(), "not found") {
			return false
		}
		require.NoError(t, err)
		data, err := proto.Marshal(ev)
		require.NoError(t, err)
		if bytes.Contains(data, []byte(text)) {
			return true
		}
	}
	return false
}
