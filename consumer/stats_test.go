package consumer_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/consumer"
)

func TestStatsAdd(t *testing.T) {
	t.Parallel()
	a := consumer.Stats{Records: 1, Turns: 2, Results: 3, Replayed: 4, DeadLetters: 5, Retries: 6, RateLimited: 7,
		Abandoned: 8, LateDropped: 9, Pauses: 10, Claims: 11, Skipped: 12, PeakBuffered: 13, Released: 14, Commits: 15}
	b := consumer.Stats{Records: 10, Turns: 20, Results: 30, Replayed: 40, DeadLetters: 50, Retries: 60, RateLimited: 70,
		Abandoned: 80, LateDropped: 90, Pauses: 100, Claims: 110, Skipped: 120, PeakBuffered: 5, Released: 140, Commits: 150}
	require.Equal(t, consumer.Stats{Records: 11, Turns: 22, Results: 33, Replayed: 44, DeadLetters: 55, Retries: 66,
		RateLimited: 77, Abandoned: 88, LateDropped: 99, Pauses: 110, Claims: 121, Skipped: 132, PeakBuffered: 13,
		Released: 154, Commits: 165}, a.Add(b))
}
