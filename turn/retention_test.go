package turn_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/attachment"
	"github.com/turnstile-go/turnstile/attachment/sqlattachment"
	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
	"github.com/turnstile-go/turnstile/internal/sqltest"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/session/sqlsession"
	"github.com/turnstile-go/turnstile/turn"
)

// retentionStores are the stores a Retention runs on: each with the optional interfaces its
// DeleteUser needs.
type retentionStores struct {
	sessions interface {
		session.Retention
		session.UserLister
	}
	inbox interface {
		inbox.Eraser
		inbox.Outbox
	}
	attachments attachment.Retention
}

// retentionKinds are the stores the retention tests run on: memory, SQLite in a file, and
// PostgreSQL (skipped with the reason when unreachable, failing under CI=true).
var retentionKinds = []struct {
	name string
	open func(t *testing.T) retentionStores
}{
	{"memory", func(*testing.T) retentionStores {
		return retentionStores{session.NewMemoryStore(), inbox.NewMemoryInbox(), attachment.NewMemoryStore()}
	}},
	{"sqlite", func(t *testing.T) retentionStores { return sqlRetentionStores(t, sqltest.SQLiteFileDB) }},
	{"postgres", func(t *testing.T) retentionStores { return sqlRetentionStores(t, sqltest.PostgresDB) }},
}

// eachRetentionKind runs fn in a parallel subtest per kind of stores, on a world of its own.
func eachRetentionKind(t *testing.T, fn func(t *testing.T, w *retentionWorld)) {
	t.Helper()
	for _, kind := range retentionKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			fn(t, newRetentionWorld(t, kind.open(t)))
		})
	}
}

// sqlRetentionStores returns the SQL stores on one database, with tables of the test's own.
func sqlRetentionStores(t *testing.T, kind sqltest.DB) retentionStores {
	t.Helper()
	db := kind.Open(t)
	dialect, prefix := sqlsession.SQLite, ""
	if kind.Postgres {
		dialect, prefix = sqlsession.PostgreSQL, sqltest.Prefix(t, db, true)
	}
	ctx := context.Background()
	sessions, err := sqlsession.New(db, dialect, sqlsession.Options{TablePrefix: prefix})
	require.NoError(t, err)
	require.NoError(t, sessions.Migrate(ctx))
	ib, err := sqlinbox.New(db, dialect, sqlinbox.Options{TablePrefix: prefix})
	require.NoError(t, err)
	require.NoError(t, ib.Migrate(ctx))
	files, err := sqlattachment.New(db, dialect, sqlattachment.Options{TablePrefix: prefix})
	require.NoError(t, err)
	require.NoError(t, files.Migrate(ctx))
	return retentionStores{sessions, ib, files}
}

// retentionModel answers every turn after a journaled step and a deferred tool call (an
// outbox intent once the turn commits); a request whose text starts with "poison" fails
// permanently (a dead inbox entry).
var retentionModel = turn.ModelFunc(func(ctx context.Context, in turn.Input) (turn.Output, error) {
	if strings.HasPrefix(in.Request.Text, "poison") {
		return turn.Output{}, turn.Permanent(errors.New("poison"))
	}
	if _, err := in.Step(ctx, "model", func(context.Context, string) ([]byte, error) { return []byte(`"reply"`), nil }); err != nil {
		return turn.Output{}, err
	}
	j := in.Journal()
	if _, err := j.Defer(ctx, j.Next("tool:notify"), "notify", map[string]string{"user": in.Request.UserID}); err != nil {
		return turn.Output{}, err
	}
	return turn.Output{Events: []session.Event{{Text: "answer to " + in.Request.Text}}}, nil
})

// retentionWorld is what the retention tests store: in app, user u1 has conversations c1
// (two turns) and c2 (one turn and a dead request), user u2 has c3 (one turn); in app2, u3
// has a conversation also named c1 (one turn). Each user has one attachment. Every turn
// journaled a step and deferred one intent.
type retentionWorld struct {
	stores     retentionStores
	app, app2  string
	c1, c2, c3 string
	u1, u2, u3 string
	runner     *turn.Runner // app's
	runner2    *turn.Runner // app2's
	u1Requests []turn.Request
	others     []turn.Request // u2's and u3's
	dead       turn.Request
}

