// Package inboxtest is the conformance suite for inbox.Inbox: every rule of the Inbox contract
// (the doc comments of package inbox) as a subtest. turnstile runs it against each of its
// inboxes; run it against your own:
//
//	func TestMyInbox(t *testing.T) {
//		inboxtest.Run(t, func(t *testing.T) inbox.Inbox { return myinbox.New(...) })
//	}
//
// Run calls newInbox once in each subtest, and subtests run in parallel (t.Parallel). Purge
// acts on the whole inbox, so newInbox must return an inbox that no other subtest uses (a
// fresh one, or one with its own tables); register cleanup with t.Cleanup.
//
// What the suite requires beyond the doc comments:
//   - Begin is atomic: 20 concurrent Begins of one request each get a distinct attempt
//     number, 1 to 20, and exactly one of them StatusNew.
//   - Result bytes come back as given, and the inbox keeps no reference to the caller's slice.
//   - CreatedAt and UpdatedAt are set and within an hour of the test machine's clock (the
//     inbox may use its own clock, which is why Purge is tested with cutoffs an hour away).
//   - Under contention no call fails with anything but the contract's errors.
//   - A call whose context is already cancelled returns an error and changes nothing.
//
// When the inbox implements inbox.TxCompleter, Run also checks CompleteTx (the subtests under
// "CompleteTx"; skipped, with the reason, for other inboxes) in transactions it opens with
// TxDB().BeginTx: a completion takes effect when its transaction commits and not when it rolls
// back, with Complete's errors. session/sessiontest.RunJoint checks such an inbox together
// with a session.TxAppender, as turn.Runner uses them.
//
// When the inbox implements inbox.Journal, inbox.Outbox or inbox.TxOutbox, Run checks them
// too (the subtests under "Journal", "Outbox" and "PromoteTx"; skipped, naming the interface,
// for other inboxes): steps read back by ordinal, the first writer of an ordinal wins,
// ErrStepMismatch, Redrive and Purge clearing steps; Promote of deferred steps only and once,
// Claim's leases (a claimed intent is not claimed again before its lease ends, and 6
// concurrent claimers never get one intent twice), Retry, Bury, Delivered, RedriveIntent,
// Intents' filters, Purge of settled intents only; a PromoteTx rolled back leaves no intent.
// A lease's end is not waited for but for one lease of 50 ms; Retry with a time in the past
// stands in for the others.
//
// When the inbox implements inbox.Eraser, Run checks Erase (the subtests under "Eraser"): the
// entries a scope selects go whatever their status, with their steps and intents, and nothing
// else; 450 conversations in one call; ErrInvalid before anything is erased.
//
// RunBatched checks an inbox that batches the Begins of concurrent callers (for
// inbox/sqlinbox, Options.Batch): each caller's own entry out of one batch, a batch that fails
// (the caller says how to break the inbox), a caller that gives up. Run it besides Run.
package inboxtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/internal/suite"
)

// Run runs the conformance suite against the inboxes newInbox returns; see the package doc.
func Run(t *testing.T, newInbox func(t *testing.T) inbox.Inbox) {
	t.Helper()
	runParallel(t, cases, newInbox)
	suite.RunOptional(t, "CompleteTx", newInbox, txCases)
	suite.RunOptional(t, "Journal", newInbox, journalCases)
	suite.RunOptional(t, "Outbox", newInbox, outboxCases)
	suite.RunOptional(t, "PromoteTx", newInbox, txOutboxCases)
	suite.RunOptional(t, "Eraser", newInbox, eraseCases)
}

// runParallel runs each case as a parallel subtest on a value newValue makes in it.
func runParallel[T any](t *testing.T, cases []suite.Case[T], newValue func(t *testing.T) T) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			c.Run(t, newValue(t))
		})
	}
}

