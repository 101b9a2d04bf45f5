package turn_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
)

// Tests of the holes of issue 10 that the turn package closes: each failed before its fix.

// Hole 3: a request id copied into another user's conversation is served there as that user's
// own request, so its side effects must not be deduplicated against the first user's: a refund
// keyed on the request id alone would be skipped for the second user, or handed the first
// user's refund object by a payment API.
func TestCopiedRequestIDGetsItsOwnToolKeys(t *testing.T) {
	t.Parallel()
	var (
		mu   sync.Mutex
		keys = map[string][]string{} // user -> refund keys, one per model call
	)
	b := setup(t)
	b.runner.Model = turn.ModelFunc(func(_ context.Context, in turn.Input) (turn.Output, error) {
		mu.Lock()
		keys[in.Request.UserID] = append(keys[in.Request.UserID], in.ToolKey("refund"))
		mu.Unlock()
		if in.Attempt == 1 && in.Request.UserID == "alice" {
			return turn.Output{}, errors.New("flaky model") // alice's turn runs twice
		}
		return turn.Output{Events: []session.Event{{Text: "refunded"}}}, nil
	})
	ctx := context.Background()
	alice := newRequest("c-alice", "alice", "refund my order")
	_, err := b.runner.Run(ctx, alice)
	require.Equal(t, turn.KindAttempt, turn.Classify(err))
	_, err = b.runner.Run(ctx, alice)
	require.NoError(t, err)
	mallory := newRequest("c-mallory", "mallory", "refund my order")
	mallory.ID = alice.ID
	_, err = b.runner.Run(ctx, mallory)
	require.NoError(t, err)

	require.Len(t, keys["alice"], 2)
	require.Equal(t, keys["alice"][0], keys["alice"][1], "stable across attempts (G3)")
	require.Len(t, keys["mallory"], 1)
	require.NotEqual(t, keys["alice"][0], keys["mallory"][0], "scoped to the session (G7)")

	key := session.Key{App: turn.DefaultApp, User: "alice", Conversation: "c-alice"}
	require.Equal(t, turn.SessionToolKey(key, alice.ID, "refund"), keys["alice"][0])
	require.NotEqual(t, turn.ToolKey(alice.ID, "refund"), keys["alice"][0], "version 2 keys differ from version 1")
	for name, other := range map[string]session.Key{
		"app":          {App: "other", User: "alice", Conversation: "c-alice"},
		"user":         {App: turn.DefaultApp, User: "bob", Conversation: "c-alice"},
		"conversation": {App: turn.DefaultApp, User: "alice", Conversation: "c-2"},
		"boundary":     {App: turn.DefaultApp, User: "alicec", Conversation: "-alice"},
	} {
		require.NotEqual(t, keys["alice"][0], turn.SessionToolKey(other, alice.ID, "refund"), name)
	}
	// Fixed vectors (computed independently with Python's uuid.uuid5 over the length-prefixed
	// name), so that a change of derivation, which would run every side effect of the turns in
	// flight during an upgrade again, fails here; the version 1 format stays as it was.
	require.Equal(t, "1a085ab5-5ba8-5c66-820d-b89779ebbfd3", turn.SessionToolKey(
		session.Key{App: "turnstile", User: "u-12", Conversation: "c-7731"}, "6f1b7c1e-2d8f-4a53-9c1e-0f6f3a3c2b10", "refund"))
	require.Equal(t, "03c03a32-076e-5c21-87b5-fd2a19ee6fc0", turn.ToolKey("6f1b7c1e-2d8f-4a53-9c1e-0f6f3a3c2b10", "refund"))
}

