package sqlsession

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/turnstile-go/turnstile/session"
)

var _ session.UserLister = (*Store)(nil)

// UserSessions implements session.UserLister: List of the user's sessions (the index on
// (app, user_id) of schema version 2), keys only.
func (s *Store) UserSessions(ctx context.Context, app, user string) ([]session.Key, error) {
	if app == "" || user == "" {
		return nil, fmt.Errorf("%w: UserSessions needs an app and a user", session.ErrInvalid)
	}
	found, err := s.List(ctx, ListFilter{App: app, User: user})
	if err != nil {
		return nil, err
	}
	keys := make([]session.Key, 0, len(found))
	for _, x := range found {
		keys = append(keys, x.Key)
	}
	slices.SortFunc(keys, func(a, b session.Key) int { return strings.Compare(a.Conversation, b.Conversation) })
	return keys, nil
}