var cases = []suite.Case[inbox.Inbox]{
	{Name: "BeginNew", Run: testBeginNew},
	{Name: "BeginAgain", Run: testBeginAgain},
	{Name: "Complete", Run: testComplete},
	{Name: "CompleteTwiceKeepsFirst", Run: testCompleteTwice},
	{Name: "Fail", Run: testFail},
	{Name: "FailRefund", Run: testFailRefund},
	{Name: "FailOnDoneOrDead", Run: testFailOnDoneOrDead},
	{Name: "MarkDead", Run: testMarkDead},
	{Name: "MarkDeadOnDone", Run: testMarkDeadOnDone},
	{Name: "CompleteOnDead", Run: testCompleteOnDead},
	{Name: "NotFound", Run: testNotFound},
	{Name: "Invalid", Run: testInvalid},
	{Name: "RequestsIndependent", Run: testIndependent},
	{Name: "Purge", Run: testPurge},
	{Name: "PurgeMany", Run: testPurgeMany},
	{Name: "PurgeUnderTraffic", Run: testPurgeUnderTraffic},
	{Name: "Redrive", Run: testRedrive},
	{Name: "RedriveNotDead", Run: testRedriveNotDead},
	{Name: "RedriveAgain", Run: testRedriveAgain},
	{Name: "ConcurrentRedrive", Run: testConcurrentRedrive},
	{Name: "ConcurrentBegin", Run: testConcurrentBegin},
	{Name: "ConcurrentRequests", Run: testConcurrentRequests},
	{Name: "CancelledContext", Run: testCancelledContext},
}

func randID(t *testing.T) string {
	t.Helper()
	var b [8]byte
	_, err := rand.Read(b[:])
	require.NoError(t, err)
	return hex.EncodeToString(b[:])
}

func delivery(t *testing.T, offset int64) inbox.Delivery {
	t.Helper()
	return inbox.Delivery{Key: "req-" + randID(t), Conversation: "conv-" + randID(t), Topic: "requests", Partition: 3, Offset: offset}
}

func begin(t *testing.T, b inbox.Inbox, d inbox.Delivery) inbox.Entry {
	t.Helper()
	e, err := b.Begin(context.Background(), d)
	require.NoError(t, err)
	require.Equal(t, d.Key, e.Key)
	return e
}

func getEntry(t *testing.T, b inbox.Inbox, id string) inbox.Entry {
	t.Helper()
	e, err := b.Get(context.Background(), id)
	require.NoError(t, err)
	return e
}

func requireRecentTime(t *testing.T, ts time.Time, what string) {
	t.Helper()
	require.False(t, ts.IsZero(), "%s is zero", what)
	d := time.Since(ts)
	require.True(t, d < time.Hour && d > -time.Hour, "%s = %s is more than an hour from now", what, ts)
}

func requireLocation(t *testing.T, d inbox.Delivery, e inbox.Entry) {
	t.Helper()
	require.Equal(t, d.Topic, e.Topic)
	require.Equal(t, d.Partition, e.Partition)
	require.Equal(t, d.Offset, e.Offset)
}

func testBeginNew(t *testing.T, b inbox.Inbox) {
	d := delivery(t, 42)
	e := begin(t, b, d)
	require.Equal(t, inbox.StatusNew, e.Status)
	require.Equal(t, 1, e.Attempts)
	require.Equal(t, d.Conversation, e.Conversation)
	requireLocation(t, d, e)
	require.Empty(t, e.Result)
	require.Empty(t, e.Reason)
	requireRecentTime(t, e.CreatedAt, "CreatedAt")
	requireRecentTime(t, e.UpdatedAt, "UpdatedAt")

	got := getEntry(t, b, d.Key)
	require.Equal(t, inbox.StatusInProgress, got.Status, "StatusNew is never stored")
	require.Equal(t, 1, got.Attempts)
	require.Equal(t, d.Conversation, got.Conversation)
	requireLocation(t, d, got)
}