// Hole 4: Go's encoding/json matches names case-insensitively and keeps the last duplicate,
// so {"user_id":"intruder",...,"USER_ID":"owner"} decoded as user "owner" while a gateway that
// reads user_id case-sensitively (or keeps the first duplicate) authenticated "intruder".
func TestDecodeRefusesDuplicateAndCaseVariantNames(t *testing.T) {
	t.Parallel()
	const base = `"schema":1,"request_id":"` + validID + `","conversation_id":"c-1","text":"hi"`
	for name, tc := range map[string]struct{ data, field, problem string }{
		"case variant after":  {`{` + base + `,"user_id":"intruder","USER_ID":"owner"}`, "USER_ID", `differs from the envelope's "user_id" only in case`},
		"case variant alone":  {`{` + base + `,"User_Id":"owner"}`, "User_Id", "only in case"},
		"case variant schema": {`{` + base + `,"user_id":"u","Schema":2}`, "Schema", "only in case"},
		"duplicate":           {`{` + base + `,"user_id":"intruder","user_id":"owner"}`, "user_id", `duplicate name "user_id"`},
		"duplicate escaped":   {`{` + base + `,"user_id":"intruder","user\u005fid":"owner"}`, "user_id", "duplicate name"},
		"duplicate schema":    {`{` + base + `,"user_id":"u","schema":2}`, "schema", "duplicate name"},
		"duplicate metadata":  {`{` + base + `,"user_id":"u","metadata":{"tenant":"a","tenant":"b"}}`, "metadata", `duplicate name "tenant"`},
		"duplicate unknown":   {`{` + base + `,"user_id":"u","extra":1,"extra":2}`, "extra", "duplicate name"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := turn.Decode([]byte(tc.data))
			var de *turn.DecodeError
			require.ErrorAs(t, err, &de)
			require.Equal(t, tc.field, de.Field, "%v", err)
			require.ErrorContains(t, err, tc.problem)
			require.Equal(t, turn.KindPermanent, turn.Classify(err))
		})
	}
	// Unknown names that are not case variants of the envelope's are still ignored, and
	// metadata keys may differ in case only (they are the producer's own).
	req, err := turn.Decode([]byte(`{` + base + `,"user_id":"u","userid":"x","metadata":{"a":"1","A":"2"}}`))
	require.NoError(t, err)
	require.Equal(t, "u", req.UserID)
	require.Equal(t, map[string]string{"a": "1", "A": "2"}, req.Metadata)
}

// Hole 6: uuid.Parse takes five spellings of one UUID; each decoded as valid and deduplicated
// as a different request, so one request sent four ways gave four turns.
func TestRequestIDsHaveOneForm(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	req := newRequest("c-spell", "u-1", "refund me")
	_, err := b.runner.Run(ctx, req)
	require.NoError(t, err)
	id := uuid.MustParse(req.ID)
	for _, spelling := range []string{
		strings.ToUpper(req.ID),
		"{" + req.ID + "}",
		"urn:uuid:" + req.ID,
		strings.ReplaceAll(req.ID, "-", ""),
	} {
		require.Equal(t, id, uuid.MustParse(spelling), "the same UUID")
		data := envelope(t, func(m map[string]any) { m["request_id"] = spelling })
		_, err := turn.Decode(data)
		var de *turn.DecodeError
		require.ErrorAs(t, err, &de, spelling)
		require.Equal(t, "request_id", de.Field)
		require.ErrorContains(t, err, "not in the canonical form")
		require.ErrorContains(t, err, "write it as "+req.ID)

		again := req
		again.ID = spelling
		_, err = b.runner.Run(ctx, again)
		var dead *turn.DeadLetterError
		require.ErrorAs(t, err, &dead, "Run validates too")
	}
	require.EqualValues(t, 1, b.model.calls.Load(), "one turn, not five")
	n, _ := historyOf(t, b.sessions, b.runner.Key(req), req.ID)
	require.Equal(t, 3, n, "the request's user message, tool event and answer, once")
}

// crashed records deliveries of req that began and ended with their process: Begin, then
// nothing.
func crashed(t *testing.T, b *bundle, req turn.Request, n int) {
	t.Helper()
	for range n {
		_, err := b.inbox.Begin(context.Background(), inbox.Delivery{Key: b.runner.InboxKey(req)})
		require.NoError(t, err)
	}
}

// Hole 2: a crash counted an attempt for every request in flight on the member, so a valid
// request that ran beside a record killing its member three times was dead-lettered with "3
// attempts exhausted" although its model never failed. Under WithCrashIsolation (the
// consumer's) a crash beside others sends the request to run alone, spending nothing.
func TestCrashBesideOthersDoesNotCondemn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	shared := turn.WithCrashIsolation(context.Background(), false)
	alone := turn.WithCrashIsolation(context.Background(), true)
	innocent := newRequest("c-innocent", "u-1", "a valid 6 s request")
	crashed(t, b, innocent, 1) // its first delivery ran beside the killer
	// Each later member asks it to run alone and is killed (by the killer, alone) before it
	// can: more deliveries than MaxAttempts.
	for range turn.DefaultMaxAttempts + 2 {
		_, err := b.runner.Run(shared, innocent)
		require.ErrorIs(t, err, turn.ErrRunAlone)
		require.Equal(t, turn.KindRunAlone, turn.Classify(err))
	}
	require.Zero(t, b.model.calls.Load(), "asked to run alone, it ran nothing")
	entry, err := b.inbox.Get(context.Background(), b.runner.InboxKey(innocent))
	require.NoError(t, err)
	require.Equal(t, 1, entry.Attempts, "the deliveries sent to run alone spent nothing")
	res, err := b.runner.Run(alone, innocent)
	require.NoError(t, err, "served, not dead-lettered")
	require.EqualValues(t, 1, b.model.calls.Load())
	require.Contains(t, res.Text, "a valid 6 s request")

	// Without the isolation context (Temporal mode) every crash still counts, as before.
	other := newRequest("c-other", "u-1", "x")
	crashed(t, b, other, turn.DefaultMaxAttempts)
	_, err = b.runner.Run(context.Background(), other)
	var dead *turn.DeadLetterError
	require.ErrorAs(t, err, &dead)
}

