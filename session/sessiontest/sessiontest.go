// Package sessiontest is the conformance suite for session.Store: every rule of the Store
// contract (the doc comments of package session) as a subtest. turnstile runs it against each
// of its stores; run it against your own:
//
//	func TestMyStore(t *testing.T) {
//		sessiontest.Run(t, func(t *testing.T) session.Store { return mystore.New(...) })
//	}
//
// Run calls newStore once in each subtest, and many subtests run in parallel (t.Parallel).
// Every subtest uses its own random app and conversation ids, so newStore may hand out one
// shared store or a fresh one each time; register cleanup with t.Cleanup.
//
// What the suite requires beyond the doc comments:
//   - Times (Event.Time) round-trip to the microsecond: the suite compares them truncated to
//     microseconds with time.Time.Equal, so a store may drop nanoseconds and the location
//     (SQL databases keep microseconds). The zero time comes back as the zero time.
//   - Event.Data and Session.State come back byte for byte as given (no JSON reformatting),
//     and the store keeps no reference to the caller's slices, nor the caller to the store's.
//   - CreatedAt and UpdatedAt are set, UpdatedAt is not before CreatedAt, and both are within
//     an hour of the test machine's clock (the store may use its own clock).
//   - Under contention (20 goroutines on one conversation) no call fails with anything but
//     the contract's errors: a store must wait for its locks rather than fail fast.
//   - A call whose context is already cancelled returns an error and changes nothing.
//
// When the store implements session.TxAppender, Run also checks AppendTx (the subtests under
// "AppendTx"; skipped, with the reason, for other stores): the turn and the joined write
// commit together or not at all, and nothing is joined when nothing is written. The joined
// writes go to a table of each subtest's own, which the suite creates and drops through
// TxDB(), so the database user needs CREATE TABLE. RunJoint checks such a store together with
// an inbox.TxCompleter, as turn.Runner uses them.
//
// When the store implements session.Retention, Run also checks DeleteUser and DeleteIdle (the
// subtests under "Retention"), each in apps of its own, DeleteIdle also while turns go on. When
// it implements session.UserLister, Run checks UserSessions (under "UserLister").
//
// RunBatched checks a store that batches the writes of concurrent callers (for
// session/sqlsession, Options.Batch): many callers at once in one batch, each with its own
// outcome; a batch that fails (the caller says how to break the store); a caller that gives
// up. Run it besides Run.
package sessiontest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/internal/suite"
	"github.com/turnstile-go/turnstile/session"
)

// Run runs the conformance suite against the stores newStore returns. See the package doc
// for what newStore may share between subtests.
func Run(t *testing.T, newStore func(t *testing.T) session.Store) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, newStore(t))
		})
	}
	suite.RunOptional(t, "AppendTx", newStore, txCases)
	suite.RunOptional(t, "Retention", newStore, retentionCases)
	suite.RunOptional(t, "UserLister", newStore, userListerCases)
}

type testCase struct {
	name string
	run  func(t *testing.T, s session.Store)
}

// cases lists the subtests, one rule (or one family of rules) each.
var cases = []testCase{
	{"CreateThenGet", testCreateThenGet},
	{"CreateNilState", testCreateNilState},
	{"CreateExists", testCreateExists},
	{"NotFound", testNotFound},
	{"OwnerMismatch", testOwnerMismatch},
	{"InvalidKey", testInvalidKey},
	{"InvalidTurn", testInvalidTurn},
	{"AppendFillsSeqAndRequestID", testAppendFillsSeq},
	{"VersionBumpsByOne", testVersionBumps},
	{"StateReplacedOnlyWhenSet", testStateReplace},
	{"GetRecent", testGetRecent},
	{"DuplicateAppend", testDuplicateAppend},
	{"StaleAppend", testStaleAppend},
	{"FindTurnBeyondRecentWindow", testFindTurnOld},
	{"RoundTrip", testRoundTrip},
	{"NoAliasing", testNoAliasing},
	{"Delete", testDelete},
	{"AppsIsolated", testAppsIsolated},
	{"CreateRace", testCreateRace},
	{"AppendRace", testAppendRace},
	{"SequentialWriters", testSequentialWriters},
	{"CancelledContext", testCancelledContext},
}