func testBeginAgain(t *testing.T, b inbox.Inbox) {
	d := delivery(t, 10)
	begin(t, b, d)
	for attempt := 2; attempt <= 4; attempt++ {
		d.Topic, d.Partition, d.Offset = fmt.Sprintf("topic-%d", attempt), int32(attempt), int64(100*attempt)
		e := begin(t, b, d)
		require.Equal(t, inbox.StatusInProgress, e.Status)
		require.Equal(t, attempt, e.Attempts)
		requireLocation(t, d, e)
		requireLocation(t, d, getEntry(t, b, d.Key))
	}
}

func testComplete(t *testing.T, b inbox.Inbox) {
	ctx := context.Background()
	d := delivery(t, 7)
	begin(t, b, d)
	require.NoError(t, b.Complete(ctx, d.Key, []byte(`{"answer":"42"}`)))

	got := getEntry(t, b, d.Key)
	require.Equal(t, inbox.StatusDone, got.Status)
	require.Equal(t, `{"answer":"42"}`, string(got.Result))
	require.Equal(t, 1, got.Attempts)
	require.False(t, got.UpdatedAt.Before(got.CreatedAt))

	// A done entry comes back unchanged: no attempt counted, the first location kept.
	again := d
	again.Offset = 99
	e := begin(t, b, again)
	require.Equal(t, inbox.StatusDone, e.Status)
	require.Equal(t, `{"answer":"42"}`, string(e.Result))
	require.Equal(t, 1, e.Attempts)
	requireLocation(t, d, e)
	require.Equal(t, 1, getEntry(t, b, d.Key).Attempts)
}

func testCompleteTwice(t *testing.T, b inbox.Inbox) {
	ctx := context.Background()
	d := delivery(t, 1)
	begin(t, b, d)
	result := []byte("first")
	require.NoError(t, b.Complete(ctx, d.Key, result))
	result[0] = 'X' // the inbox keeps its own copy
	require.NoError(t, b.Complete(ctx, d.Key, []byte("second")), "completing a done entry is a no-op")
	got := getEntry(t, b, d.Key)
	require.Equal(t, "first", string(got.Result))
	got.Result[0] = 'Y'
	require.Equal(t, "first", string(getEntry(t, b, d.Key).Result))
}

func testFail(t *testing.T, b inbox.Inbox) {
	ctx := context.Background()
	d := delivery(t, 1)
	begin(t, b, d)
	begin(t, b, d)
	require.NoError(t, b.Fail(ctx, d.Key, inbox.Failure{Reason: "model timed out"}))
	got := getEntry(t, b, d.Key)
	require.Equal(t, "model timed out", got.Reason)
	require.Equal(t, 2, got.Attempts, "a failure without refund keeps the attempt")
	require.Equal(t, inbox.StatusInProgress, got.Status)

	require.NoError(t, b.Fail(ctx, d.Key, inbox.Failure{Reason: "again"}))
	require.Equal(t, "again", getEntry(t, b, d.Key).Reason, "the last failure's reason")

	e := begin(t, b, d)
	require.Equal(t, inbox.StatusInProgress, e.Status)
	require.Equal(t, 3, e.Attempts)
}

func testFailRefund(t *testing.T, b inbox.Inbox) {
	ctx := context.Background()
	d := delivery(t, 1)
	begin(t, b, d)
	begin(t, b, d)
	require.NoError(t, b.Fail(ctx, d.Key, inbox.Failure{Reason: "rate limited", Refund: true}))
	require.Equal(t, 1, getEntry(t, b, d.Key).Attempts)
	require.NoError(t, b.Fail(ctx, d.Key, inbox.Failure{Reason: "rate limited", Refund: true}))
	require.Equal(t, 0, getEntry(t, b, d.Key).Attempts)
	require.NoError(t, b.Fail(ctx, d.Key, inbox.Failure{Reason: "store down", Refund: true}))
	got := getEntry(t, b, d.Key)
	require.Equal(t, 0, got.Attempts, "never below zero")
	require.Equal(t, "store down", got.Reason)

	e := begin(t, b, d)
	require.Equal(t, inbox.StatusInProgress, e.Status, "an entry that exists is not new, whatever its count")
	require.Equal(t, 1, e.Attempts)
}

