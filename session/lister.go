package session

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// UserLister is a Store that lists one user's sessions: those Retention.DeleteUser would
// delete. A data-deletion request needs them for what other stores keep by conversation:
// turn.Retention.DeleteUser erases the user's inbox entries (results, journals, outbox
// intents) of these conversations before it deletes the sessions. MemoryStore and
// session/sqlsession's Store implement it; session/sessiontest checks it on every Store that
// does.
type UserLister interface {
	Store
	// UserSessions returns the keys of every session of user in app, sorted by conversation;
	// none is an empty slice and no error. Errors: ErrInvalid (an empty app or user).
	UserSessions(ctx context.Context, app, user string) ([]Key, error)
}

var _ UserLister = (*MemoryStore)(nil)

// UserSessions implements UserLister, one shard at a time.
func (s *MemoryStore) UserSessions(ctx context.Context, app, user string) ([]Key, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if app == "" || user == "" {
		return nil, fmt.Errorf("%w: UserSessions needs an app and a user", ErrInvalid)
	}
	keys := []Key{}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, m := range sh.sessions {
			if k.app == app && m.user == user {
				keys = append(keys, Key{App: app, User: user, Conversation: k.conv})
			}
		}
		sh.mu.Unlock()
	}
	slices.SortFunc(keys, func(a, b Key) int { return strings.Compare(a.Conversation, b.Conversation) })
	return keys, nil
}