func newRetentionWorld(t *testing.T, stores retentionStores) *retentionWorld {
	t.Helper()
	id := sqltest.ID(t)[:8]
	w := &retentionWorld{stores: stores, app: "app-" + id, app2: "app2-" + id,
		c1: "c1-" + id, c2: "c2-" + id, c3: "c3-" + id, u1: "u1-" + id, u2: "u2-" + id, u3: "u3-" + id}
	newRunner := func(app string) *turn.Runner {
		return &turn.Runner{App: app, Model: retentionModel, Sessions: stores.sessions, Inbox: stores.inbox,
			Attachments: stores.attachments, TurnTimeout: 30 * time.Second}
	}
	w.runner, w.runner2 = newRunner(w.app), newRunner(w.app2)
	ctx := context.Background()
	run := func(r *turn.Runner, conv, user, text string) turn.Request {
		req := newRequest(conv, user, text)
		_, err := r.Run(ctx, req)
		if strings.HasPrefix(text, "poison") {
			require.Error(t, err)
		} else {
			require.NoError(t, err)
		}
		return req
	}
	w.u1Requests = []turn.Request{run(w.runner, w.c1, w.u1, "one"), run(w.runner, w.c1, w.u1, "two"), run(w.runner, w.c2, w.u1, "three")}
	w.dead = run(w.runner, w.c2, w.u1, "poison")
	w.others = []turn.Request{run(w.runner, w.c3, w.u2, "four"), run(w.runner2, w.c1, w.u3, "five")}
	for _, o := range []attachment.Owner{{App: w.app, User: w.u1}, {App: w.app, User: w.u2}, {App: w.app2, User: w.u3}} {
		_, err := attachment.PutBytes(ctx, stores.attachments, o, "log.txt", "text/plain", []byte("a log of "+o.User))
		require.NoError(t, err)
	}
	return w
}

// entry returns the inbox entry of req (of app's Runner, or app2's for u3), ok false when
// there is none.
func (w *retentionWorld) entry(t *testing.T, req turn.Request) (inbox.Entry, bool) {
	t.Helper()
	r := w.runner
	if req.UserID == w.u3 {
		r = w.runner2
	}
	e, err := w.stores.inbox.Get(context.Background(), r.InboxKey(req))
	if errors.Is(err, inbox.ErrNotFound) {
		return inbox.Entry{}, false
	}
	require.NoError(t, err)
	return e, true
}

// intents returns the keys of the outbox's intents.
func (w *retentionWorld) intents(t *testing.T, status inbox.IntentStatus) []string {
	t.Helper()
	its, err := w.stores.inbox.Intents(context.Background(), inbox.IntentFilter{Status: status, Limit: 1000})
	require.NoError(t, err)
	var keys []string
	for _, it := range its {
		keys = append(keys, it.Key)
	}
	return keys
}

// sessionExists reports whether the session of (app, user, conv) exists.
func (w *retentionWorld) sessionExists(t *testing.T, app, user, conv string) bool {
	t.Helper()
	_, err := w.stores.sessions.Get(context.Background(), session.Key{App: app, User: user, Conversation: conv}, 1)
	if errors.Is(err, session.ErrNotFound) {
		return false
	}
	require.NoError(t, err)
	return true
}

// attachmentExists reports whether the user's attachment exists.
func (w *retentionWorld) attachmentExists(t *testing.T, app, user string) bool {
	t.Helper()
	_, err := w.stores.attachments.Stat(context.Background(), attachment.Owner{App: app, User: user}, attachment.IDOf([]byte("a log of "+user)))
	if errors.Is(err, attachment.ErrNotFound) {
		return false
	}
	require.NoError(t, err)
	return true
}