func testFailOnDoneOrDead(t *testing.T, b inbox.Inbox) {
	ctx := context.Background()
	done := delivery(t, 1)
	begin(t, b, done)
	require.NoError(t, b.Complete(ctx, done.Key, []byte("ok")))
	require.NoError(t, b.Fail(ctx, done.Key, inbox.Failure{Reason: "late failure", Refund: true}))
	got := getEntry(t, b, done.Key)
	require.Equal(t, inbox.StatusDone, got.Status)
	require.Equal(t, "ok", string(got.Result))
	require.Equal(t, 1, got.Attempts)
	require.Empty(t, got.Reason)

	dead := delivery(t, 2)
	begin(t, b, dead)
	require.NoError(t, b.MarkDead(ctx, dead.Key, "poison"))
	require.NoError(t, b.Fail(ctx, dead.Key, inbox.Failure{Reason: "late failure", Refund: true}))
	got = getEntry(t, b, dead.Key)
	require.Equal(t, inbox.StatusDead, got.Status)
	require.Equal(t, "poison", got.Reason)
	require.Equal(t, 1, got.Attempts)
}

func testMarkDead(t *testing.T, b inbox.Inbox) {
	ctx := context.Background()
	d := delivery(t, 5)
	begin(t, b, d)
	begin(t, b, d)
	require.NoError(t, b.MarkDead(ctx, d.Key, "too many attempts"))

	again := d
	again.Offset = 6
	e := begin(t, b, again)
	require.Equal(t, inbox.StatusDead, e.Status)
	require.Equal(t, "too many attempts", e.Reason)
	require.Equal(t, 2, e.Attempts, "a dead entry counts no attempt")
	require.Empty(t, e.Result)
	got := getEntry(t, b, d.Key)
	require.Equal(t, inbox.StatusDead, got.Status)
	require.Equal(t, 2, got.Attempts)
}

func testMarkDeadOnDone(t *testing.T, b inbox.Inbox) {
	ctx := context.Background()
	d := delivery(t, 5)
	begin(t, b, d)
	require.NoError(t, b.Complete(ctx, d.Key, []byte("result")))
	require.NoError(t, b.MarkDead(ctx, d.Key, "too late"))
	got := getEntry(t, b, d.Key)
	require.Equal(t, inbox.StatusDone, got.Status, "a done entry stays done")
	require.Equal(t, "result", string(got.Result))
	require.Empty(t, got.Reason)
}

func testCompleteOnDead(t *testing.T, b inbox.Inbox) {
	ctx := context.Background()
	d := delivery(t, 5)
	begin(t, b, d)
	require.NoError(t, b.MarkDead(ctx, d.Key, "poison"))
	require.ErrorIs(t, b.Complete(ctx, d.Key, []byte("zombie result")), inbox.ErrDead)
	got := getEntry(t, b, d.Key)
	require.Equal(t, inbox.StatusDead, got.Status)
	require.Empty(t, got.Result)
	require.Equal(t, "poison", got.Reason)
}

func testNotFound(t *testing.T, b inbox.Inbox) {
	ctx := context.Background()
	id := "req-" + randID(t)
	require.ErrorIs(t, b.Complete(ctx, id, []byte("r")), inbox.ErrNotFound, "Complete")
	require.ErrorIs(t, b.Fail(ctx, id, inbox.Failure{Reason: "x", Refund: true}), inbox.ErrNotFound, "Fail")
	require.ErrorIs(t, b.MarkDead(ctx, id, "x"), inbox.ErrNotFound, "MarkDead")
	_, err := b.Redrive(ctx, id, "x")
	require.ErrorIs(t, err, inbox.ErrNotFound, "Redrive")
	_, err = b.Get(ctx, id)
	require.ErrorIs(t, err, inbox.ErrNotFound, "Get: and none of the above made an entry")
}

