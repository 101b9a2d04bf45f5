package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/turn"
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
