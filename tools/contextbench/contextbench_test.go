package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/internal/sqltest"
	"github.com/turnstile-go/turnstile/turn"
)

// TestInputTableAndPlot runs the -input measurement on a short conversation under a small
// budget and writes its table and plot, so that the code that made BENCHMARKS.md's figures
// and docs/context-input.png keeps working: the compacted input stays flat and holds the
// facts of turns 1 to 5, the whole history grows, the window loses the facts.
func TestInputTableAndPlot(t *testing.T) {
	t.Parallel()
	const turns = 40
	series, err := measureInput(context.Background(), turns, 6000, nil)
	require.NoError(t, err)
	require.Len(t, series, len(strategies))
	by := map[strategy]inputSeries{}
	for _, s := range series {
		require.Len(t, s.Turns, turns)
		by[s.Strategy] = s
	}
	last := func(s strategy) inputStats { return by[s].Turns[turns-1] }
	require.Greater(t, last(whole).Tokens, 3*last(compaction).Tokens, "the whole history grows past the compacted input")
	require.Greater(t, last(whole).Bytes, 3*last(compaction).Bytes)
	require.Positive(t, by[compaction].Summaries)
	require.Zero(t, by[whole].Summaries+by[window].Summaries)
	for i := len(facts); i < turns; i++ {
		require.True(t, by[compaction].Turns[i].AllFacts, "turn %d: the summary carries the facts", i+1)
		require.True(t, by[whole].Turns[i].AllFacts, "turn %d", i+1)
		require.LessOrEqual(t, by[compaction].Turns[i].Tokens, 6000, "turn %d: within the budget", i+1)
	}
	require.False(t, last(window).AllFacts, "the window lost the beginning")

	var table bytes.Buffer
	writeInputTable(&table, series)
	require.Contains(t, table.String(), "| 25 |")
	require.Contains(t, table.String(), fmt.Sprintf("| %d |", turns))
	require.Contains(t, table.String(), "summarizer calls")

	dir := t.TempDir()
	for _, name := range []string{"input.png", "input.svg"} {
		path := filepath.Join(dir, name)
		require.NoError(t, writeInputPlot(series, path))
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		if strings.HasSuffix(name, ".png") {
			require.True(t, bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")), "a PNG")
		} else {
			require.Contains(t, string(data), "<svg")
		}
	}
	require.Error(t, writeInputPlot(series, filepath.Join(dir, "input.gif")))
}

// TestStoredBytes runs the -stored measurement on a small workload on SQLite and PostgreSQL
// (skipped with the reason when unreachable, failing under CI=true): the retention run past
// the inbox horizon leaves the sessions and takes the inbox and the outbox down to their
// empty tables; the one past the sessions' idle time takes the sessions.
func TestStoredBytes(t *testing.T) {
	t.Parallel()
	for _, db := range []sqltest.DB{sqltest.SQLiteFileDB, sqltest.PostgresDB} {
		t.Run(db.Name, func(t *testing.T) {
			t.Parallel()
			o := storedOptions{DB: "sqlite", Conversations: 2, Turns: 15, Dir: t.TempDir()}
			if db.Postgres {
				sqltest.Postgres(t) // skips or fails when PostgreSQL is unreachable
				o.DB, o.PostgresDSN = "postgres", sqltest.PostgresDSN()
			}
			r, err := measureStored(context.Background(), o, nil)
			require.NoError(t, err)
			require.Equal(t, 30, r.Turns)
			require.Positive(t, r.Checkpoints, "15 turns pass the 50-event window: compaction ran")
			require.EqualValues(t, 2*3, r.Intents, "turns 5, 10 and 15 of each conversation queued a notification")
			require.Equal(t, turn.Deleted{Inbox: 30 + 6}, r.DeletedInbox, "every entry and every delivered intent")
			require.Equal(t, turn.Deleted{Sessions: 2}, r.DeletedSessions)
			require.Less(t, r.AfterInbox.Inbox, r.Before.Inbox)
			require.LessOrEqual(t, r.AfterInbox.Outbox, r.Before.Outbox, "six rows may fit the pages of the empty table")
			require.Equal(t, r.Before.Sessions, r.AfterInbox.Sessions, "the sessions are not idle yet")
			require.Less(t, r.AfterSessions.Sessions, r.Before.Sessions)

			var table bytes.Buffer
			writeStoredTable(&table, []storedReport{r})
			require.Contains(t, table.String(), "inbox entries with journals")
		})
	}
}

// BenchmarkCompaction measures the amortized cost of compaction per turn: three conversations
// of b.N turns through turn.Runner and turn/agent with a scripted in-process model on the
// memory stores, one turn of each in turn (the order rotating), under the three strategies.
// The Runner and the Agent count tokens with tiktoken's o200k_base through a cache by text,
// as turn/chatcompletion counts them (count=tiktoken), or with turn.EstimateTokens, as for
// turn/anthropic (count=estimate); the input tokens reported are o200k's. Metrics: each
// strategy's wall time per turn and model input tokens per turn (the turn's largest
// request), the compaction's summarizer calls and summarizer input tokens per turn, and the
// ratios of wall time compaction/window50 and compaction/whole.
//
//	go test -run '^$' -bench BenchmarkCompaction -benchtime 1000x ./tools/contextbench/
func BenchmarkCompaction(b *testing.B) {
	for _, counting := range []string{"tiktoken", "estimate"} {
		b.Run("count="+counting, func(b *testing.B) { benchmarkCompaction(b, counting == "estimate") })
	}
}

func benchmarkCompaction(b *testing.B, estimate bool) {
	ctx := context.Background()
	convs := make([]*conversation, len(strategies))
	for k, s := range strategies {
		c, err := newConversation(s, conversationOptions{EstimateTokens: estimate, CacheTokens: !estimate})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		convs[k] = c
	}
	elapsed := make([]time.Duration, len(convs))
	tokens := make([]int64, len(convs))
	turns := 0
	for b.Loop() {
		turns++
		for j := range convs {
			k := (turns + j) % len(convs)
			start := time.Now()
			if err := convs[k].run(ctx, turns); err != nil {
				b.Fatal(err)
			}
			elapsed[k] += time.Since(start)
			st, err := convs[k].stats(turns)
			if err != nil {
				b.Fatal(err)
			}
			tokens[k] += int64(st.Tokens)
		}
	}
	per := func(v float64) float64 { return v / float64(turns) }
	name := map[strategy]string{whole: "whole", window: "window50", compaction: "compaction"}
	for k, c := range convs {
		b.ReportMetric(per(float64(elapsed[k].Microseconds())), name[c.strategy]+"-µs/turn")
		b.ReportMetric(per(float64(tokens[k])), name[c.strategy]+"-input-tokens/turn")
	}
	p := convs[2].provider
	p.mu.Lock()
	b.ReportMetric(per(float64(p.summaries)), "summaries/turn")
	b.ReportMetric(per(float64(p.summaryInputTokens)), "summary-input-tokens/turn")
	p.mu.Unlock()
	b.ReportMetric(float64(elapsed[2])/float64(elapsed[1]), "compaction/window50")
	b.ReportMetric(float64(elapsed[2])/float64(elapsed[0]), "compaction/whole")
	b.ReportMetric(0, "ns/op")
}