func testInvalid(t *testing.T, b inbox.Inbox) {
	ctx := context.Background()
	_, err := b.Begin(ctx, inbox.Delivery{Conversation: "c", Topic: "t"})
	require.ErrorIs(t, err, inbox.ErrInvalid, "Begin")
	require.ErrorIs(t, b.Complete(ctx, "", []byte("r")), inbox.ErrInvalid, "Complete")
	require.ErrorIs(t, b.Fail(ctx, "", inbox.Failure{}), inbox.ErrInvalid, "Fail")
	require.ErrorIs(t, b.MarkDead(ctx, "", "x"), inbox.ErrInvalid, "MarkDead")
	_, err = b.Redrive(ctx, "", "x")
	require.ErrorIs(t, err, inbox.ErrInvalid, "Redrive")
	_, err = b.Get(ctx, "")
	require.ErrorIs(t, err, inbox.ErrInvalid, "Get")
}

func testIndependent(t *testing.T, b inbox.Inbox) {
	ctx := context.Background()
	d1, d2 := delivery(t, 1), delivery(t, 2)
	begin(t, b, d1)
	begin(t, b, d2)
	require.NoError(t, b.Complete(ctx, d1.Key, []byte("one")))
	e2 := begin(t, b, d2)
	require.Equal(t, inbox.StatusInProgress, e2.Status)
	require.Equal(t, 2, e2.Attempts)
	require.Empty(t, e2.Result)
	require.Equal(t, 1, getEntry(t, b, d1.Key).Attempts)
}

// testPurge: Purge deletes only done and dead entries last updated before the cutoff. The
// inbox's clock is its own, so the cutoffs are an hour before and after now.
func testPurge(t *testing.T, b inbox.Inbox) {
	ctx := context.Background()
	done, dead, inProgress, failed := delivery(t, 1), delivery(t, 2), delivery(t, 3), delivery(t, 4)
	for _, d := range []inbox.Delivery{done, dead, inProgress, failed} {
		begin(t, b, d)
	}
	require.NoError(t, b.Complete(ctx, done.Key, []byte("r")))
	require.NoError(t, b.MarkDead(ctx, dead.Key, "poison"))
	require.NoError(t, b.Fail(ctx, failed.Key, inbox.Failure{Reason: "x"}))

	n, err := b.Purge(ctx, time.Now().Add(-time.Hour))
	require.NoError(t, err)
	require.Zero(t, n, "nothing is older than an hour ago")
	for _, d := range []inbox.Delivery{done, dead, inProgress, failed} {
		getEntry(t, b, d.Key)
	}

	n, err = b.Purge(ctx, time.Now().Add(time.Hour))
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	for _, d := range []inbox.Delivery{done, dead} {
		_, err := b.Get(ctx, d.Key)
		require.ErrorIs(t, err, inbox.ErrNotFound)
	}
	require.Equal(t, inbox.StatusInProgress, getEntry(t, b, inProgress.Key).Status)
	require.Equal(t, inbox.StatusInProgress, getEntry(t, b, failed.Key).Status)

	n, err = b.Purge(ctx, time.Now().Add(time.Hour))
	require.NoError(t, err)
	require.Zero(t, n)

	// A purged request delivered again runs as new.
	e := begin(t, b, done)
	require.Equal(t, inbox.StatusNew, e.Status)
	require.Equal(t, 1, e.Attempts)
}

// testPurgeMany: more entries than a store may delete in one batch.
func testPurgeMany(t *testing.T, b inbox.Inbox) {
	ctx := context.Background()
	const n = 120
	var keep []string
	for i := range n {
		d := delivery(t, int64(i))
		begin(t, b, d)
		switch i % 3 {
		case 0:
			require.NoError(t, b.Complete(ctx, d.Key, []byte("r")))
		case 1:
			require.NoError(t, b.MarkDead(ctx, d.Key, "x"))
		default:
			keep = append(keep, d.Key)
		}
	}
	purged, err := b.Purge(ctx, time.Now().Add(time.Hour))
	require.NoError(t, err)
	require.EqualValues(t, n-len(keep), purged)
	for _, id := range keep {
		getEntry(t, b, id)
	}
}

