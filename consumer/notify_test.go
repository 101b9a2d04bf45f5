package consumer_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turntest"
)

// noticeHandler is a Handler that panics for one conversation and refuses another for good,
// and records the dead-letter notices it takes; its first notice fails, to be retried.
type noticeHandler struct {
	consumer.Handler
	mu      sync.Mutex
	calls   int               // DeadLettered calls, failed ones included
	notices map[string]string // request id -> reason, of the calls that succeeded
	counts  map[string]int    // request id -> successful calls
}

func (h *noticeHandler) Handle(ctx context.Context, req turn.Request) (*turn.Result, error) {
	switch req.ConversationID {
	case "n-panic":
		panic("handler bug")
	case "n-perm":
		return nil, turn.Permanent(errors.New("never served"))
	}
	return h.Handler.Handle(ctx, req)
}

func (h *noticeHandler) DeadLettered(_ context.Context, req turn.Request, reason string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls++
	if h.calls == 1 {
		return errors.New("notice store unavailable")
	}
	h.notices[req.ID] = reason
	h.counts[req.ID]++
	return nil
}

var _ consumer.DeadLetterNotifier = (*noticeHandler)(nil)

// A Handler that implements consumer.DeadLetterNotifier is told once of each decoded request
// the consumer dead-letters (after a failed notice, retried), with the dead letter's reason,
// and never of a record that did not decode (invalid envelope, key mismatch); each dead
// letter is published once.
func TestDeadLetterNotifierOncePerDecodedDeadLetter(t *testing.T) {
	t.Parallel()
	e := setup(t, 1, 1)
	h := &noticeHandler{notices: map[string]string{}, counts: map[string]int{}}
	e.start(memberOpts{
		wrap: func(inner consumer.Handler) consumer.Handler { h.Handler = inner; return h },
		tune: func(cfg *consumer.Config) {
			cfg.RetryBackoff, cfg.MaxRetryBackoff = 5*time.Millisecond, 20*time.Millisecond
		},
	})
	panicking, refused, ok := request("n-panic", "boom"), request("n-perm", "no"), request("n-ok", "hi")
	mismatch := request("n-other", "wrong key")
	data, err := mismatch.Encode()
	require.NoError(t, err)
	e.produce(panicking, refused)
	e.cluster.Produce(t, e.requests, "n-bad", []byte("not a request"), nil)
	e.cluster.Produce(t, e.requests, "n-mismatch", data, nil)
	e.produce(ok)

	results := e.resultsByID(1)
	require.Len(t, results[ok.ID], 1)
	dls := e.cluster.ReadAll(t, e.dlq, 4, wait)
	require.Len(t, dls, 4, "one dead letter per refused record")
	reasons := map[string]string{}
	for _, dl := range dls {
		hm := turntest.HeaderMap(dl)
		if id := hm[consumer.HeaderRequestID]; id != "" {
			reasons[id] = hm[consumer.HeaderReason]
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	require.Equal(t, map[string]int{panicking.ID: 1, refused.ID: 1}, h.counts,
		"one notice per dead letter of a decoded request, none for the undecodable records")
	require.Equal(t, 3, h.calls, "the failed notice was retried")
	require.Equal(t, reasons[panicking.ID], h.notices[panicking.ID])
	require.Equal(t, reasons[refused.ID], h.notices[refused.ID])
	require.Contains(t, h.notices[panicking.ID], "handler bug")
	require.NotContains(t, h.notices, mismatch.ID, "a key mismatch is not a decoded request")
}