// The record that kills its member is still dead-lettered: its crashes while alone count.
// The first crash, beside others, does not; then MaxAttempts lone crashes do.
func TestCrashWhileAloneCondemns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	shared := turn.WithCrashIsolation(ctx, false)
	alone := turn.WithCrashIsolation(ctx, true)
	killer := newRequest("c-killer", "u-1", "kills its member")
	var killed bool
	b.runner.Model = turn.ModelFunc(func(ctx context.Context, in turn.Input) (turn.Output, error) {
		killed = true
		return turn.Output{}, context.Cause(ctx) // never reached: see below
	})
	// A crash is a Run whose process ends mid-turn: Begin and the lone mark are written, no
	// outcome. Stand in for it with a Runner whose inbox goes silent once the model is called.
	crash := func(ctx context.Context) {
		t.Helper()
		silent := &silentInbox{Inbox: b.inbox}
		r := *b.runner
		r.Inbox = silent
		r.Model = turn.ModelFunc(func(context.Context, turn.Input) (turn.Output, error) {
			silent.dead.Store(true)
			return turn.Output{}, errors.New("the process died here")
		})
		_, _ = r.Run(ctx, killer)
	}
	crash(shared) // attempt 1, beside others: not counted
	for i := range turn.DefaultMaxAttempts {
		_, err := b.runner.Run(shared, killer)
		require.ErrorIs(t, err, turn.ErrRunAlone, "delivery %d", i+2)
		crash(alone)
	}
	entry, err := b.inbox.Get(ctx, b.runner.InboxKey(killer))
	require.NoError(t, err)
	require.Equal(t, turn.DefaultMaxAttempts, entry.Attempts, "the lone crashes, and only they")
	_, err = b.runner.Run(shared, killer)
	var dead *turn.DeadLetterError
	require.ErrorAs(t, err, &dead)
	require.Equal(t, turn.DefaultMaxAttempts, dead.Attempts)
	require.Contains(t, dead.Reason, "3 attempts exhausted; the last ran alone and ended with its process")
	require.False(t, killed, "the dead-lettered request never reached the model again")
}

// Failed attempts count as before under isolation, and a refunded one (a rate limit) is not
// taken for a crash.
func TestIsolationKeepsFailuresAndRefunds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	shared := turn.WithCrashIsolation(context.Background(), false)
	b.model.err = func(n int64) error {
		switch n {
		case 1:
			return turn.RetryAfter(0, errors.New("429"))
		case 2, 3:
			return errors.New("flaky")
		}
		return nil
	}
	req := newRequest("c-fail", "u-1", "x")
	_, err := b.runner.Run(shared, req)
	require.Equal(t, turn.KindRateLimited, turn.Classify(err))
	_, err = b.runner.Run(shared, req)
	require.Equal(t, turn.KindAttempt, turn.Classify(err), "after a refund: runs, not sent alone")
	_, err = b.runner.Run(shared, req)
	require.Equal(t, turn.KindAttempt, turn.Classify(err), "after a failure: runs, not sent alone")
	res, err := b.runner.Run(shared, req)
	require.NoError(t, err)
	require.Equal(t, 3, res.Attempt)
}

// silentInbox stops writing once dead is set, as the inbox of a process that died.
type silentInbox struct {
	inbox.Inbox
	dead atomic.Bool
}

func (s *silentInbox) Fail(ctx context.Context, id string, f inbox.Failure) error {
	if s.dead.Load() {
		return errors.New("process gone")
	}
	return s.Inbox.Fail(ctx, id, f)
}

func (s *silentInbox) MarkDead(ctx context.Context, id, reason string) error {
	if s.dead.Load() {
		return errors.New("process gone")
	}
	return s.Inbox.MarkDead(ctx, id, reason)
}
