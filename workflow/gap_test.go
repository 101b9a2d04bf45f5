package workflow

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turntest"
)

// panicOnSequence is the bridge with a Handle that panics for one sequence of one
// conversation, as a decorator with a bug for some input would; DeadLettered is the bridge's.
type panicOnSequence struct {
	*Bridge
	conv string
	seq  int64
}

func (h panicOnSequence) Handle(ctx context.Context, req turn.Request) (*turn.Result, error) {
	if req.ConversationID == h.conv && req.Sequence == h.seq {
		panic(fmt.Sprintf("decorator bug for sequence %d", req.Sequence))
	}
	return h.Bridge.Handle(ctx, req)
}

var _ consumer.DeadLetterNotifier = panicOnSequence{}

// A sequenced request that the consumer dead-letters itself, before any hand-off (its Handler
// call panicked Config.MaxAttempts times), is passed over by its workflow: sequences 1 and 3
// are served, 2 has the consumer's dead letter and no second one, and nothing stays pending
// (G5, G2).
func TestDevServerConsumerDeadLetterDoesNotHoldTheSequence(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	s.startWorker(nil)
	b := s.bridge(BridgeOptions{Ledger: &MemoryLedger{}})
	conv := s.cluster.Unique("conv")
	s.startMember(panicOnSequence{Bridge: b, conv: conv, seq: 2}, nil)

	reqs := []turn.Request{request(conv, 1, "one"), request(conv, 2, "two"), request(conv, 3, "three")}
	for _, r := range reqs {
		s.produce(r, nil)
	}
	results := s.cluster.ReadAll(t, s.results, 2, wait)
	require.Len(t, results, 2)
	s.committedAll(1)
	st := s.waitApplied(b, conv, 3)
	require.Equal(t, int64(3), st.LastAppliedSequence)
	require.Zero(t, st.Pending)
	require.Equal(t, []int64{1, 3}, s.model.sequences(), "sequence 2 never ran")

	dls := s.cluster.ReadAll(t, s.dlq, 1, wait)
	require.Len(t, dls, 1)
	h := turntest.HeaderMap(dls[0])
	require.Equal(t, reqs[1].ID, h[consumer.HeaderRequestID])
	require.Contains(t, h[consumer.HeaderReason], "decorator bug for sequence 2")
	require.Equal(t, int64(1), s.cluster.RecordCount(t, s.dlq), "the workflow published no second dead letter")
	requireEveryRequestAnswered(t, s.answered(), reqs...)
}

// deadLetteredBatch is the batch Bridge.DeadLettered signals for req.
func deadLetteredBatch(req turn.Request, reason string) Batch {
	req.Text = ""
	return Batch{Envelopes: []Envelope{{Request: req, Source: req.Source, DeadLettered: reason}}}
}

// The workflow passes over a request marked Envelope.DeadLettered when its sequence comes up,
// with no activity and no dead letter of its own, and the same request pending from an
// earlier hand-off is marked too, so it never runs.
func TestConsumerDeadLetteredPassedOver(t *testing.T) {
	t.Parallel()
	t.Run("gap", func(t *testing.T) {
		t.Parallel()
		u := newUnit(t)
		const conv = "c-dl-gap"
		r1, r2, r3 := request(conv, 1, "one"), request(conv, 2, "two"), request(conv, 3, "three")
		st := runConversation(t, u, conv, batchOf(r1, r3), deadLetteredBatch(r2, "the consumer gave up"))
		require.Equal(t, []int64{1, 3}, u.model.sequences())
		require.Equal(t, []string{r1.ID, r3.ID}, u.publisher.resultIDs())
		_, published := u.publisher.deadLetterOf(r2.ID)
		require.False(t, published, "the consumer published the dead letter, not the workflow")
		require.Equal(t, int64(3), st.LastAppliedSequence)
		require.Equal(t, int64(3), st.Applied)
		require.Zero(t, st.Pending)
	})
	t.Run("pending", func(t *testing.T) {
		t.Parallel()
		u := newUnit(t)
		const conv = "c-dl-pending"
		r1, r2 := request(conv, 1, "one"), request(conv, 2, "two")
		st := runConversation(t, u, conv, batchOf(r2), deadLetteredBatch(r2, "the consumer gave up"), batchOf(r1))
		require.Equal(t, []int64{1}, u.model.sequences(), "the pending hand-off of 2 never ran")
		require.Equal(t, []string{r1.ID}, u.publisher.resultIDs())
		require.Equal(t, int64(2), st.LastAppliedSequence)
		require.Zero(t, st.Pending)
	})
}
