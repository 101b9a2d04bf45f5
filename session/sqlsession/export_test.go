package sqlsession

import (
	"context"

	"github.com/turnstile-go/turnstile/internal/sqldialect"
)

// SetAppendHook installs f to run inside Append's transaction: at stage "bumped" after the
// version bump, at "inserted" before the commit.
func SetAppendHook(s *Store, f func(ctx context.Context, stage string, tx sqldialect.Querier)) {
	s.appendHook = f
}

// CachedEvents returns how many events Gets of s took from its cache rather than the
// database.
func CachedEvents(s *Store) int64 { return s.cache.served.Load() }
