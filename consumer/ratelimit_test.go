package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turntest"
)

// rateLimiter answers RetryAfter for a while from its first call, recording when each
// partition called and when it was told to wait.
type rateLimiter struct {
	mu     sync.Mutex
	until  time.Time
	window time.Duration
	delay  time.Duration
	calls  map[int32][]call
}

type call struct {
	start, end time.Time
	limited    bool
}

func (rl *rateLimiter) model(ctx context.Context, in turn.Input) (turn.Output, error) {
	start := time.Now()
	rl.mu.Lock()
	if rl.until.IsZero() {
		rl.until = start.Add(rl.window)
	}
	limited := start.Before(rl.until)
	rl.mu.Unlock()
	out, err := echo(in)
	if limited {
		out, err = turn.Output{}, turn.RetryAfter(rl.delay, errors.New("HTTP 429 Too Many Requests"))
	}
	rl.mu.Lock()
	p := in.Request.Source.Partition
	rl.calls[p] = append(rl.calls[p], call{start: start, end: time.Now(), limited: limited})
	rl.mu.Unlock()
	return out, err
}

func TestRateLimitPausesPartitions(t *testing.T) {
	t.Parallel()
	e := setup(t, 3, 3)
	rl := &rateLimiter{window: 2 * time.Second, delay: 400 * time.Millisecond, calls: map[int32][]call{}}
	sent := produceConversations(e, 12, 3) // before the member starts: many turns meet the 429
	m := e.start(memberOpts{model: rl.model})

	results := e.resultsByID(36)
	require.Len(t, results, 36, "every request completes after the pause")
	e.checkHistories(sent)
	st := m.c.Stats()
	require.Zero(t, st.DeadLetters)
	require.Zero(t, st.Retries, "a rate limit spends no attempt")
	require.Positive(t, st.RateLimited)
	require.Positive(t, st.Pauses, "all partitions were paused (PauseAll)")
	require.EqualValues(t, 3, st.Claims, "the member stayed in the group: no partition moved")
	for conv := range sent {
		for _, r := range sent[conv] {
			entry, err := e.inbox.Get(context.Background(), turn.InboxKey(turn.DefaultApp, r))
			require.NoError(t, err)
			require.Equal(t, 1, entry.Attempts, "request %s", r.ID)
		}
	}

	// While rate limited, the member does not hammer the model: each pause ends with one
	// probe, and a probe that is rate limited starts the next pause. Calls that start well
	// into the first pause (the member paused at once; half a second is slack for a loaded
	// machine, not a measure of speed) are probes: at most one per pause after the first.
	rl.mu.Lock()
	defer rl.mu.Unlock()
	var first time.Time
	for _, calls := range rl.calls {
		for _, c := range calls {
			if c.limited && (first.IsZero() || c.end.Before(first)) {
				first = c.end
			}
		}
	}
	require.False(t, first.IsZero(), "the model answered 429")
	probes := 0
	for _, calls := range rl.calls {
		for _, c := range calls {
			if c.limited && c.start.After(first.Add(500*time.Millisecond)) {
				probes++
			}
		}
	}
	require.LessOrEqual(t, int64(probes), st.Pauses-1, "rate-limited probes after the first pause")
}

// A rate limit seen on one partition pauses the member's other partitions too (PauseAll and a
// shared wait), not just the lane that saw it: records that reach the other partitions during
// the pause wait for its end.
func TestRateLimitQuietsOtherPartitions(t *testing.T) {
	t.Parallel()
	const delay = time.Second
	e := setup(t, 3, 3)
	var (
		mu      sync.Mutex
		limited time.Time                // when the one 429 was answered
		starts  = map[string]time.Time{} // request id -> model call start
	)
	first := make(chan struct{})
	m := e.start(memberOpts{model: func(_ context.Context, in turn.Input) (turn.Output, error) {
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		if _, seen := starts[in.Request.ID]; !seen {
			starts[in.Request.ID] = now
		}
		if limited.IsZero() {
			limited = time.Now()
			close(first)
			return turn.Output{}, turn.RetryAfter(delay, errors.New("HTTP 429"))
		}
		return echo(in)
	}})
	opener := request("rl-0", "the first call is rate limited")
	data, err := opener.Encode()
	require.NoError(t, err)
	e.cluster.ProduceTo(t, e.requests, 0, opener.ConversationID, data, nil)
	recv(t, first, "the first model call")
	// The pause starts when the consumer sees the 429, a moment after the model returned it:
	// produce the other partitions' work only then, or a record fetched in that moment
	// rightly runs before the pause.
	require.Eventually(t, func() bool { return m.c.Stats().Pauses >= 1 }, 10*time.Second, time.Millisecond)
	var others []turn.Request
	for p := int32(1); p < 3; p++ { // work for the partitions that saw no 429
		r := request(fmt.Sprintf("rl-%d", p), "arrives during the pause")
		data, err := r.Encode()
		require.NoError(t, err)
		e.cluster.ProduceTo(t, e.requests, p, r.ConversationID, data, nil)
		others = append(others, r)
	}
	results := e.resultsByID(3)
	require.Len(t, results, 3)
	mu.Lock()
	defer mu.Unlock()
	for _, r := range others {
		require.GreaterOrEqual(t, starts[r.ID].Sub(limited), delay,
			"partition of %s called the model %v after the 429, inside the %v pause", r.ConversationID, starts[r.ID].Sub(limited), delay)
	}
	require.EqualValues(t, 1, m.c.Stats().Pauses)
}