// testPurgeUnderTraffic: a Purge that runs while other requests begin, complete and die
// deletes the done and dead entries last updated before its cutoff, and none of those the
// traffic touches after it. The cutoff is read from the inbox's own clock (a marker entry's
// UpdatedAt), taken once it is past every old entry's.
func testPurgeUnderTraffic(t *testing.T, b inbox.Inbox) {
	ctx := context.Background()
	const n = 60
	var old, oldLive []inbox.Delivery
	var newest time.Time
	for i := range n {
		d := delivery(t, int64(i))
		begin(t, b, d)
		switch i % 3 {
		case 0:
			require.NoError(t, b.Complete(ctx, d.Key, []byte("r")))
			old = append(old, d)
		case 1:
			require.NoError(t, b.MarkDead(ctx, d.Key, "x"))
			old = append(old, d)
		default:
			oldLive = append(oldLive, d)
		}
		if u := getEntry(t, b, d.Key).UpdatedAt; u.After(newest) {
			newest = u
		}
	}
	marker := delivery(t, 0)
	cutoff := begin(t, b, marker).UpdatedAt
	for !cutoff.After(newest) { // the inbox's clock may be coarse: let it tick past the old entries
		cutoff = begin(t, b, marker).UpdatedAt
	}

	var (
		wg      sync.WaitGroup
		purged  int64
		purgErr error
		fresh   = make([]inbox.Delivery, n)
		errs    = make([]error, n)
	)
	wg.Go(func() { purged, purgErr = b.Purge(ctx, cutoff) })
	for i := range n {
		fresh[i] = delivery(t, int64(1000+i))
		wg.Go(func() {
			d := fresh[i]
			if _, err := b.Begin(ctx, d); err != nil {
				errs[i] = err
				return
			}
			switch i % 3 {
			case 0:
				errs[i] = b.Complete(ctx, d.Key, []byte("r"))
			case 1:
				errs[i] = b.MarkDead(ctx, d.Key, "x")
			}
		})
	}
	wg.Wait()
	require.NoError(t, purgErr)
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.EqualValues(t, len(old), purged, "exactly the old done and dead entries")
	for _, d := range old {
		_, err := b.Get(ctx, d.Key)
		require.ErrorIs(t, err, inbox.ErrNotFound, "old entry %s", d.Key)
	}
	for _, d := range append(append(oldLive, fresh...), marker) {
		getEntry(t, b, d.Key)
	}
}

// testRedrive: a dead entry re-driven is in progress with no attempts spent and its old
// reason in the audit; the next delivery counts attempt 1 and is not new; it can complete.
func testRedrive(t *testing.T, b inbox.Inbox) {
	ctx := context.Background()
	d := delivery(t, 5)
	begin(t, b, d)
	begin(t, b, d)
	require.NoError(t, b.MarkDead(ctx, d.Key, "model: bug 42"))

	e, err := b.Redrive(ctx, d.Key, "fixed in v1.2; by ops")
	require.NoError(t, err)
	require.Equal(t, inbox.StatusInProgress, e.Status)
	require.Zero(t, e.Attempts)
	require.Empty(t, e.Reason)
	require.Len(t, e.Redrives, 1)
	require.Equal(t, "model: bug 42", e.Redrives[0].Reason)
	require.Equal(t, 2, e.Redrives[0].Attempts)
	require.Equal(t, "fixed in v1.2; by ops", e.Redrives[0].Note)
	requireRecentTime(t, e.Redrives[0].At, "Redrives[0].At")

	got := getEntry(t, b, d.Key)
	require.Equal(t, inbox.StatusInProgress, got.Status)
	require.Zero(t, got.Attempts)
	require.Equal(t, e.Redrives[0].Reason, got.Redrives[0].Reason)
	require.Equal(t, e.Redrives[0].Note, got.Redrives[0].Note)
	require.WithinDuration(t, e.Redrives[0].At, got.Redrives[0].At, time.Millisecond)

	next := begin(t, b, d)
	require.Equal(t, inbox.StatusInProgress, next.Status, "an earlier delivery may have stored the turn: not new")
	require.Equal(t, 1, next.Attempts, "a fresh budget of attempts")
	require.NoError(t, b.Complete(ctx, d.Key, []byte("fixed result")))
	done := getEntry(t, b, d.Key)
	require.Equal(t, inbox.StatusDone, done.Status)
	require.Equal(t, "fixed result", string(done.Result))
	require.Len(t, done.Redrives, 1, "the audit stays")
	require.Equal(t, "model: bug 42", done.Redrives[0].Reason)
}

