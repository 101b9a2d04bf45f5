package consumer

import "sync/atomic"

// Stats counts what a Consumer did since it started. Read it with Consumer.Stats.
type Stats struct {
	// Records is the number of records brought to a durable outcome and marked for commit.
	Records int64
	// Turns is the number of Handler calls that succeeded, replays from the inbox included.
	Turns int64
	// Results is the number of result records published; Replayed of them came from the inbox.
	Results, Replayed int64
	// DeadLetters is the number of records published to the dead-letter topic.
	DeadLetters int64
	// Retries counts failed attempts that were retried; RateLimited counts RetryAfter answers.
	Retries, RateLimited int64
	// Abandoned counts turns cancelled by a revoke or shutdown; LateDropped counts outcomes
	// that arrived after their partition was released and were neither published nor committed.
	Abandoned, LateDropped int64
	// Pauses counts the rate-limit pauses of all partitions (PauseAll); Claims counts the
	// partitions this member was assigned, over all rebalances, and Released those it has
	// given back (revoked, or at shutdown), each after its final commit.
	Pauses, Claims, Released int64
	// Commits counts the commits of marked offsets this member made (every CommitInterval, on
	// revoke and on shutdown), counted when sarama's Commit returned; a commit with nothing
	// new to commit sends no request but counts.
	Commits int64
	// Alone counts the turns run with no other turn of the member in flight, because their
	// request's last attempt ended with its member while others ran (turn.ErrRunAlone).
	Alone int64
	// Batches counts the BatchHandler calls that took their records, and Batched the records
	// they handed off (each counted in Turns too).
	Batches, Batched int64
	// Skipped counts records that could be neither served nor dead-lettered, even without
	// their value; each was logged at error level with its location. It should stay 0.
	Skipped int64
	// PeakBuffered is the most records one partition's window has held (G6): records received
	// whose offset is not yet committable (queued, running, publishing, or done above one that
	// is not). See Config.MaxBuffered for its bound.
	PeakBuffered int64
}

// Add returns the sum of s and o, field by field (PeakBuffered: the larger), for a process
// that runs several Consumers and reports them as one.
func (s Stats) Add(o Stats) Stats {
	return Stats{
		Records: s.Records + o.Records, Turns: s.Turns + o.Turns, Results: s.Results + o.Results,
		Replayed: s.Replayed + o.Replayed, DeadLetters: s.DeadLetters + o.DeadLetters,
		Retries: s.Retries + o.Retries, RateLimited: s.RateLimited + o.RateLimited,
		Abandoned: s.Abandoned + o.Abandoned, LateDropped: s.LateDropped + o.LateDropped,
		Pauses: s.Pauses + o.Pauses, Claims: s.Claims + o.Claims, Released: s.Released + o.Released,
		Commits: s.Commits + o.Commits, Skipped: s.Skipped + o.Skipped, Alone: s.Alone + o.Alone,
		Batches: s.Batches + o.Batches, Batched: s.Batched + o.Batched,
		PeakBuffered: max(s.PeakBuffered, o.PeakBuffered),
	}
}

type counters struct {
	records, turns, results, replayed, deadLetters, retries, rateLimited, abandoned, lateDropped,
	pauses, claims, released, commits, skipped, alone, batches, batched, peakBuffered atomic.Int64
}

// peak raises peakBuffered to n if n is higher.
func (s *counters) peak(n int64) {
	for {
		old := s.peakBuffered.Load()
		if n <= old || s.peakBuffered.CompareAndSwap(old, n) {
			return
		}
	}
}

// Stats returns the consumer's counters; safe to call at any time, from any goroutine.
func (c *Consumer) Stats() Stats {
	s := &c.stats
	return Stats{
		Records: s.records.Load(), Turns: s.turns.Load(), Results: s.results.Load(), Replayed: s.replayed.Load(),
		DeadLetters: s.deadLetters.Load(), Retries: s.retries.Load(), RateLimited: s.rateLimited.Load(),
		Abandoned: s.abandoned.Load(), LateDropped: s.lateDropped.Load(),
		Pauses: s.pauses.Load(), Claims: s.claims.Load(), Released: s.released.Load(),
		Commits: s.commits.Load(), Skipped: s.skipped.Load(), Alone: s.alone.Load(),
		Batches: s.batches.Load(), Batched: s.batched.Load(),
		PeakBuffered: s.peakBuffered.Load(),
	}
}