// TestRetentionRunBoundsWhatTurnsKeep: a retention run at growing distances in time deletes
// the done and dead inbox entries with their journals and the settled intents after the
// inbox horizon (keeping a pending intent), the app's attachments after their idle time and
// its sessions after theirs, and nothing younger; another app's sessions and attachments
// stay. On the memory stores, SQLite and PostgreSQL.
func TestRetentionRunBoundsWhatTurnsKeep(t *testing.T) {
	t.Parallel()
	eachRetentionKind(t, func(t *testing.T, w *retentionWorld) {
		ctx := context.Background()
		// Deliver every intent but u2's, which stays pending.
		claimed, err := w.stores.inbox.Claim(ctx, 100, time.Minute)
		require.NoError(t, err)
		require.Len(t, claimed, 5)
		pending := w.runner.InboxKey(w.others[0])
		for _, it := range claimed {
			if it.Key != pending {
				require.NoError(t, w.stores.inbox.Delivered(ctx, it.ID, it.Attempts))
			}
		}

		var offset atomic.Int64
		ret := turn.NewRetention(w.runner)
		ret.NowFunc = func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
		require.Equal(t, w.app, ret.App)
		require.NotNil(t, ret.Sessions)
		require.NotNil(t, ret.Attachments)
		runAt := func(after time.Duration) turn.Deleted {
			t.Helper()
			offset.Store(int64(after))
			d, err := ret.Run(ctx)
			require.NoError(t, err)
			return d
		}

		require.Equal(t, turn.Deleted{}, runAt(0), "nothing is old yet")
		require.Equal(t, turn.Deleted{}, runAt(turn.DefaultInboxHorizon-time.Hour), "nothing is older than the inbox horizon")
		require.Equal(t, turn.Deleted{Inbox: 6 + 4}, runAt(turn.DefaultInboxHorizon+time.Hour),
			"five done entries, one dead, four delivered intents, of both apps")
		for _, req := range append(append(w.u1Requests, w.others...), w.dead) {
			_, ok := w.entry(t, req)
			require.False(t, ok, "%s: purged", req.Text)
			steps, err := w.stores.inbox.Steps(ctx, w.runner.InboxKey(req))
			require.NoError(t, err)
			require.Empty(t, steps, "%s: its journal goes with it", req.Text)
		}
		require.Equal(t, []string{pending}, w.intents(t, inbox.IntentPending), "a pending intent is never purged")
		require.True(t, w.attachmentExists(t, w.app, w.u1))

		require.Equal(t, turn.Deleted{Attachments: 2}, runAt(turn.DefaultAttachmentIdle+time.Hour), "app's two attachments")
		require.False(t, w.attachmentExists(t, w.app, w.u1))
		require.True(t, w.attachmentExists(t, w.app2, w.u3), "another app's attachment stays")
		require.True(t, w.sessionExists(t, w.app, w.u1, w.c1))

		require.Equal(t, turn.Deleted{Sessions: 3}, runAt(turn.DefaultSessionIdle+time.Hour), "app's three sessions")
		require.False(t, w.sessionExists(t, w.app, w.u1, w.c1))
		require.True(t, w.sessionExists(t, w.app2, w.u3, w.c1), "another app's session stays")
		require.Equal(t, turn.Deleted{}, runAt(turn.DefaultSessionIdle+time.Hour))
	})
}

// TestRetentionDeleteUser: a user's deletion takes the inbox entries of the user's
// conversations (done, dead) with their journals and intents, the user's sessions and
// attachments, and nothing of another user or of another app's user whose conversation has
// the same id; a second deletion finds nothing. On the memory stores, SQLite and PostgreSQL.
func TestRetentionDeleteUser(t *testing.T) {
	t.Parallel()
	eachRetentionKind(t, func(t *testing.T, w *retentionWorld) {
		ctx := context.Background()
		e, ok := w.entry(t, w.dead)
		require.True(t, ok)
		require.Equal(t, inbox.StatusDead, e.Status)
		ret := turn.NewRetention(w.runner)

		d, err := ret.DeleteUser(ctx, w.u1)
		require.NoError(t, err)
		require.Equal(t, turn.Deleted{Inbox: 4 + 3, Sessions: 2, Attachments: 1}, d,
			"three done entries and a dead one with three intents, two sessions, one attachment")
		for _, req := range append(w.u1Requests, w.dead) {
			_, ok := w.entry(t, req)
			require.False(t, ok, "%s: erased", req.Text)
			steps, err := w.stores.inbox.Steps(ctx, w.runner.InboxKey(req))
			require.NoError(t, err)
			require.Empty(t, steps)
		}
		require.False(t, w.sessionExists(t, w.app, w.u1, w.c1))
		require.False(t, w.sessionExists(t, w.app, w.u1, w.c2))
		require.False(t, w.attachmentExists(t, w.app, w.u1))

		for _, req := range w.others {
			e, ok := w.entry(t, req)
			require.True(t, ok, "%s stays", req.Text)
			require.Equal(t, inbox.StatusDone, e.Status)
		}
		require.ElementsMatch(t, []string{w.runner.InboxKey(w.others[0]), w.runner2.InboxKey(w.others[1])}, w.intents(t, inbox.IntentPending),
			"the other users' intents stay, app2's in a conversation named as u1's")
		require.True(t, w.sessionExists(t, w.app, w.u2, w.c3))
		require.True(t, w.sessionExists(t, w.app2, w.u3, w.c1))
		require.True(t, w.attachmentExists(t, w.app, w.u2))
		require.True(t, w.attachmentExists(t, w.app2, w.u3))

		d, err = ret.DeleteUser(ctx, w.u1)
		require.NoError(t, err)
		require.Equal(t, turn.Deleted{}, d, "nothing left")
	})
}

