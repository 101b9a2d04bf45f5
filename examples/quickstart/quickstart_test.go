package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/examples/internal/demo/demotest"
	"github.com/turnstile-go/turnstile/internal/sqltest"
	"github.com/turnstile-go/turnstile/turntest"
)

func TestMain(m *testing.M) { demotest.Main(m) }

// runSmall runs the quickstart with a small workload and returns its summary, failing the
// test when the run breaks off. The output goes to the test log.
func runSmall(t *testing.T, cfg Config) Summary {
	t.Helper()
	cfg.Requests, cfg.Conversations = 200, 20
	cfg.Rate = 1000
	cfg.Timeout = 2 * time.Minute
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sum, err := run(ctx, cfg, &stdout, &stderr)
	t.Logf("stdout:\n%s\nstderr:\n%s", &stdout, &stderr)
	require.NoError(t, err)
	require.Contains(t, stdout.String(), "checks")
	return sum
}

// requireChecks asserts the summary's checks and the counts behind them.
func requireChecks(t *testing.T, sum Summary) {
	t.Helper()
	names := []string{"0 lost: every request has a result"}
	if slices.Contains(sum.Checks.Names(), txnCheck) { // TestQuickstartTransactional
		names = append(names, txnCheck)
	}
	demotest.RequireChecks(t, sum.Checks, append(names,
		"every result record is a valid result envelope",
		"0 duplicate turns: every request is in its session history once",
		"each conversation's history is in order",
		"replies show earlier context",
	)...)
	require.Equal(t, sum.Requests, sum.Results, "one result per request")
	require.Equal(t, sum.Requests, sum.Turns, "one turn per request")
	require.Zero(t, sum.DeadLetters)
	require.GreaterOrEqual(t, sum.ModelCalls, int64(sum.Turns))
	require.Contains(t, sum.Rebalance, "left the group gracefully")
	require.Positive(t, sum.P99)
}

func TestQuickstartOnSQLite(t *testing.T) {
	t.Parallel()
	sum := runSmall(t, Config{DBPath: filepath.Join(t.TempDir(), "quickstart.db")})
	requireChecks(t, sum)
}

// The -transactional flag: the members commit results and offsets in transactions, and the
// check that a read_committed reader saw no repeated result record runs, and passes, through
// the rebalance halfway.
func TestQuickstartTransactional(t *testing.T) {
	t.Parallel()
	sum := runSmall(t, Config{DBPath: filepath.Join(t.TempDir(), "quickstart.db"), Transactional: true})
	requireChecks(t, sum)
	require.Contains(t, sum.Checks.Names(), txnCheck, "the transactional check ran")
	require.Equal(t, sum.Requests, sum.ResultRecords, "one result record per request")
}

func TestQuickstartOnPostgreSQL(t *testing.T) {
	t.Parallel()
	dsn, prefix := postgres(t)
	sum := runSmall(t, Config{Postgres: dsn, TablePrefix: prefix})
	requireChecks(t, sum)
}

