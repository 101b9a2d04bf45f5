package main

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	tworker "go.temporal.io/sdk/worker"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/internal/record"
	"github.com/turnstile-go/turnstile/internal/temporaldev"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turntest"
	"github.com/turnstile-go/turnstile/workflow"
)

// needTemporal starts a Temporal dev server with turnstile's search attributes for the test
// and returns its host:port, stopped when the test ends. Without the temporal CLI it skips the
// test (fails it under CI=true).
func needTemporal(t *testing.T) string {
	t.Helper()
	if _, err := temporaldev.CLIPath(); errors.Is(err, temporaldev.ErrNoCLI) {
		if os.Getenv("CI") == "true" {
			t.Fatalf("Temporal dev server needed (CI=true): %v", err)
		}
		t.Skipf("Temporal dev server needed: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := temporaldev.Start(ctx, nil, workflow.SearchAttributeTypes)
	require.NoError(t, err)
	t.Cleanup(func() {
		srv.Client().Close() // Stop leaves the client it dialled open
		require.NoError(t, srv.Stop())
	})
	return srv.FrontendHostPort()
}

// temporalService is a Temporal-mode service on a dev server and a real broker: a worker of
// the conversation workflows publishing to results and dlq, and the bridge that hands
// requests off to them, as a consumer member does.
type temporalService struct {
	host, queue  string
	results, dlq string
	bridge       *workflow.Bridge
	kc           *turntest.Cluster
	stopWorker   func() // stops the worker (once; the test's end does too)
}

func startTemporalService(t *testing.T) *temporalService {
	t.Helper()
	s := &temporalService{host: needTemporal(t), kc: turntest.NewCluster(t, turntest.Options{})}
	s.queue = s.kc.Unique("tq")
	s.results, s.dlq = s.kc.CreateTopic(t, "results", 1), s.kc.CreateTopic(t, "dlq", 1)
	quiet := slog.New(slog.DiscardHandler)
	c, err := client.Dial(client.Options{HostPort: s.host, Namespace: "default", Logger: tlog.NewStructuredLogger(quiet)})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	pub, err := workflow.NewKafkaPublisher(s.kc.Brokers(), s.kc.Config(), s.results, s.dlq)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	model := turn.ModelFunc(func(_ context.Context, in turn.Input) (turn.Output, error) {
		return turn.Output{Events: []session.Event{{Text: "answered " + in.Request.Text}}}, nil
	})
	r := &turn.Runner{Model: model, Sessions: session.NewMemoryStore(), Inbox: inbox.NewMemoryInbox(), Logger: quiet}
	w := tworker.New(c, s.queue, tworker.Options{})
	require.NoError(t, workflow.Register(w, workflow.WorkerOptions{Runner: r, Publisher: pub, States: &workflow.MemoryLedger{}, Logger: quiet}))
	require.NoError(t, w.Start())
	s.stopWorker = sync.OnceFunc(w.Stop)
	t.Cleanup(s.stopWorker)
	s.bridge, err = workflow.NewBridge(c, workflow.BridgeOptions{TaskQueue: s.queue, Logger: quiet,
		Config: workflow.Config{SearchAttributes: true}})
	require.NoError(t, err)
	return s
}

// handOff hands the request of conversation conv with sequence seq to its workflow.
func (s *temporalService) handOff(t *testing.T, conv string, seq int64) turn.Request {
	t.Helper()
	req := turntest.NewRequest(conv, "u-1", "message "+conv)
	req.Sequence = seq
	_, err := s.bridge.Handle(t.Context(), req)
	require.NoError(t, err)
	return req
}

// heldJSON runs turnstile held --json (args added) and returns what it lists; ok is false when
// the command failed.
func (s *temporalService) heldJSON(t *testing.T, args ...string) ([]workflow.HeldConversation, bool) {
	t.Helper()
	code, out, _ := cli(t, append([]string{"held", "--temporal=" + s.host, "--task-queue=" + s.queue, "--json"}, args...)...)
	var held []workflow.HeldConversation
	return held, code == exitOK && json.Unmarshal([]byte(out), &held) == nil
}

// The acceptance line of the CLI's held and release, on a dev server: sequences 1 and 3 of two
// conversations handed off, 2 never. turnstile held lists both with 2 missing (the table and
// --json); turnstile release of each (the text, and --json) skips 2; held then lists nothing,
// a dead letter with reason gap per conversation is on the dead-letter topic (its request id
// the gap's identity, record.GapRequestID), and the held requests apply.
func TestHeldAndRelease(t *testing.T) {
	t.Parallel()
	s := startTemporalService(t)
	temporal := []string{"--temporal=" + s.host}
	convs := []string{s.kc.Unique("c-text"), s.kc.Unique("c-json")}
	var third []turn.Request
	for _, conv := range convs {
		s.handOff(t, conv, 1)
		third = append(third, s.handOff(t, conv, 3))
	}

	// held: both conversations, with 3 held and 2 missing (visibility lags by a second or so).
	var held []workflow.HeldConversation
	require.Eventually(t, func() bool {
		var ok bool
		held, ok = s.heldJSON(t, "--search-attributes")
		return ok && len(held) == 2
	}, wait, 200*time.Millisecond, "both held conversations are listed")
	require.NoError(t, json.Unmarshal([]byte(ok(t, "held", temporal[0], "--task-queue="+s.queue, "--search-attributes", "--json")), &held))
	require.Len(t, held, 2)
	for _, h := range held {
		require.Contains(t, convs, h.ConversationID)
		require.Equal(t, s.bridge.WorkflowID(h.ConversationID), h.WorkflowID)
		require.True(t, h.Held)
		require.Equal(t, []int64{2}, h.Missing)
		require.Equal(t, []int64{3}, h.PendingSequences)
		require.Equal(t, int64(1), h.LastAppliedSequence)
		require.False(t, h.HeldSince.IsZero())
	}
	code, out, errOut := cli(t, "held", temporal[0], "--task-queue="+s.queue)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "MISSING")
	require.Contains(t, errOut, "2 conversations held")
	for _, conv := range convs {
		row := tableRow(t, out, conv)
		require.GreaterOrEqual(t, len(row), 5, out)
		require.Equal(t, []string{conv, s.bridge.WorkflowID(conv), "1", "3", "2"}, row[:5], "conversation, workflow, last applied, held, missing:\n%s", out)
	}

	// release: the text, then --json.
	out = ok(t, "release", temporal[0], "--conversation="+convs[0], "--reason=test: 2 was lost")
	require.Contains(t, out, "released "+convs[0]+": skipped 1 sequence(s) [2]; last applied sequence 3")
	var released releasedJSON
	require.NoError(t, json.Unmarshal([]byte(ok(t, "release", temporal[0], "--conversation="+convs[1], "--json")), &released))
	require.Equal(t, releasedJSON{ConversationID: convs[1], Released: workflow.Released{Skipped: []int64{2}, Count: 1, LastAppliedSequence: 3}}, released)
	code, _, errOut = cli(t, "release", temporal[0], "--conversation="+convs[0])
	require.Equal(t, exitFailed, code, errOut)
	require.Contains(t, errOut, "not held at a gap")

	// held lists nothing now.
	require.Equal(t, "[]\n", ok(t, "held", temporal[0], "--task-queue="+s.queue, "--json"))
	code, out, errOut = cli(t, "held", temporal[0], "--task-queue="+s.queue, "--search-attributes")
	require.Equal(t, exitOK, code, errOut)
	require.NotContains(t, out, convs[0])
	require.Contains(t, errOut, "0 conversations held")

	// The gap dead letters, one per conversation, through the CLI's dlq list.
	brokers := "--brokers=" + s.kc.BrokerList()
	for i, conv := range convs {
		var letters []letterJSON
		require.NoError(t, json.Unmarshal([]byte(ok(t, "dlq", "list", brokers, "--topic="+s.dlq, "--conversation="+conv, "--json")), &letters))
		require.Len(t, letters, 1, conv)
		require.Equal(t, workflow.GapReason, letters[0].Reason)
		require.Equal(t, record.GapRequestID(s.bridge.WorkflowID(conv), 2), letters[0].RequestID, "the gap's identity")
		require.Contains(t, letters[0].Error, "sequence 2")
		if i == 0 {
			require.Contains(t, letters[0].Error, "test: 2 was lost", "--reason is kept")
		}
	}

	// The held requests applied: a result each, after those of sequence 1.
	var answered []string
	for _, r := range s.kc.ReadResults(t, s.results, 4, wait) {
		answered = append(answered, r.RequestID)
	}
	for _, r := range third {
		require.Contains(t, answered, r.ID, "sequence 3 of %s applied", r.ConversationID)
	}
	requireJSONCovered(t)
}

// tableRow returns the fields of the row of table out whose first field is first.
func tableRow(t *testing.T, out, first string) []string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == first {
			return f
		}
	}
	require.Failf(t, "no row", "no row for %s in:\n%s", first, out)
	return nil
}
