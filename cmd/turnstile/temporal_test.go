package main

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
	"github.com/turnstile-go/turnstile/internal/sqltest"
	"github.com/turnstile-go/turnstile/internal/temporaldev"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/session/sqlsession"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/workflow"
)

// ledger purge deletes the hand-offs older than --older-than and keeps the younger ones.
func TestLedgerPurge(t *testing.T) {
	t.Parallel()
	for _, d := range databases(t) {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			db := d.open(t)
			prefix := sqltest.Prefix(t, db, d.dialect == sqlinbox.PostgreSQL)
			ok(t, "migrate", "--ledger", "--db="+d.dsn, "--table-prefix="+prefix)
			l, err := workflow.NewSQLLedger(db, workflow.SQLDialect(d.dialect), prefix)
			require.NoError(t, err)
			req := turn.Request{ID: "0b9c1e6a-2d8f-4a53-9c1e-0f6f3a3c2b10", ConversationID: "c-1", UserID: "u-1", Sequence: 1}
			require.NoError(t, l.Record(context.Background(), workflow.Envelope{Request: req}))
			require.Contains(t, ok(t, "ledger", "purge", "--older-than=1h", "--db="+d.dsn, "--table-prefix="+prefix), "purged 0 ledger rows")
			require.Contains(t, ok(t, "ledger", "purge", "--older-than=1ns", "--db="+d.dsn, "--table-prefix="+prefix), "purged 1 ledger rows")
			code, _, errOut := cli(t, "ledger", "purge", "--db="+d.dsn)
			require.Equal(t, exitUsage, code, errOut)
		})
	}
}

// session delete --user --temporal deletes the user's conversation workflows (found by the
// TurnstileUser search attribute, and by the conversations of the user's sessions) and ledger
// rows before the sessions; another user's stay.
func TestSessionDeleteTemporal(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := temporaldev.Start(ctx, nil, workflow.SearchAttributeTypes)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("Temporal dev server needed: %v", err)
		}
		t.Skipf("Temporal dev server needed: %v", err)
	}
	t.Cleanup(func() {
		srv.Client().Close() // the dev server's own client: Stop leaves it open
		_ = srv.Stop()
	})
	c := srv.Client()
	sqlite := databases(t)[1]
	dsn := sqlite.dsn
	ok(t, "migrate", "--ledger", "--db="+dsn)
	code, _, errOut := cli(t, "session", "delete", "--user=u-1", "--conversation=c-1", "--temporal="+srv.FrontendHostPort(), "--db="+dsn)
	require.Equal(t, exitUsage, code, errOut)

	start := func(id, user string) {
		opts := client.StartWorkflowOptions{ID: workflow.DefaultIDPrefix + id, TaskQueue: "nobody-polls"}
		if user != "" {
			opts.TypedSearchAttributes = temporal.NewSearchAttributes(workflow.SearchUser.ValueSet(user), workflow.SearchConversation.ValueSet(id))
		}
		_, err := c.ExecuteWorkflow(ctx, opts, workflow.WorkflowName, workflow.State{ConversationID: id})
		require.NoError(t, err)
	}
	start("c-attr", "u-1")  // found by its search attribute
	start("c-session", "")  // found by the user's session
	start("c-other", "u-2") // another user's
	sqlDB := sqlite.open(t)
	ss, err := sqlsession.New(sqlDB, sqlsession.SQLite, sqlsession.Options{})
	require.NoError(t, err)
	_, err = ss.Create(ctx, session.Key{App: turn.DefaultApp, User: "u-1", Conversation: "c-session"}, nil)
	require.NoError(t, err)
	l, err := workflow.NewSQLLedger(sqlDB, workflow.SQLite, "")
	require.NoError(t, err)
	req := turn.Request{ID: "0b9c1e6a-2d8f-4a53-9c1e-0f6f3a3c2b10", ConversationID: "c-attr", UserID: "u-1", Sequence: 1}
	require.NoError(t, l.Record(ctx, workflow.Envelope{Request: req}))

	count := func(q string) int {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: q})
		require.NoError(t, err)
		return len(resp.Executions)
	}
	mine := fmt.Sprintf("WorkflowId IN ('%sc-attr', '%sc-session')", workflow.DefaultIDPrefix, workflow.DefaultIDPrefix)
	require.Eventually(t, func() bool { return count("TurnstileUser = 'u-1'") == 1 && count(mine) == 2 }, wait, 100*time.Millisecond)
	out := ok(t, "session", "delete", "--user=u-1", "--temporal="+srv.FrontendHostPort(), "--db="+dsn)
	require.Contains(t, out, "user u-1 in app turnstile: 2 conversations (c-attr, c-session)")
	require.Regexp(t, `workflow runs +Temporal namespace default +2\n`, out)
	require.Regexp(t, `ledger rows +ledger +1\n`, out)
	require.Regexp(t, `sessions +session store +1\n`, out)
	require.Eventually(t, func() bool { return count(mine) == 0 }, 3*wait, 100*time.Millisecond, "the user's workflows leave visibility")
	require.Equal(t, 1, count("TurnstileUser = 'u-2'"), "another user's workflow stays")
	rows, err := l.Range(ctx, "c-attr", 0, 10)
	require.NoError(t, err)
	require.Empty(t, rows)
}
