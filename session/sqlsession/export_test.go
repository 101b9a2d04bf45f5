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
