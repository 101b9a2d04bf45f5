package workflow

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/turn"
)

// The bridge copes with the server's limit of signals per run: with no worker to continue the
// run as new, a hand-off past the limit is turn.Unavailable (retried, no attempt spent, never
// dead-lettered); once a worker runs, the workflow continues as new (MaxSignalsPerRun) and the
// same hand-off succeeds; every request is applied once, in order.
func TestDevServerSignalLimit(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	b := s.bridge(BridgeOptions{Config: Config{MaxSignalsPerRun: serverSignalLimit / 2}})
	conv := s.cluster.Unique("limit")
	ctx := context.Background()
	var refused turn.Request
	var sent []turn.Request
	for seq := int64(1); ; seq++ {
		req := request(conv, seq, fmt.Sprintf("m%d", seq))
		sent = append(sent, req)
		_, err := b.Handle(ctx, req)
		if err != nil {
			require.Equal(t, turn.KindUnavailable, turn.Classify(err), "%v", err)
			t.Logf("refused after %d signals: %v", seq-1, err)
			refused = req
			break
		}
		require.Less(t, seq, int64(2*serverSignalLimit), "the server never refused a signal")
	}
	s.startWorker(nil)
	require.Eventually(t, func() bool {
		_, err := b.Handle(ctx, refused)
		return err == nil
	}, wait, 50*time.Millisecond, "the hand-off goes through once the run continued as new")
	st := s.waitApplied(b, conv, refused.Sequence)
	require.Equal(t, refused.Sequence, st.LastAppliedSequence)
	seqs := s.model.sequences()
	require.Len(t, seqs, int(refused.Sequence))
	for i, seq := range seqs {
		require.Equal(t, int64(i+1), seq)
	}
	requireEveryRequestAnswered(t, s.answered(), sent...)
}
