package consumer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turntest"
)

// needPython skips the test (fails it under CI=true) when Python's Kafka client is missing
// (turntest.NeedPythonKafka). Call it before starting a member, so that a skip does not cut a
// member off mid-connect.
func needPython(t *testing.T) {
	t.Helper()
	turntest.NeedPythonKafka(t)
}

// python runs testdata/interop.py with turntest.PythonPath's confluent-kafka (librdkafka).
func python(t *testing.T, stdin string, args ...string) []map[string]any {
	t.Helper()
	needPython(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, turntest.PythonPath(), append([]string{"testdata/interop.py"}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "interop.py %v: %s", args, stderr.String())
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), line)
		out = append(out, m)
	}
	return out
}

// Requests produced by another client with a Java-compatible partitioner are served, and that
// client, reading as read_committed, finds each result under the request's key, on the
// request's partition, with turnstile's headers.
func TestConfluentKafkaInterop(t *testing.T) {
	t.Parallel()
	needPython(t)
	e := setup(t, 6, 6)
	e.start(memberOpts{})
	var lines []string
	reqs := map[string]turn.Request{}
	for i := range 12 {
		r := request(fmt.Sprintf("py-%d", i), fmt.Sprintf("hello from python %d", i))
		data, err := r.Encode()
		require.NoError(t, err)
		lines = append(lines, r.ConversationID+"\t"+string(data))
		reqs[r.ConversationID] = r
	}
	produced := python(t, strings.Join(lines, "\n")+"\n", "produce", e.cluster.BrokerList(), e.requests)
	require.Len(t, produced, len(reqs))
	requestPartition := map[string]float64{}
	for _, p := range produced {
		requestPartition[p["key"].(string)] = p["partition"].(float64)
	}

	results := python(t, "", "consume", e.cluster.BrokerList(), e.results, fmt.Sprint(len(reqs)))
	require.Len(t, results, len(reqs))
	for _, r := range results {
		key := r["key"].(string)
		req, ok := reqs[key]
		require.True(t, ok, "result under unknown key %q", key)
		require.Equal(t, requestPartition[key], r["partition"], "result of %s co-partitioned with its request", key)
		headers := r["headers"].(map[string]any)
		require.Equal(t, req.ID, headers[consumer.HeaderRequestID])
		require.Equal(t, key, headers[consumer.HeaderConversationID])
		res, err := turn.DecodeResult([]byte(r["value"].(string)))
		require.NoError(t, err)
		require.Equal(t, req.ID, res.RequestID)
		require.Contains(t, res.Text, req.Text)
	}
}

func TestKcatInterop(t *testing.T) {
	t.Parallel()
	turntest.NeedKcat(t)
	e := setup(t, 3, 3)
	e.start(memberOpts{})
	var lines []string
	reqs := make([]turn.Request, 5)
	for i := range reqs {
		reqs[i] = request(fmt.Sprintf("kc-%d", i), fmt.Sprintf("hello from librdkafka %d", i))
		data, err := reqs[i].Encode()
		require.NoError(t, err)
		lines = append(lines, reqs[i].ConversationID+"\t"+string(data))
	}
	turntest.KcatInput(t, []byte(strings.Join(lines, "\n")+"\n"),
		"-b", e.cluster.BrokerList(), "-P", "-t", e.requests, "-K", "\t", "-H", "origin=kcat", "-X", "topic.partitioner=murmur2_random")

	e.resultsByID(len(reqs)) // wait until they are all there
	out := turntest.Kcat(t, "-b", e.cluster.BrokerList(), "-C", "-t", e.results, "-o", "beginning", "-e", "-q",
		"-f", "%k|%h|%s\n")
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		parts := strings.SplitN(line, "|", 3)
		require.Len(t, parts, 3, line)
		res, err := turn.DecodeResult([]byte(parts[2]))
		require.NoError(t, err)
		require.Equal(t, parts[0], res.ConversationID)
		require.Contains(t, parts[1], consumer.HeaderRequestID+"="+res.RequestID)
		require.Contains(t, parts[1], consumer.HeaderConversationID+"="+res.ConversationID)
		require.Contains(t, parts[1], consumer.HeaderAttempt+"=1")
		got[res.RequestID] = res.Text
	}
	require.Len(t, got, len(reqs))
	for _, r := range reqs {
		require.Contains(t, got[r.ID], r.Text)
	}
}
