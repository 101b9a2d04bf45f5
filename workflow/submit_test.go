package workflow

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
)

// The acceptance line: updates sent while runs continue as new (every 10 turns) return their
// results; 100 of them, with update id = request id, run the model once per request id; no
// unfinished-handler warning is logged.
func TestDevServerSubmitAcrossContinueAsNew(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	s.startWorker(nil)
	b := s.bridge(BridgeOptions{Config: Config{MaxTurnsPerRun: 10, IdleTimeout: time.Minute}})
	conv := s.cluster.Unique("submit")

	const callers, each = 10, 10
	var mu sync.Mutex
	results := map[string]turn.Result{}
	var sent []turn.Request
	var wg sync.WaitGroup
	errs := make(chan error, callers*each)
	for c := 0; c < callers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				req := request(conv, 0, fmt.Sprintf("caller %d message %d", c, i))
				mu.Lock()
				sent = append(sent, req)
				mu.Unlock()
				ctx, cancel := context.WithTimeout(context.Background(), wait)
				res, err := b.Submit(ctx, req)
				cancel()
				if err != nil {
					errs <- fmt.Errorf("submit %s: %w", req.ID, err)
					continue
				}
				mu.Lock()
				results[req.ID] = res
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, results, callers*each)
	for id, res := range results {
		require.Equal(t, id, res.RequestID)
		require.Contains(t, res.Text, "answer to")
	}
	calls := map[string]int{}
	for _, id := range s.model.ids() {
		calls[id]++
	}
	require.Len(t, calls, callers*each)
	for id := range results {
		require.Equal(t, 1, calls[id], "the model ran once for %s", id)
	}
	// A run due to continue as new still applies the requests of the updates in flight (at
	// most one per caller) before it does: at least 100 / (10 + callers) runs.
	require.GreaterOrEqual(t, s.runsOf(b.WorkflowID(conv)), 100/(10+callers))
	require.Positive(t, b.resubmits.Load(), "some updates reached a run at its continue-as-new moment")
	require.NotEmpty(t, s.logs.matching("continuing as new"), "the workflows' logs reach the capture")
	require.Empty(t, s.logs.matching("TMPRL1102"), "no update handler left unfinished")
	require.Empty(t, s.logs.matching("still running"))
	requireEveryRequestAnswered(t, s.answered(), sent...)
}

// A request already applied is rejected by the submit validator, before any history is
// written; a new request id with a sequence below the mark is dead-lettered with the reason
// (issue 19: never dropped); a fresh one gets its result.
func TestDevServerSubmitRejectsDuplicate(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	s.startWorker(nil)
	b := s.bridge(BridgeOptions{})
	conv := s.cluster.Unique("dup")
	req := request(conv, 1, "hello")
	_, err := b.Handle(context.Background(), req)
	require.NoError(t, err)
	s.waitApplied(b, conv, 1)

	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	_, err = b.Submit(ctx, req)
	require.ErrorContains(t, err, "already applied")
	stale := request(conv, 1, "stale")
	_, err = b.Submit(ctx, stale)
	require.ErrorContains(t, err, "below the applied mark")
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr)
	require.Equal(t, ErrDeadLettered, appErr.Type())
	next := request(conv, 2, "next")
	res, err := b.Submit(ctx, next)
	require.NoError(t, err)
	require.Equal(t, int64(2), res.Sequence)
	require.Len(t, s.model.ids(), 2)
	requireEveryRequestAnswered(t, s.answered(), req, stale, next)
}