// Issue 19: a request that the model always answers with a rate limit while every other
// request passes (a per-tenant limit at an LLM gateway) was the probe after every pause: the
// pauses grew and the member served almost nothing else until the request was dead-lettered.
// Now, after the first pause, another request probes; the limited request, refused while
// others pass, backs off alone and is dead-lettered after MaxRateLimits, and every other
// request gets its result first.
func TestRateLimitOfOneRequestLetsOthersFlow(t *testing.T) {
	t.Parallel()
	const partitions, others, limit = 12, 150, 5
	e := setup(t, partitions, partitions)
	refused := request("rl-tenant", "always refused by the tenant's limit")
	var (
		done atomic.Int64 // other requests whose turn succeeded
		mu   sync.Mutex
		seen []int64 // done, at each model call of the refused request
	)
	m := e.start(memberOpts{
		model: func(_ context.Context, in turn.Input) (turn.Output, error) {
			if in.Request.ID == refused.ID {
				mu.Lock()
				seen = append(seen, done.Load())
				mu.Unlock()
				return turn.Output{}, turn.RetryAfter(3*time.Second, errors.New("HTTP 429 Too Many Requests: tenant limit"))
			}
			time.Sleep(5 * time.Millisecond)
			return echo(in)
		},
		wrap: func(h consumer.Handler) consumer.Handler {
			return consumer.HandlerFunc(func(ctx context.Context, req turn.Request) (*turn.Result, error) {
				res, err := h.Handle(ctx, req)
				if err == nil && req.ID != refused.ID {
					done.Add(1)
				}
				return res, err
			})
		},
		// MaxPause bounds the old code's pauses, so that it fails in seconds, not minutes. At 3 s,
		// the refused request's five calls span at least 12 s (its own backoff honors the
		// model's 3 s), which the 150 others need a small part of even on a loaded machine.
		tune: func(cfg *consumer.Config) { cfg.MaxRateLimits, cfg.MaxPause = limit, 3*time.Second },
	})
	produceTo := func(p int32, r turn.Request) {
		data, err := r.Encode()
		require.NoError(t, err)
		e.cluster.ProduceTo(t, e.requests, p, r.ConversationID, data, nil)
	}
	produceTo(0, refused) // first: it meets its limit while the others start
	first := int32(0)
	if e.ordering == consumer.OrderByPartition { // its partition's records wait behind it by design
		first = 1
	}
	for i := range others {
		produceTo(first+int32(i)%(partitions-first), request(fmt.Sprintf("rl-other-%d", i), "hello"))
	}

	dead := e.cluster.ReadAll(t, e.dlq, 1, wait)
	require.Len(t, dead, 1)
	mu.Lock()
	require.Len(t, seen, limit, "the refused request's model calls")
	require.EqualValues(t, others, seen[limit-1], "every other request was served before the refused one's last call")
	mu.Unlock()
	h := turntest.HeaderMap(dead[0])
	require.Equal(t, refused.ID, h[consumer.HeaderRequestID])
	require.Contains(t, h[consumer.HeaderReason], fmt.Sprintf("rate limited %d times", limit))
	require.Contains(t, h[consumer.HeaderReason], "rate limited alone")
	require.Equal(t, turn.KindRateLimited.String(), h[consumer.HeaderKind])
	require.Contains(t, h[consumer.HeaderReason], "HTTP 429")
	results := e.distinctResults(others)
	require.Len(t, results, others)
	require.NotContains(t, results, refused.ID)
	st := m.c.Stats()
	require.EqualValues(t, 1, st.DeadLetters)
	require.Zero(t, st.Retries, "a rate limit spends no attempt")
}

// A rate limit that every request meets (the provider's, for a while) still pauses every
// partition, spends no attempt and, as long as other requests are limited alongside, counts
// against no request's MaxRateLimits: the probes after the pauses are requests other than the
// last one limited, so none is dead-lettered even with MaxRateLimits 2.
func TestRateLimitOfEveryRequestPausesEveryPartition(t *testing.T) {
	t.Parallel()
	const partitions = 12
	e := setup(t, partitions, partitions)
	rl := &rateLimiter{window: 3500 * time.Millisecond, delay: 300 * time.Millisecond, calls: map[int32][]call{}}
	sent := produceConversations(e, 36, 1) // a backlog: every turn of the first wave meets the limit
	m := e.start(memberOpts{model: rl.model, tune: func(cfg *consumer.Config) { cfg.MaxRateLimits = 2 }})
	eventually(t, func() bool {
		h := m.c.Health()
		return h.PauseReason == consumer.PauseReasonRateLimit && len(h.Paused) == partitions
	}, "every partition paused for the rate limit")
	eventually(t, func() bool { st := m.c.Stats(); return st.Turns+st.DeadLetters >= 36 })
	st := m.c.Stats()
	require.Zero(t, st.DeadLetters, "no request is dead-lettered for the provider's limit")
	require.Zero(t, st.Retries, "a rate limit spends no attempt")
	require.GreaterOrEqual(t, st.Pauses, int64(2), "the limit outlasted the first pause: probes were limited too")
	results := e.resultsByID(36)
	require.Len(t, results, 36)
	for id, msgs := range results {
		require.Equal(t, "1", turntest.HeaderMap(msgs[0])[consumer.HeaderAttempt], "request %s", id)
	}
	for conv := range sent {
		for _, r := range sent[conv] {
			entry, err := e.inbox.Get(context.Background(), turn.InboxKey(turn.DefaultApp, r))
			require.NoError(t, err)
			require.Equal(t, 1, entry.Attempts, "request %s", r.ID)
		}
	}
	e.checkHistories(sent)
}
