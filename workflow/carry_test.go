package workflow

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"

	"github.com/turnstile-go/turnstile/internal/sqltest"
	"github.com/turnstile-go/turnstile/turn"
)

// With Config.MaxCarriedBytes small, a backlog of sequenced and unsequenced requests travels
// through many runs with every continue-as-new input under the bound (plus the dedup window),
// the rest in the workers' OverflowStore; requests that arrive while some wait there apply
// after them: every request applies once, in arrival order.
func TestBoundedCarryKeepsOrder(t *testing.T) {
	t.Parallel()
	u := newUnit(t)
	const conv = "c-carry"
	cfg := Config{MaxTurnsPerRun: 5, MaxCarriedBytes: 2000, DedupWindow: 3, IdleTimeout: time.Minute}
	var sent []turn.Request
	batch := func(n int) []turn.Request {
		var out []turn.Request
		for range n {
			seq := int64(0)
			if len(sent)%2 == 0 {
				seq = int64(len(sent)/2 + 1)
			}
			r := request(conv, seq, fmt.Sprintf("m%d", len(sent)))
			sent = append(sent, r)
			out = append(out, r)
		}
		return out
	}
	st := State{ConversationID: conv, Config: cfg}
	largest, overflowed := 0, false
	for run := 0; ; run++ {
		require.Less(t, run, 100, "the backlog drains")
		var s testsuite.WorkflowTestSuite
		env := s.NewTestWorkflowEnvironment()
		require.NoError(t, Register(env, u.opts))
		var arrivals []turn.Request
		switch run {
		case 0:
			arrivals = batch(40)
		case 2:
			arrivals = batch(10) // while requests wait in the store
		}
		if len(arrivals) > 0 {
			delay := time.Second // run 0 waits for them; later runs have work at once
			if run > 0 {
				delay = 0
			}
			env.RegisterDelayedCallback(func() {
				for _, r := range arrivals {
					env.SignalWorkflowSkippingWorkflowTask(SignalName, batchOf(r))
				}
				env.SignalWorkflow(SignalName, batchOf(arrivals[0])) // a duplicate
			}, delay)
		}
		env.ExecuteWorkflow(WorkflowName, st)
		if env.GetWorkflowError() == nil {
			break // idle end: nothing left
		}
		st = continuedState(t, env)
		input, err := json.Marshal(st)
		require.NoError(t, err)
		largest = max(largest, len(input))
		pending := 0
		for _, p := range st.Pending {
			pending += envelopeSize(p)
		}
		require.LessOrEqual(t, pending, cfg.MaxCarriedBytes, "run %d carries at most MaxCarriedBytes of pending requests", run)
		overflowed = overflowed || st.Overflow > 0
	}
	require.True(t, overflowed, "the backlog went through the store")
	t.Logf("largest continue-as-new input: %d bytes (bound %d + the dedup window)", largest, cfg.MaxCarriedBytes)
	got := u.model.ids()
	want := make([]string, len(sent))
	for i, r := range sent {
		want[i] = r.ID
	}
	require.Equal(t, want, got, "every request once, in arrival order")
}

// Both stores keep the overflow by position, load it back in order within the byte bound,
// forget what was loaded before, and say when a position is missing.
func TestOverflowStores(t *testing.T) {
	t.Parallel()
	for name, open := range ledgerOpeners() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l := open(t).(OverflowStore)
			ctx := context.Background()
			var envs []Envelope
			for i := range 5 {
				envs = append(envs, Envelope{Request: request("c-of", int64(i+1), "text")})
			}
			require.NoError(t, l.SaveOverflow(ctx, "c-of", -2, envs))
			require.NoError(t, l.SaveOverflow(ctx, "c-of", -2, envs[:1]), "saving again replaces")
			got, err := l.LoadOverflow(ctx, "c-of", -2, 10, 1)
			require.NoError(t, err)
			require.Len(t, got, 1, "the first one alone passes maxBytes")
			got, err = l.LoadOverflow(ctx, "c-of", -1, 3, 1<<20)
			require.NoError(t, err)
			require.Len(t, got, 3, "limit")
			require.Equal(t, envs[1].Request.ID, got[0].Request.ID)
			require.Equal(t, envs[3].Request.ID, got[2].Request.ID)
			_, err = l.LoadOverflow(ctx, "c-of", -2, 1, 1<<20)
			require.ErrorIs(t, err, ErrOverflowMissing, "positions below the last load are forgotten")
			_, err = l.LoadOverflow(ctx, "nobody", 0, 1, 1<<20)
			require.ErrorIs(t, err, ErrOverflowMissing)
		})
	}
}

// ledgerOpeners returns a fresh ledger per kind: memory, SQLite and PostgreSQL.
func ledgerOpeners() map[string]func(t *testing.T) Ledger {
	ledgers := map[string]func(t *testing.T) Ledger{"memory": func(*testing.T) Ledger { return &MemoryLedger{} }}
	for _, db := range []sqltest.DB{sqltest.SQLiteFileDB, sqltest.PostgresDB} {
		ledgers[db.Name] = func(t *testing.T) Ledger {
			conn := db.Open(t)
			dialect := SQLite
			if db.Postgres {
				dialect = PostgreSQL
			}
			l, err := NewSQLLedger(conn, dialect, sqltest.Prefix(t, conn, db.Postgres))
			require.NoError(t, err)
			require.NoError(t, l.Migrate(context.Background()))
			return l
		}
	}
	return ledgers
}
