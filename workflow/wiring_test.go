package workflow

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	tworker "go.temporal.io/sdk/worker"

	"github.com/turnstile-go/turnstile/turn"
)

// The acceptance line: a worker's Stop waits for the turn in flight (NewWorker sets
// WorkerStopTimeout to StopTimeout): when Stop returns, the model's call has finished and its
// result is published; the next worker does not run it again.
func TestDevServerWorkerStopDrains(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	model := &recordingModel{delay: 2 * time.Second}
	started := make(chan struct{}, 1)
	runner := s.runner(turn.ModelFunc(func(ctx context.Context, in turn.Input) (turn.Output, error) {
		select {
		case started <- struct{}{}:
		default:
		}
		return model.Respond(ctx, in)
	}))
	pub, err := NewKafkaPublisher(s.cluster.Brokers(), s.cluster.Config(), s.results, s.dlq)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	w, err := NewWorker(s.client, s.taskQueue, tworker.Options{}, WorkerOptions{Runner: runner, Publisher: pub, States: s.states, Logger: slog.New(s.logs)})
	require.NoError(t, err)
	require.NoError(t, w.Start())
	b := s.bridge(BridgeOptions{})
	conv := s.cluster.Unique("drain")
	req := request(conv, 1, "finish me")
	_, err = b.Handle(context.Background(), req)
	require.NoError(t, err)
	select {
	case <-started:
	case <-time.After(wait):
		t.Fatal("the turn never started")
	}
	w.Stop() // as on SIGTERM (worker.InterruptCh)
	require.Equal(t, []string{req.ID}, model.ids(), "the turn in flight finished before Stop returned")
	s.model = model
	s.startWorker(nil)
	s.waitApplied(b, conv, 1)
	require.Len(t, model.ids(), 1, "and was not redone")
	requireEveryRequestAnswered(t, s.answered(), req)

	_, err = NewWorker(nil, "q", tworker.Options{}, WorkerOptions{})
	require.ErrorContains(t, err, "nil client")
	_, err = NewWorker(s.client, "q", tworker.Options{}, WorkerOptions{})
	require.ErrorContains(t, err, "Runner")
	require.Equal(t, 40*time.Second, StopTimeout(&turn.Runner{TurnTimeout: 10 * time.Second}))
}

// The acceptance line: an attempt that fails and is retried is one WARN line of turnstile's;
// the SDK's "Activity error." is not logged at ERROR beside it (the attempt's error is in the
// benign category).
func TestDevServerRetriedAttemptLogsOnce(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	var failed atomic.Bool
	s.model.errFunc = func(turn.Input) error {
		if failed.CompareAndSwap(false, true) {
			return errors.New("model hiccup")
		}
		return nil
	}
	s.startWorker(nil)
	b := s.bridge(BridgeOptions{})
	conv := s.cluster.Unique("hiccup")
	req := request(conv, 1, "try twice")
	_, err := b.Handle(context.Background(), req)
	require.NoError(t, err)
	s.waitApplied(b, conv, 1)
	require.Len(t, s.logs.matching("WARN turn attempt failed; the activity retries"), 1)
	var errorLines []string
	for _, m := range s.logs.matching("Activity error.") {
		if strings.HasPrefix(m, "ERROR") {
			errorLines = append(errorLines, m)
		}
	}
	require.Empty(t, errorLines, "the SDK does not log the retried attempt at ERROR")
	require.NotEmpty(t, s.logs.matching("DEBUG Activity error."), "it logs it at DEBUG")
}
