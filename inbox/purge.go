package inbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// PurgeSchedule configures RunPurge.
type PurgeSchedule struct {
	// Horizon is how long done and dead entries are kept after their last update: each run
	// purges what was last updated before now less Horizon. Required (> 0). Keep it longer
	// than the requests topic's retention (retention.ms): a request delivered again after
	// its entry was purged runs again as new (a second turn, a second result).
	Horizon time.Duration
	// Every is the time between two runs; default Horizon/24, at least a minute.
	Every time.Duration
	// Logger gets a line per run that deleted something or failed; default slog.Default().
	Logger *slog.Logger
	// NowFunc returns the current time; default time.Now.
	NowFunc func() time.Time
	// PurgedFunc, when set, is called after each run with what it deleted and its error.
	PurgedFunc func(deleted int64, err error)
}

// RunPurge calls ib.Purge at once and then every s.Every, each time with the cutoff now less
// s.Horizon, until ctx ends; then it returns nil. A failed run is logged and the next one
// tries again: Purge deletes in batches that commit on their own, so a failure loses no work.
// Run one per service (several are harmless: they delete the same entries). Errors: an
// invalid PurgeSchedule, before any run.
func RunPurge(ctx context.Context, ib Inbox, s PurgeSchedule) error {
	switch {
	case ib == nil:
		return errors.New("inbox: RunPurge: nil Inbox")
	case s.Horizon <= 0:
		return fmt.Errorf("inbox: RunPurge: PurgeSchedule.Horizon = %s, want > 0", s.Horizon)
	case s.Every < 0:
		return fmt.Errorf("inbox: RunPurge: PurgeSchedule.Every = %s is negative", s.Every)
	}
	if s.Every == 0 {
		s.Every = max(time.Minute, s.Horizon/24)
	}
	if s.Logger == nil {
		s.Logger = slog.Default()
	}
	if s.NowFunc == nil {
		s.NowFunc = time.Now
	}
	tick := time.NewTicker(s.Every)
	defer tick.Stop()
	for {
		cutoff := s.NowFunc().Add(-s.Horizon)
		n, err := ib.Purge(ctx, cutoff)
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case err != nil:
			s.Logger.Warn("inbox purge failed; trying again at the next run", "cutoff", cutoff, "deleted", n, "err", err)
		case n > 0:
			s.Logger.Info("inbox purged", "cutoff", cutoff, "deleted", n)
		}
		if s.PurgedFunc != nil {
			s.PurgedFunc(n, err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