// newKey returns a key no other subtest uses.
func newKey(t *testing.T) session.Key {
	t.Helper()
	return session.Key{App: "app-" + randID(t), User: "user-" + randID(t), Conversation: "conv-" + randID(t)}
}

func randID(t *testing.T) string {
	t.Helper()
	var b [8]byte
	_, err := rand.Read(b[:])
	require.NoError(t, err)
	return hex.EncodeToString(b[:])
}

// turn builds a turn of n events for request id req.
func turn(req string, n int) session.Turn {
	tr := session.Turn{RequestID: req}
	for i := range n {
		tr.Events = append(tr.Events, session.Event{
			ID:     fmt.Sprintf("%s-%d", req, i),
			Author: []string{"user", "assistant", "tool"}[i%3],
			Text:   fmt.Sprintf("%s event %d", req, i),
			Time:   time.Date(2025, 1, 2, 3, 4, 5, i*1000, time.UTC),
		})
	}
	return tr
}

func create(t *testing.T, s session.Store, key session.Key, state json.RawMessage) session.Session {
	t.Helper()
	sess, err := s.Create(context.Background(), key, state)
	require.NoError(t, err)
	return sess
}

func mustAppend(t *testing.T, s session.Store, key session.Key, version int64, tr session.Turn) session.Appended {
	t.Helper()
	ap, err := s.Append(context.Background(), key, version, tr)
	require.NoError(t, err)
	require.False(t, ap.Duplicate, "first append of %s reported a duplicate", tr.RequestID)
	require.Equal(t, version+1, ap.Version)
	return ap
}

func get(t *testing.T, s session.Store, key session.Key, recent int) session.Session {
	t.Helper()
	sess, err := s.Get(context.Background(), key, recent)
	require.NoError(t, err)
	return sess
}

// requireSameEvents compares events field by field, times to the microsecond.
func requireSameEvents(t *testing.T, want, got []session.Event) {
	t.Helper()
	require.Len(t, got, len(want))
	for i := range want {
		w, g := want[i], got[i]
		require.Equal(t, w.ID, g.ID, "event %d id", i)
		require.Equal(t, w.RequestID, g.RequestID, "event %d request id", i)
		require.Equal(t, w.Seq, g.Seq, "event %d seq", i)
		require.Equal(t, w.Author, g.Author, "event %d author", i)
		require.Equal(t, w.Text, g.Text, "event %d text", i)
		require.Equal(t, string(w.Data), string(g.Data), "event %d data", i)
		requireSameTime(t, w.Time, g.Time, fmt.Sprintf("event %d time", i))
	}
}

func requireSameTime(t *testing.T, want, got time.Time, what string) {
	t.Helper()
	require.True(t, want.Truncate(time.Microsecond).Equal(got.Truncate(time.Microsecond)),
		"%s: want %s, got %s", what, want, got)
}

// requireRecentTime checks a store-made timestamp loosely: set, and near the test's clock.
func requireRecentTime(t *testing.T, ts time.Time, what string) {
	t.Helper()
	require.False(t, ts.IsZero(), "%s is zero", what)
	d := time.Since(ts)
	require.True(t, d < time.Hour && d > -time.Hour, "%s = %s is more than an hour from now", what, ts)
}

// stored returns the events of tr as a store returns them after appending at seq first.
func stored(tr session.Turn, first int64) []session.Event {
	out := make([]session.Event, len(tr.Events))
	for i, e := range tr.Events {
		e.RequestID = tr.RequestID
		e.Seq = first + int64(i)
		out[i] = e
	}
	return out
}
