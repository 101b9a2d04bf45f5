package consumer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/turn"
)

// logBuffer collects JSON log lines from several goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the log lines decoded, and the raw text.
func (b *logBuffer) lines(t *testing.T) ([]map[string]any, string) {
	t.Helper()
	b.mu.Lock()
	text := b.buf.String()
	b.mu.Unlock()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(text), "\n") {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m), l)
		out = append(out, m)
	}
	return out, text
}

func linesWith(lines []map[string]any, key, value string) []map[string]any {
	var out []map[string]any
	for _, l := range lines {
		if l[key] == value {
			out = append(out, l)
		}
	}
	return out
}

// One failed attempt gives exactly one warning line, from the consumer that retries it, with
// the request id, conversation id, topic, partition, offset and attempt, and its retry delay
// as text; assignment and the shutdown drain are info lines; the texts of the request and the
// reply appear nowhere.
func TestOneWarningPerFailedAttempt(t *testing.T) {
	t.Parallel()
	e := setup(t, 2, 2)
	logs := &logBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var calls atomic.Int64
	const secret, reply = "my card number is 4111", "noted, thank you"
	m := e.start(memberOpts{
		model: func(_ context.Context, in turn.Input) (turn.Output, error) {
			if calls.Add(1) == 1 {
				return turn.Output{}, errors.New("model is confused")
			}
			out, err := echo(in)
			out.Events[0].Text = reply
			return out, err
		},
		runner: func(r *turn.Runner) { r.Logger = log },
		tune:   func(cfg *consumer.Config) { cfg.Logger = log },
	})
	req := request("log-conv", secret)
	e.produce(req)
	res := e.resultsByID(1)[req.ID]
	require.Len(t, res, 1)
	m.stop(t)

	lines, text := logs.lines(t)
	warns := linesWith(lines, "level", "WARN")
	require.Len(t, warns, 1, "one warning for one failed attempt: %s", text)
	w := warns[0]
	require.Equal(t, "turn attempt failed; retrying", w["msg"])
	require.Equal(t, req.ID, w["request_id"])
	require.Equal(t, req.ConversationID, w["conversation_id"])
	require.Equal(t, e.requests, w["topic"])
	require.Equal(t, float64(res[0].Partition), w["partition"])
	require.Equal(t, float64(0), w["offset"])
	require.Equal(t, float64(1), w["attempt"])
	require.Contains(t, w["err"], "model is confused")
	d, ok := w["retry_in"].(string)
	require.True(t, ok, "retry_in renders as text, got %T %v", w["retry_in"], w["retry_in"])
	_, err := time.ParseDuration(d)
	require.NoError(t, err)

	assigned := linesWith(lines, "msg", "partitions assigned")
	require.NotEmpty(t, assigned)
	require.Equal(t, "INFO", assigned[0]["level"])
	require.Equal(t, []any{float64(0), float64(1)}, assigned[0]["partitions"])
	require.Len(t, linesWith(lines, "msg", "shutdown: draining turns in flight"), 1)
	drained := linesWith(lines, "msg", "shutdown: drained; left the group")
	require.Len(t, drained, 1)
	_, err = time.ParseDuration(drained[0]["took"].(string))
	require.NoError(t, err)
	revoked := linesWith(lines, "msg", "partitions revoked")
	require.NotEmpty(t, revoked)
	require.Equal(t, "INFO", revoked[len(revoked)-1]["level"])

	require.NotContains(t, text, secret, "the request's text is never logged")
	require.NotContains(t, text, reply, "the reply's text is never logged")
}

// A record whose key differs from its request's conversation_id is logged as that, not as
// undecodable, and dead-lettered.
func TestKeyMismatchNamedInTheLog(t *testing.T) {
	t.Parallel()
	e := setup(t, 1, 1)
	logs := &logBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	m := e.start(memberOpts{tune: func(cfg *consumer.Config) { cfg.Logger = log }})
	req := request("mine", "hi")
	data, err := req.Encode()
	require.NoError(t, err)
	e.cluster.Produce(t, e.requests, "someone-else", data, nil)
	e.cluster.ReadAll(t, e.dlq, 1, wait)
	m.stop(t)
	lines, text := logs.lines(t)
	mismatch := linesWith(lines, "msg", "record key differs from the request's conversation_id; dead-lettered (G7)")
	require.Len(t, mismatch, 1, text)
	require.Equal(t, "someone-else", mismatch[0]["key"])
	require.Equal(t, "mine", mismatch[0]["conversation_id"])
	require.Empty(t, linesWith(lines, "msg", "undecodable record dead-lettered"))
}