// testRedriveNotDead: in progress and done entries come back unchanged with ErrNotDead.
func testRedriveNotDead(t *testing.T, b inbox.Inbox) {
	ctx := context.Background()
	running, done := delivery(t, 1), delivery(t, 2)
	begin(t, b, running)
	begin(t, b, done)
	require.NoError(t, b.Complete(ctx, done.Key, []byte("r")))

	e, err := b.Redrive(ctx, running.Key, "x")
	require.ErrorIs(t, err, inbox.ErrNotDead)
	require.Equal(t, inbox.StatusInProgress, e.Status)
	require.Equal(t, 1, getEntry(t, b, running.Key).Attempts)

	e, err = b.Redrive(ctx, done.Key, "x")
	require.ErrorIs(t, err, inbox.ErrNotDead)
	require.Equal(t, inbox.StatusDone, e.Status)
	got := getEntry(t, b, done.Key)
	require.Equal(t, inbox.StatusDone, got.Status)
	require.Equal(t, "r", string(got.Result))
	require.Empty(t, got.Redrives)
}

// testRedriveAgain: a second Redrive before the entry dies again changes nothing; after it
// dies again, a Redrive appends to the audit.
func testRedriveAgain(t *testing.T, b inbox.Inbox) {
	ctx := context.Background()
	d := delivery(t, 1)
	begin(t, b, d)
	require.NoError(t, b.MarkDead(ctx, d.Key, "first"))
	_, err := b.Redrive(ctx, d.Key, "one")
	require.NoError(t, err)
	_, err = b.Redrive(ctx, d.Key, "one again")
	require.ErrorIs(t, err, inbox.ErrNotDead)
	require.Len(t, getEntry(t, b, d.Key).Redrives, 1)

	begin(t, b, d)
	require.NoError(t, b.MarkDead(ctx, d.Key, "second"))
	e, err := b.Redrive(ctx, d.Key, "two")
	require.NoError(t, err)
	require.Len(t, e.Redrives, 2)
	require.Equal(t, []string{"first", "second"}, []string{e.Redrives[0].Reason, e.Redrives[1].Reason})
	require.Equal(t, []int{1, 1}, []int{e.Redrives[0].Attempts, e.Redrives[1].Attempts})
	require.Equal(t, []string{"one", "two"}, []string{e.Redrives[0].Note, e.Redrives[1].Note})
	require.Equal(t, e.Redrives, getEntry(t, b, d.Key).Redrives)
}

