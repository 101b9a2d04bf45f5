package workflow

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Both ledgers keep the first request of a sequence, ignore unsequenced requests, answer the
// high-water mark and ranges in order, and list conversations by the age of their last hand-off.
func TestLedgers(t *testing.T) {
	t.Parallel()
	for name, open := range ledgerOpeners() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l := open(t)
			ctx := context.Background()
			first := Envelope{Request: request("c1", 2, "two")}
			require.NoError(t, l.Record(ctx, Envelope{Request: request("c1", 1, "one")}, first, Envelope{Request: request("c1", 0, "none")}))
			require.NoError(t, l.Record(ctx, Envelope{Request: request("c1", 2, "other two")}, Envelope{Request: request("c1", 5, "five")}))
			high, err := l.HighWater(ctx, "c1")
			require.NoError(t, err)
			require.Equal(t, int64(5), high)
			high, err = l.HighWater(ctx, "nobody")
			require.NoError(t, err)
			require.Zero(t, high)
			got, err := l.Range(ctx, "c1", 2, 5)
			require.NoError(t, err)
			require.Len(t, got, 2)
			require.Equal(t, first.Request.ID, got[0].Request.ID, "the first request of sequence 2 stays")
			require.Equal(t, int64(5), got[1].Request.Sequence)
			convs, err := l.Conversations(ctx, time.Now().Add(time.Hour))
			require.NoError(t, err)
			require.Equal(t, []string{"c1"}, convs)
			convs, err = l.Conversations(ctx, time.Now().Add(-time.Hour))
			require.NoError(t, err)
			require.Empty(t, convs)

			states := l.(StateStore)
			_, found, err := states.LoadState(ctx, "c1")
			require.NoError(t, err)
			require.False(t, found)
			for _, next := range []int64{4, 9} {
				require.NoError(t, states.SaveState(ctx, State{ConversationID: "c1", NextSequence: next, Recent: []string{"a", "b"}}))
			}
			st, found, err := states.LoadState(ctx, "c1")
			require.NoError(t, err)
			require.True(t, found)
			require.Equal(t, int64(9), st.NextSequence, "the last save wins")
			require.Equal(t, []string{"a", "b"}, st.Recent)
		})
	}
}

// Bad options get clear errors, not panics.
func TestOptionErrors(t *testing.T) {
	t.Parallel()
	_, err := NewBridge(nil, BridgeOptions{TaskQueue: "q"})
	require.ErrorContains(t, err, "nil client")
	_, err = NewSQLLedger(nil, SQLite, "")
	require.ErrorContains(t, err, "nil *sql.DB")
	_, err = NewKafkaPublisher(nil, nil, "", "dlq")
	require.ErrorContains(t, err, "results topic")
	u := newUnit(t)
	opts := u.opts
	opts.Publisher = nil
	require.ErrorContains(t, Register(nil, opts), "Publisher is nil")
	opts = u.opts
	opts.Runner = nil
	require.ErrorContains(t, Register(nil, opts), "Runner")
}
