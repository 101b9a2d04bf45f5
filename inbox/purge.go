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
	if ib == nil {
		return errors.New("inbox: RunPurge: nil Inbox")
	}
	return RunPurgeFunc(ctx, "inbox", ib.Purge, s)
}

// RunPurgeFunc is RunPurge's schedule for any store that deletes by age: it calls purge at
// once and then every s.Every with the cutoff now less s.Horizon, until ctx ends (then it
// returns nil), and logs each run that deleted something or failed under name ("inbox",
// "ledger"). purge returns how many rows it deleted, also when it fails part way. Package
// workflow's RunLedgerPurge schedules the Temporal mode's hand-off ledger with it. Errors: a
// nil purge or an invalid PurgeSchedule, before any run.
func RunPurgeFunc(ctx context.Context, name string, purge func(ctx context.Context, before time.Time) (int64, error), s PurgeSchedule) error {
	switch {
	case purge == nil:
		return fmt.Errorf("inbox: RunPurgeFunc(%q): nil purge func", name)
	case s.Horizon <= 0:
		return fmt.Errorf("%s: RunPurge: PurgeSchedule.Horizon = %s, want > 0", name, s.Horizon)
	case s.Every < 0:
		return fmt.Errorf("%s: RunPurge: PurgeSchedule.Every = %s is negative", name, s.Every)
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
		n, err := purge(ctx, cutoff)
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case err != nil:
			s.Logger.Warn(name+" purge failed; trying again at the next run", "cutoff", cutoff, "deleted", n, "err", err)
		case n > 0:
			s.Logger.Info(name+" purged", "cutoff", cutoff, "deleted", n)
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