// TestRetentionDeleteUserRefusesToLeaveTheInbox: a deletion that could not reach the user's
// inbox entries (an inbox that is not an Eraser, no session lister) deletes nothing and says
// why.
func TestRetentionDeleteUserRefusesToLeaveTheInbox(t *testing.T) {
	t.Parallel()
	w := newRetentionWorld(t, retentionKinds[0].open(t))
	ctx := context.Background()
	for name, ret := range map[string]turn.Retention{
		"not an Eraser": {App: w.app, Inbox: struct{ inbox.Inbox }{w.stores.inbox}, Sessions: w.stores.sessions},
		"no sessions":   {App: w.app, Inbox: w.stores.inbox},
		"no lister":     {App: w.app, Inbox: w.stores.inbox, Sessions: struct{ session.Retention }{w.stores.sessions}},
	} {
		d, err := ret.DeleteUser(ctx, w.u1)
		require.Error(t, err, name)
		require.Equal(t, turn.Deleted{}, d, name)
	}
	_, err := turn.NewRetention(w.runner).DeleteUser(ctx, "")
	require.Error(t, err)
	require.True(t, w.sessionExists(t, w.app, w.u1, w.c1))
	_, ok := w.entry(t, w.u1Requests[0])
	require.True(t, ok)
}

// TestRetentionSchedule: Schedule runs at once and then every Every, reports each run, and
// returns nil when its context ends; an invalid Retention fails before any run.
func TestRetentionSchedule(t *testing.T) {
	t.Parallel()
	w := newRetentionWorld(t, retentionKinds[0].open(t))
	ret := turn.NewRetention(w.runner)
	ret.Every = 5 * time.Millisecond
	ret.NowFunc = func() time.Time { return time.Now().Add(turn.DefaultSessionIdle + time.Hour) }
	type run struct {
		d   turn.Deleted
		err error
	}
	ran := make(chan run, 10)
	ret.RanFunc = func(d turn.Deleted, err error) {
		select {
		case ran <- run{d, err}:
		default:
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ret.Schedule(ctx) }()
	require.Equal(t, run{d: turn.Deleted{Inbox: 6, Sessions: 3, Attachments: 2}}, <-ran,
		"the first run: every entry (the intents are pending), app's sessions and attachments")
	require.Equal(t, run{}, <-ran, "the next runs find nothing")
	cancel()
	require.NoError(t, <-done)

	for _, bad := range []turn.Retention{
		{},
		{Inbox: w.stores.inbox, InboxHorizon: -time.Hour},
		{Sessions: w.stores.sessions, Every: -time.Second},
	} {
		require.Error(t, bad.Validate())
		require.Error(t, bad.Schedule(context.Background()))
		_, err := bad.Run(context.Background())
		require.Error(t, err)
	}
}

// TestRetentionRunGoesOnPastAFailedPart: a part that fails does not stop the others, and the
// error names it.
func TestRetentionRunGoesOnPastAFailedPart(t *testing.T) {
	t.Parallel()
	w := newRetentionWorld(t, retentionKinds[0].open(t))
	ret := turn.NewRetention(w.runner)
	ret.Inbox = failingPurge{w.stores.inbox}
	ret.NowFunc = func() time.Time { return time.Now().Add(turn.DefaultSessionIdle + time.Hour) }
	d, err := ret.Run(context.Background())
	require.ErrorContains(t, err, "inbox purge: purge is down")
	require.Equal(t, turn.Deleted{Sessions: 3, Attachments: 2}, d)
}

type failingPurge struct{ inbox.Inbox }

func (failingPurge) Purge(context.Context, time.Time) (int64, error) {
	return 0, errors.New("purge is down")
}