// testConcurrentRedrive: of operators racing to re-drive one dead entry, exactly one wins.
func testConcurrentRedrive(t *testing.T, b inbox.Inbox) {
	ctx := context.Background()
	d := delivery(t, 1)
	begin(t, b, d)
	require.NoError(t, b.MarkDead(ctx, d.Key, "poison"))
	const racers = 10
	errs := make([]error, racers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range racers {
		wg.Go(func() {
			<-start
			_, errs[i] = b.Redrive(ctx, d.Key, fmt.Sprint("racer ", i))
		})
	}
	close(start)
	wg.Wait()
	won := 0
	for _, err := range errs {
		if err == nil {
			won++
			continue
		}
		require.ErrorIs(t, err, inbox.ErrNotDead)
	}
	require.Equal(t, 1, won)
	e := getEntry(t, b, d.Key)
	require.Len(t, e.Redrives, 1)
	require.Equal(t, inbox.StatusInProgress, e.Status)
}

// testConcurrentBegin: members racing on one request (a rebalance) all count: the attempts add
// up, each Begin sees its own attempt number, and exactly one sees StatusNew.
func testConcurrentBegin(t *testing.T, b inbox.Inbox) {
	const racers = 20
	d := delivery(t, 1)
	entries, errs := beginConcurrently(b, []inbox.Delivery{d}, racers)
	require.Empty(t, errs)
	requireAttemptsOneToN(t, entries[d.Key], racers)
	require.Equal(t, racers, getEntry(t, b, d.Key).Attempts)
}

func testConcurrentRequests(t *testing.T, b inbox.Inbox) {
	const requests, racers = 8, 6
	var ds []inbox.Delivery
	for i := range requests {
		ds = append(ds, delivery(t, int64(i)))
	}
	entries, errs := beginConcurrently(b, ds, racers)
	require.Empty(t, errs)
	for _, d := range ds {
		requireAttemptsOneToN(t, entries[d.Key], racers)
		require.Equal(t, racers, getEntry(t, b, d.Key).Attempts)
	}
}

// beginConcurrently starts perRequest goroutines for each delivery, all released at once.
func beginConcurrently(b inbox.Inbox, ds []inbox.Delivery, perRequest int) (map[string][]inbox.Entry, []error) {
	var (
		mu      sync.Mutex
		entries = map[string][]inbox.Entry{}
		errs    []error
		wg      sync.WaitGroup
	)
	start := make(chan struct{})
	for i := range perRequest {
		for _, d := range ds {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				d.Offset += int64(i)
				e, err := b.Begin(context.Background(), d)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, fmt.Errorf("begin %s: %w", d.Key, err))
					return
				}
				entries[d.Key] = append(entries[d.Key], e)
			}()
		}
	}
	close(start)
	wg.Wait()
	return entries, errs
}

func requireAttemptsOneToN(t *testing.T, entries []inbox.Entry, n int) {
	t.Helper()
	require.Len(t, entries, n)
	seen := map[int]bool{}
	news := 0
	for _, e := range entries {
		require.False(t, seen[e.Attempts], "two Begins saw attempt %d", e.Attempts)
		seen[e.Attempts] = true
		if e.Status == inbox.StatusNew {
			news++
			require.Equal(t, 1, e.Attempts, "StatusNew comes with attempt 1")
		} else {
			require.Equal(t, inbox.StatusInProgress, e.Status)
		}
	}
	require.Equal(t, 1, news, "exactly one Begin sees StatusNew")
	for a := 1; a <= n; a++ {
		require.True(t, seen[a], "no Begin saw attempt %d", a)
	}
}

func testCancelledContext(t *testing.T, b inbox.Inbox) {
	d := delivery(t, 1)
	begin(t, b, d)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()

	fresh := delivery(t, 2)
	_, err := b.Begin(ctx, fresh)
	require.Error(t, err, "Begin")
	_, err = b.Begin(ctx, d)
	require.Error(t, err, "Begin of a known request")
	require.Error(t, b.Complete(ctx, d.Key, []byte("r")), "Complete")
	require.Error(t, b.Fail(ctx, d.Key, inbox.Failure{Reason: "x", Refund: true}), "Fail")
	require.Error(t, b.MarkDead(ctx, d.Key, "x"), "MarkDead")
	_, err = b.Get(ctx, d.Key)
	require.Error(t, err, "Get")
	_, err = b.Purge(ctx, time.Now().Add(time.Hour))
	require.Error(t, err, "Purge")

	_, err = b.Get(context.Background(), fresh.Key)
	require.True(t, errors.Is(err, inbox.ErrNotFound), "a cancelled Begin makes no entry: %v", err)
	got := getEntry(t, b, d.Key)
	require.Equal(t, inbox.StatusInProgress, got.Status)
	require.Equal(t, 1, got.Attempts)
	require.Empty(t, got.Reason)
}