// postgres returns the DSN of the tests' PostgreSQL (TURNSTILE_POSTGRES_DSN, or
// sqltest.DefaultPostgresDSN) and a table prefix of the test's own, whose tables it drops at
// the end. It skips the test when PostgreSQL cannot be reached, or fails it under CI=true.
// (sqltest.Postgres does the same with a pool it never closes, which goleak would report.)
func postgres(t *testing.T) (dsn, prefix string) {
	t.Helper()
	dsn, prefix = sqltest.PostgresDSN(), "qs"+sqltest.ID(t)[:12]+"_"
	db, err := sql.Open("pgx", dsn)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		msg := fmt.Sprintf("PostgreSQL unreachable at %s (set TURNSTILE_POSTGRES_DSN): %v", dsn, err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	t.Cleanup(func() {
		sqltest.DropTables(t, db, prefix)
		db.Close()
	})
	return dsn, prefix
}

// TestQuickstartOnExistingBrokersStartsAtTheEnd runs the quickstart twice against one cluster,
// as -brokers does: the second run finds the topics there, and its group starts at their end,
// so it neither replays nor counts the first run's records. The cluster is the one
// TURNSTILE_KAFKA_BROKERS names, or an embedded one.
func TestQuickstartOnExistingBrokersStartsAtTheEnd(t *testing.T) {
	t.Parallel()
	var brokers []string
	for b := range strings.SplitSeq(os.Getenv(turntest.EnvBrokers), ",") {
		if b = strings.TrimSpace(b); b != "" {
			brokers = append(brokers, b)
		}
	}
	if len(brokers) == 0 {
		kc, err := turntest.Start(turntest.Options{})
		require.NoError(t, err)
		t.Cleanup(kc.Close)
		brokers = kc.Brokers()
	}
	db := filepath.Join(t.TempDir(), "quickstart.db")
	for range 2 {
		sum := runSmall(t, Config{Brokers: brokers, DBPath: db})
		requireChecks(t, sum)
		// Serving the earlier run's records again would add one result record each (replayed
		// from the inbox). A few repeats of this run's own are G3's redeliveries: a turn of a
		// partition revoked in a slow rebalance is redone by its next owner, and readers dedup
		// on request-id (a loaded CI machine saw 3 of 200).
		slack := sum.Requests / 10
		require.GreaterOrEqual(t, sum.ResultRecords, sum.Requests, "every request of this run has its result")
		require.Less(t, sum.ResultRecords, sum.Requests+slack, "only this run's results, with at most a few redelivered")
		require.GreaterOrEqual(t, int(sum.ModelCalls), sum.Requests)
		require.Less(t, int(sum.ModelCalls), sum.Requests+slack, "no record of the earlier run was served")
	}
}

func TestFlags(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	require.Equal(t, 2, command().Main([]string{"-requests", "many"}, &stdout, &stderr))
	require.Contains(t, stderr.String(), "invalid value")
	stderr.Reset()
	require.Equal(t, 2, command().Main([]string{"extra"}, &stdout, &stderr))
	require.Contains(t, stderr.String(), "unexpected arguments")
	stderr.Reset()
	require.Equal(t, 1, command().Main([]string{"-conversations", "5", "-requests", "3"}, &stdout, &stderr))
	require.Contains(t, stderr.String(), "Conversations")
	require.Empty(t, stdout.String())
}

func TestPercentile(t *testing.T) {
	t.Parallel()
	ds := make([]time.Duration, 100)
	for i := range ds {
		ds[i] = time.Duration(100-i) * time.Millisecond
	}
	require.Equal(t, 50*time.Millisecond, percentile(ds, 50))
	require.Equal(t, 99*time.Millisecond, percentile(ds, 99))
	require.Equal(t, time.Duration(0), percentile(nil, 50))
}

func TestWorkloadInterleavesConversationsInOrder(t *testing.T) {
	t.Parallel()
	wl := newWorkload("abc", 103, 10)
	require.Len(t, wl.order, 103)
	require.Len(t, wl.convs, 10)
	seen := map[string]int64{}
	switches := 0
	for i, r := range wl.order {
		seen[r.ConversationID]++
		require.Equal(t, seen[r.ConversationID], r.Sequence, "a conversation's requests go out in order")
		require.True(t, strings.HasPrefix(r.ConversationID, "qs-abc-"))
		if i > 0 && wl.order[i-1].ConversationID != r.ConversationID {
			switches++
		}
	}
	require.Greater(t, switches, 50, "conversations are interleaved")
	require.Len(t, wl.byConv[wl.convs[0]], 11)
	require.Len(t, wl.byConv[wl.convs[9]], 10)
}

// With telemetry on, the spans of a request form one trace from the producer's send through
// the member that ran it (process, inbox, session, model, append, send), each side named by
// its resource, and the members' metrics are exported too.
func TestQuickstartTelemetry(t *testing.T) {
	var out bytes.Buffer
	sum := runSmall(t, Config{Telemetry: &out})
	requireChecks(t, sum)

	type span struct {
		Name        string
		SpanContext struct{ TraceID string }
		Resource    []struct {
			Key   string
			Value struct{ Value any }
		}
	}
	byTrace := map[string]map[string]map[string]bool{} // trace id -> instance -> span names
	metrics := 0
	dec := json.NewDecoder(&out)
	for dec.More() {
		var doc map[string]json.RawMessage
		require.NoError(t, dec.Decode(&doc))
		if _, ok := doc["ScopeMetrics"]; ok {
			if bytes.Contains(doc["ScopeMetrics"], []byte(`"turnstile.turns"`)) {
				metrics++
			}
			continue
		}
		raw, err := json.Marshal(doc)
		require.NoError(t, err)
		var s span
		require.NoError(t, json.Unmarshal(raw, &s))
		instance := ""
		for _, kv := range s.Resource {
			if kv.Key == "service.instance.id" {
				instance = fmt.Sprint(kv.Value.Value)
			}
		}
		tr := byTrace[s.SpanContext.TraceID]
		if tr == nil {
			tr = map[string]map[string]bool{}
			byTrace[s.SpanContext.TraceID] = tr
		}
		if tr[instance] == nil {
			tr[instance] = map[string]bool{}
		}
		tr[instance][s.Name] = true
	}
	require.Positive(t, metrics, "the members' metrics are exported")
	// A request redone after the rebalance has spans on two members: one ran its turn, one of
	// them published the result.
	whole := 0
	for _, instances := range byTrace {
		if !instances["producer"]["send "+RequestsTopic] {
			continue
		}
		ran, sent := false, false
		for instance, names := range instances {
			if instance == "producer" {
				continue
			}
			all := true
			for _, n := range []string{"process " + RequestsTopic, "inbox.Begin", "session.Get", "model.Respond", "session.Append"} {
				all = all && names[n]
			}
			ran = ran || all
			sent = sent || names["send "+ResultsTopic] // by the same member, or by the next owner replaying it
		}
		if ran && sent {
			whole++
		}
	}
	require.Equal(t, sum.Requests, whole, "every request's trace runs from the producer through the member that ran its turn")
}