// Reconciliation through the dev server: the ledger (SQLite) says 3 requests were handed off,
// the signal of the second was lost; a sweep re-sends it and the gap closes.
func TestDevServerSweepClosesGap(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	s.startWorker(nil)
	ledger, err := NewSQLLedger(s.db, SQLite, "")
	require.NoError(t, err)
	require.NoError(t, ledger.Migrate(context.Background()))
	b := s.bridge(BridgeOptions{Ledger: ledger})
	conv := s.cluster.Unique("gap")
	r1, r2, r3 := request(conv, 1, "one"), request(conv, 2, "two"), request(conv, 3, "three")
	for _, r := range []turn.Request{r1, r3} {
		_, err = b.Handle(context.Background(), r)
		require.NoError(t, err)
	}
	require.NoError(t, ledger.Record(context.Background(), Envelope{Request: r2})) // handed off, signal lost
	st := s.waitApplied(b, conv, 1)
	require.Equal(t, []int64{3}, st.PendingSequences, "3 is held at the gap")

	rep, err := b.Sweep(context.Background(), 0)
	require.NoError(t, err)
	require.Empty(t, rep.Failed)
	require.Equal(t, 1, rep.Checked)
	require.Equal(t, 2, rep.Resent, "2 and 3 re-sent (3 dropped as pending)")
	st = s.waitApplied(b, conv, 3)
	require.Equal(t, int64(3), st.LastAppliedSequence)
	require.Equal(t, []int64{1, 2, 3}, s.model.sequences())
	requireEveryRequestAnswered(t, s.answered(), r1, r2, r3)

	n, err := b.Reconcile(context.Background(), conv)
	require.NoError(t, err)
	require.Zero(t, n, "caught up: nothing to re-send")
}

// A 1.2 MB answer, over the publisher's Producer.MaxMessageBytes (sarama's 1 MiB), is
// dead-lettered before the session append in Temporal mode too: the activity passes the
// KafkaPublisher's ResultLimit to the Runner, and the conversation goes on without it.
func TestDevServerAnswerTooLargeIsNotAppended(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	s.startWorker(func(o *WorkerOptions) {
		o.Runner = s.runner(turn.ModelFunc(func(ctx context.Context, in turn.Input) (turn.Output, error) {
			if in.Request.Text == "write a novel" {
				return turn.Output{Events: []session.Event{{Text: strings.Repeat("words ", 200_000)}}}, nil
			}
			return s.model.Respond(ctx, in)
		}))
	})
	b := s.bridge(BridgeOptions{})
	conv := s.cluster.Unique("novel")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	novel, next := request(conv, 1, "write a novel"), request(conv, 2, "a haiku then")
	requireSubmitDeadLettered(ctx, t, b, novel, "Producer.MaxMessageBytes")
	_, err := b.Submit(ctx, next)
	require.NoError(t, err)
	sess, err := s.sessions.Get(ctx, session.Key{App: turn.DefaultApp, User: novel.UserID, Conversation: conv}, 100)
	require.NoError(t, err)
	for _, e := range sess.Events {
		require.NotEqual(t, novel.ID, e.RequestID, "the session holds no turn of the refused answer")
	}
	require.Len(t, sess.Events, 2, "the next turn: its message and its answer")
	requireEveryRequestAnswered(t, s.answered(), novel, next)
}

// A request the model always rate-limits (a per-tenant limit) is dead-lettered once its
// activity has been rate limited WorkerOptions.MaxRateLimits times, and its conversation goes
// on: the activity's retries used to be unlimited, which held the conversation forever.
func TestDevServerAlwaysRateLimitedIsDeadLettered(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	s.startWorker(func(o *WorkerOptions) {
		o.MaxRateLimits = 3
		o.Runner = s.runner(turn.ModelFunc(func(ctx context.Context, in turn.Input) (turn.Output, error) {
			if in.Request.Text == "over my tenant's limit" {
				return turn.Output{}, turn.RetryAfter(20*time.Millisecond, errors.New("HTTP 429: tenant limit"))
			}
			return s.model.Respond(ctx, in)
		}))
	})
	b := s.bridge(BridgeOptions{})
	conv := s.cluster.Unique("limited")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	limited, next := request(conv, 1, "over my tenant's limit"), request(conv, 2, "and this one?")
	requireSubmitDeadLettered(ctx, t, b, limited, "rate limited on attempt 3 of the activity (WorkerOptions.MaxRateLimits)", "HTTP 429: tenant limit")
	_, err := b.Submit(ctx, next)
	require.NoError(t, err)
	requireEveryRequestAnswered(t, s.answered(), limited, next)
}

// requireSubmitDeadLettered submits req and requires it dead-lettered with a reason holding
// every one of want.
func requireSubmitDeadLettered(ctx context.Context, t *testing.T, b *Bridge, req turn.Request, want ...string) {
	t.Helper()
	_, err := b.Submit(ctx, req)
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr)
	require.Equal(t, ErrDeadLettered, appErr.Type())
	for _, w := range want {
		require.ErrorContains(t, err, w)
	}
}
