package inboxtest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/internal/suite"
)

// journalCases are the subtests of inbox.Journal, run when the inbox implements it (under
// "Journal").
var journalCases = []suite.Case[inbox.Journal]{
	{Name: "RecordAndRead", Run: testJournalRecord},
	{Name: "FirstWriterWins", Run: testJournalFirstWriter},
	{Name: "Mismatch", Run: testJournalMismatch},
	{Name: "NotFound", Run: testJournalNotFound},
	{Name: "Invalid", Run: testJournalInvalid},
	{Name: "RedriveClears", Run: testJournalRedrive},
	{Name: "PurgeDeletesSteps", Run: testJournalPurge},
}

// outboxCases are the subtests of inbox.Outbox, run when the inbox implements it (under
// "Outbox").
var outboxCases = []suite.Case[inbox.Outbox]{
	{Name: "PromoteDeferredOnly", Run: testPromote},
	{Name: "ClaimLeases", Run: testClaimLease},
	{Name: "ClaimOldestDueFirst", Run: testClaimOrder},
	{Name: "ConcurrentClaims", Run: testConcurrentClaims},
	{Name: "Settle", Run: testSettle},
	{Name: "StaleSettleIsLeaseLost", Run: testSettleStale},
	{Name: "UnfencedSettle", Run: testSettleUnfenced},
	{Name: "RedriveIntent", Run: testRedriveIntent},
	{Name: "Intents", Run: testIntents},
	{Name: "PurgeIntents", Run: testPurgeIntents},
	{Name: "Invalid", Run: testOutboxInvalid},
}

// txOutboxCases are the subtests of inbox.TxOutbox, run when the inbox implements it (under
// "PromoteTx").
var txOutboxCases = []suite.Case[inbox.TxOutbox]{
	{Name: "CommitAndRollback", Run: testPromoteTx},
}

// withSteps begins a request and records a step for each name, in order from ordinal 1; the
// names that start with "tool:" are deferred, with the payload "payload-NAME".
func withSteps(t *testing.T, j inbox.Journal, names ...string) inbox.Delivery {
	t.Helper()
	d := delivery(t, 1)
	begin(t, j, d)
	for i, n := range names {
		deferred := len(n) > 5 && n[:5] == "tool:"
		_, err := j.RecordStep(context.Background(), d.Key, inbox.Step{Ordinal: i + 1, Name: n, Output: []byte("payload-" + n), Deferred: deferred})
		require.NoError(t, err)
	}
	return d
}

func testJournalRecord(t *testing.T, j inbox.Journal) {
	ctx := context.Background()
	d := delivery(t, 1)
	begin(t, j, d)
	steps, err := j.Steps(ctx, d.Key)
	require.NoError(t, err)
	require.NotNil(t, steps)
	require.Empty(t, steps)

	out := []byte(`{"text":"hello"}`)
	for _, ord := range []int{2, 1, 3} { // out of order: Steps sorts by ordinal
		s := inbox.Step{Ordinal: ord, Name: fmt.Sprintf("step-%d", ord), Output: out, Deferred: ord == 3}
		got, err := j.RecordStep(ctx, d.Key, s)
		require.NoError(t, err)
		require.Equal(t, s.Name, got.Name)
		require.Equal(t, string(out), string(got.Output))
		require.Equal(t, s.Deferred, got.Deferred)
		requireRecentTime(t, got.At, "Step.At")
	}
	out[0] = 'X' // the journal keeps its own copy
	steps, err = j.Steps(ctx, d.Key)
	require.NoError(t, err)
	require.Len(t, steps, 3)
	for i, s := range steps {
		require.Equal(t, i+1, s.Ordinal)
		require.Equal(t, fmt.Sprintf("step-%d", i+1), s.Name)
		require.Equal(t, `{"text":"hello"}`, string(s.Output))
		require.Equal(t, i == 2, s.Deferred)
		requireRecentTime(t, s.At, "Step.At")
	}
	steps[0].Output[0] = 'Y' // nor does it share its copy
	again, err := j.Steps(ctx, d.Key)
	require.NoError(t, err)
	require.Equal(t, `{"text":"hello"}`, string(again[0].Output))

	other, err := j.Steps(ctx, "req-"+randID(t))
	require.NoError(t, err, "a key without steps (and without an entry) has none")
	require.Empty(t, other)
}

// testJournalFirstWriter: concurrent RecordSteps of one ordinal all get the first writer's
// step, and it is the one stored.
func testJournalFirstWriter(t *testing.T, j inbox.Journal) {
	ctx := context.Background()
	d := delivery(t, 1)
	begin(t, j, d)
	const n = 8
	got := make([]inbox.Step, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			got[i], errs[i] = j.RecordStep(ctx, d.Key, inbox.Step{Ordinal: 1, Name: "model", Output: fmt.Appendf(nil, "writer-%d", i)})
		})
	}
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i])
		require.Equal(t, string(got[0].Output), string(got[i].Output), "every writer gets the first writer's output")
		require.Equal(t, "model", got[i].Name)
	}
	steps, err := j.Steps(ctx, d.Key)
	require.NoError(t, err)
	require.Len(t, steps, 1)
	require.Equal(t, string(got[0].Output), string(steps[0].Output))

	// A writer after the fact gets the stored step too.
	late, err := j.RecordStep(ctx, d.Key, inbox.Step{Ordinal: 1, Name: "model", Output: []byte("late")})
	require.NoError(t, err)
	require.Equal(t, string(got[0].Output), string(late.Output))
}

func testJournalMismatch(t *testing.T, j inbox.Journal) {
	ctx := context.Background()
	d := withSteps(t, j, "model", "tool:refund")
	got, err := j.RecordStep(ctx, d.Key, inbox.Step{Ordinal: 1, Name: "tool:lookup", Output: []byte("x")})
	require.ErrorIs(t, err, inbox.ErrStepMismatch)
	require.Equal(t, "model", got.Name, "the stored step comes back with the mismatch")
	require.Equal(t, "payload-model", string(got.Output))

	got, err = j.RecordStep(ctx, d.Key, inbox.Step{Ordinal: 2, Name: "tool:refund", Output: []byte("x"), Deferred: false})
	require.ErrorIs(t, err, inbox.ErrStepMismatch, "a deferred step is not the same step as a run one")
	require.True(t, got.Deferred)

	steps, err := j.Steps(ctx, d.Key)
	require.NoError(t, err)
	require.Len(t, steps, 2)
	require.Equal(t, "model", steps[0].Name)
}

func testJournalNotFound(t *testing.T, j inbox.Journal) {
	_, err := j.RecordStep(context.Background(), "req-"+randID(t), inbox.Step{Ordinal: 1, Name: "model"})
	require.ErrorIs(t, err, inbox.ErrNotFound)
}

func testJournalInvalid(t *testing.T, j inbox.Journal) {
	ctx := context.Background()
	d := delivery(t, 1)
	begin(t, j, d)
	_, err := j.Steps(ctx, "")
	require.ErrorIs(t, err, inbox.ErrInvalid)
	for _, s := range []inbox.Step{{Ordinal: 0, Name: "model"}, {Ordinal: -1, Name: "model"}, {Ordinal: 1}} {
		_, err := j.RecordStep(ctx, d.Key, s)
		require.ErrorIs(t, err, inbox.ErrInvalid, "%+v", s)
	}
	_, err = j.RecordStep(ctx, "", inbox.Step{Ordinal: 1, Name: "model"})
	require.ErrorIs(t, err, inbox.ErrInvalid)
	steps, err := j.Steps(ctx, d.Key)
	require.NoError(t, err)
	require.Empty(t, steps)
}

func testJournalRedrive(t *testing.T, j inbox.Journal) {
	ctx := context.Background()
	d := withSteps(t, j, "model", "tool:refund")
	require.NoError(t, j.MarkDead(ctx, d.Key, "step mismatch"))
	_, err := j.Redrive(ctx, d.Key, "deployed the fix")
	require.NoError(t, err)
	steps, err := j.Steps(ctx, d.Key)
	require.NoError(t, err)
	require.Empty(t, steps, "a re-driven request runs its steps afresh")
	got, err := j.RecordStep(ctx, d.Key, inbox.Step{Ordinal: 1, Name: "tool:lookup", Output: []byte("new")})
	require.NoError(t, err)
	require.Equal(t, "new", string(got.Output))

	// Steps of a done request are kept (audit); a failed Redrive clears nothing.
	done := withSteps(t, j, "model")
	require.NoError(t, j.Complete(ctx, done.Key, []byte("r")))
	_, err = j.Redrive(ctx, done.Key, "")
	require.ErrorIs(t, err, inbox.ErrNotDead)
	steps, err = j.Steps(ctx, done.Key)
	require.NoError(t, err)
	require.Len(t, steps, 1)
}

func testJournalPurge(t *testing.T, j inbox.Journal) {
	ctx := context.Background()
	done := withSteps(t, j, "model", "tool:refund")
	live := withSteps(t, j, "model")
	require.NoError(t, j.Complete(ctx, done.Key, []byte("r")))
	_, err := j.Purge(ctx, time.Now().Add(time.Hour))
	require.NoError(t, err)
	steps, err := j.Steps(ctx, done.Key)
	require.NoError(t, err)
	require.Empty(t, steps, "a purged entry's steps go with it")
	steps, err = j.Steps(ctx, live.Key)
	require.NoError(t, err)
	require.Len(t, steps, 1, "an entry in progress keeps its steps")

	// A purged request delivered again runs its steps afresh.
	begin(t, j, done)
	got, err := j.RecordStep(ctx, done.Key, inbox.Step{Ordinal: 1, Name: "model", Output: []byte("again")})
	require.NoError(t, err)
	require.Equal(t, "again", string(got.Output))
}

func testPromote(t *testing.T, o inbox.Outbox) {
	ctx := context.Background()
	d := withSteps(t, o, "model", "tool:refund", "model", "tool:email")
	// through bounds the ordinals: the committed turn's last step was 3, so the deferred step
	// 4 (a zombie's, past the turn) stays a step.
	n, err := o.Promote(ctx, d.Key, 3)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the deferred steps up to through only")
	its, err := o.Intents(ctx, inbox.IntentFilter{Conversation: d.Conversation})
	require.NoError(t, err)
	require.Len(t, its, 1)
	require.Equal(t, 2, its[0].Ordinal)
	n, err = o.Promote(ctx, d.Key, 0)
	require.NoError(t, err)
	require.Equal(t, 1, n, "through < 1 promotes all, the rest now")
	n, err = o.Promote(ctx, d.Key, 0)
	require.NoError(t, err)
	require.Zero(t, n, "an intent is never promoted twice")
	d = withSteps(t, o, "model", "tool:refund", "model", "tool:email")
	n, err = o.Promote(ctx, d.Key, 0)
	require.NoError(t, err)
	require.Equal(t, 2, n, "the deferred steps only")
	n, err = o.Promote(ctx, d.Key, 0)
	require.NoError(t, err)
	require.Zero(t, n, "an intent is never promoted twice")

	its, err = o.Intents(ctx, inbox.IntentFilter{Conversation: d.Conversation})
	require.NoError(t, err)
	require.Len(t, its, 2)
	byID := map[string]inbox.Intent{}
	for _, it := range its {
		byID[it.ID] = it
	}
	for _, want := range []struct {
		ord  int
		name string
	}{{2, "tool:refund"}, {4, "tool:email"}} {
		it, ok := byID[inbox.IntentID(d.Key, want.ord)]
		require.True(t, ok, "intent of step %d", want.ord)
		require.Equal(t, d.Key, it.Key)
		require.Equal(t, d.Conversation, it.Conversation)
		require.Equal(t, want.ord, it.Ordinal)
		require.Equal(t, want.name, it.Name)
		require.Equal(t, "payload-"+want.name, string(it.Payload))
		require.Equal(t, inbox.IntentPending, it.Status)
		require.Zero(t, it.Attempts)
		require.Empty(t, it.Reason)
		requireRecentTime(t, it.NextAt, "NextAt")
		requireRecentTime(t, it.CreatedAt, "CreatedAt")
		requireRecentTime(t, it.UpdatedAt, "UpdatedAt")
	}

	none := withSteps(t, o, "model")
	n, err = o.Promote(ctx, none.Key, 0)
	require.NoError(t, err)
	require.Zero(t, n)
	n, err = o.Promote(ctx, "req-"+randID(t), 0)
	require.NoError(t, err, "a key without an entry promotes nothing")
	require.Zero(t, n)
}

// promoted begins a request with count deferred steps, promotes them and returns their ids
// by ordinal.
func promoted(t *testing.T, o inbox.Outbox, count int) (inbox.Delivery, []string) {
	t.Helper()
	names := make([]string, count)
	ids := make([]string, count)
	for i := range names {
		names[i] = fmt.Sprintf("tool:t%d", i+1)
	}
	d := withSteps(t, o, names...)
	n, err := o.Promote(context.Background(), d.Key, 0)
	require.NoError(t, err)
	require.Equal(t, count, n)
	for i := range ids {
		ids[i] = inbox.IntentID(d.Key, i+1)
	}
	return d, ids
}

func claimIDs(t *testing.T, o inbox.Outbox, n int, lease time.Duration) map[string]inbox.Intent {
	t.Helper()
	its, err := o.Claim(context.Background(), n, lease)
	require.NoError(t, err)
	out := map[string]inbox.Intent{}
	for _, it := range its {
		out[it.ID] = it
	}
	require.Len(t, out, len(its), "one intent twice in one claim")
	return out
}

func testClaimLease(t *testing.T, o inbox.Outbox) {
	_, ids := promoted(t, o, 2)
	got := claimIDs(t, o, 10, time.Hour)
	require.Len(t, got, 2)
	for _, id := range ids {
		it := got[id]
		require.Equal(t, 1, it.Attempts)
		require.Equal(t, inbox.IntentPending, it.Status)
		require.True(t, it.NextAt.After(time.Now().Add(30*time.Minute)), "due again at the lease's end: %s", it.NextAt)
	}
	require.Empty(t, claimIDs(t, o, 10, time.Hour), "a claimed intent is not claimed again before its lease ends")

	// An intent whose lease ends (Retry due now stands in for an hour passing) is claimed again.
	require.NoError(t, o.Retry(context.Background(), ids[0], got[ids[0]].Attempts, "relay died", time.Now().Add(-time.Second)))
	again := claimIDs(t, o, 10, 50*time.Millisecond)
	require.Len(t, again, 1)
	require.Equal(t, 2, again[ids[0]].Attempts)
	// and once its short lease ends, again.
	require.Eventually(t, func() bool {
		its, err := o.Claim(context.Background(), 10, time.Hour)
		return err == nil && len(its) == 1 && its[0].ID == ids[0] && its[0].Attempts == 3
	}, wait, 10*time.Millisecond)
}

const wait = time.Minute

func testClaimOrder(t *testing.T, o inbox.Outbox) {
	ctx := context.Background()
	_, ids := promoted(t, o, 3)
	require.NoError(t, o.Retry(ctx, ids[2], 0, "x", time.Now().Add(-2*time.Hour)))
	require.NoError(t, o.Retry(ctx, ids[0], 0, "x", time.Now().Add(-time.Hour)))
	require.NoError(t, o.Retry(ctx, ids[1], 0, "x", time.Now().Add(time.Hour)))
	got := claimIDs(t, o, 1, time.Hour)
	require.Contains(t, got, ids[2], "the oldest due first")
	got = claimIDs(t, o, 5, time.Hour)
	require.Len(t, got, 1)
	require.Contains(t, got, ids[0], "an intent not due yet is not claimed")
}

func testConcurrentClaims(t *testing.T, o inbox.Outbox) {
	const count, claimers = 30, 6
	_, ids := promoted(t, o, count)
	var (
		mu   sync.Mutex
		seen = map[string]int{}
		wg   sync.WaitGroup
		errs = make([]error, claimers)
	)
	for c := range claimers {
		wg.Go(func() {
			for {
				its, err := o.Claim(context.Background(), 4, time.Hour)
				if err != nil {
					errs[c] = err
					return
				}
				if len(its) == 0 {
					return
				}
				mu.Lock()
				for _, it := range its {
					seen[it.ID]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, seen, count)
	for _, id := range ids {
		require.Equal(t, 1, seen[id], "intent %s claimed %d times within its lease", id, seen[id])
	}
}

// testSettle: Delivered, Retry and Bury, and what a settled intent ignores.
func testSettle(t *testing.T, o inbox.Outbox) {
	ctx := context.Background()
	_, ids := promoted(t, o, 3)
	claimIDs(t, o, 10, time.Hour)
	const attempt = 1 // the claim's
	byID := func(id string) inbox.Intent {
		t.Helper()
		its, err := o.Intents(ctx, inbox.IntentFilter{})
		require.NoError(t, err)
		for _, it := range its {
			if it.ID == id {
				return it
			}
		}
		t.Fatalf("no intent %s", id)
		return inbox.Intent{}
	}

	at := time.Now().Add(10 * time.Minute).UTC().Truncate(time.Second)
	require.NoError(t, o.Retry(ctx, ids[0], attempt, "503 from the refund service", at))
	it := byID(ids[0])
	require.Equal(t, inbox.IntentPending, it.Status)
	require.Equal(t, "503 from the refund service", it.Reason)
	require.True(t, it.NextAt.Equal(at), "NextAt %s, want %s", it.NextAt, at)
	require.Equal(t, 1, it.Attempts)

	require.NoError(t, o.Bury(ctx, ids[1], attempt, "400: bad account"))
	it = byID(ids[1])
	require.Equal(t, inbox.IntentDead, it.Status)
	require.Equal(t, "400: bad account", it.Reason)
	require.NoError(t, o.Retry(ctx, ids[1], attempt, "late", time.Now()))
	require.Equal(t, inbox.IntentDead, byID(ids[1]).Status, "a dead intent stays dead on Retry")
	require.NotContains(t, claimIDs(t, o, 10, time.Hour), ids[1], "a dead intent is not claimed")

	require.NoError(t, o.Delivered(ctx, ids[2], attempt))
	require.Equal(t, inbox.IntentDelivered, byID(ids[2]).Status)
	require.NoError(t, o.Retry(ctx, ids[2], attempt, "late", time.Now().Add(-time.Hour)))
	require.NoError(t, o.Bury(ctx, ids[2], attempt, "late"))
	require.NoError(t, o.Delivered(ctx, ids[2], attempt))
	require.NoError(t, o.Bury(ctx, ids[2], 0, "late, unfenced"))
	it = byID(ids[2])
	require.Equal(t, inbox.IntentDelivered, it.Status, "a delivered intent ignores Retry and Bury")
	require.Empty(t, it.Reason)
	require.NotContains(t, claimIDs(t, o, 10, time.Hour), ids[2], "a delivered intent is not claimed")

	missing := inbox.IntentID("req-"+randID(t), 1)
	for _, a := range []int{0, 1} {
		require.ErrorIs(t, o.Delivered(ctx, missing, a), inbox.ErrNotFound)
		require.ErrorIs(t, o.Retry(ctx, missing, a, "x", time.Now()), inbox.ErrNotFound)
		require.ErrorIs(t, o.Bury(ctx, missing, a, "x"), inbox.ErrNotFound)
	}
}

// testSettleStale: a settle fenced on the attempt of an earlier claim (its lease ran out and
// the intent was claimed again) is ErrLeaseLost and changes nothing, whatever the intent's
// status.
func testSettleStale(t *testing.T, o inbox.Outbox) {
	ctx := context.Background()
	_, ids := promoted(t, o, 1)
	id := ids[0]
	first := claimIDs(t, o, 10, time.Hour)[id]
	require.Equal(t, 1, first.Attempts)
	// The first claim's lease ends (Retry due in the past stands in for an hour passing).
	require.NoError(t, o.Retry(ctx, id, first.Attempts, "lease ran out", time.Now().Add(-time.Second)))
	second := claimIDs(t, o, 10, time.Hour)[id]
	require.Equal(t, 2, second.Attempts)

	before := intentOf(t, o, id)
	for _, stale := range []int{first.Attempts, second.Attempts + 1} {
		require.ErrorIs(t, o.Retry(ctx, id, stale, "stale 503", time.Now().Add(-time.Hour)), inbox.ErrLeaseLost)
		require.ErrorIs(t, o.Bury(ctx, id, stale, "stale 400"), inbox.ErrLeaseLost)
		require.ErrorIs(t, o.Delivered(ctx, id, stale), inbox.ErrLeaseLost)
	}
	after := intentOf(t, o, id)
	require.Equal(t, inbox.IntentPending, after.Status)
	require.Equal(t, before.Attempts, after.Attempts)
	require.Equal(t, before.Reason, after.Reason, "a stale settle records no reason")
	require.True(t, after.NextAt.Equal(before.NextAt), "a stale settle leaves the live lease: NextAt %s, was %s", after.NextAt, before.NextAt)
	require.NotContains(t, claimIDs(t, o, 10, time.Hour), id, "the second claim's lease holds")

	require.NoError(t, o.Delivered(ctx, id, second.Attempts), "the live claim settles")
	require.ErrorIs(t, o.Bury(ctx, id, first.Attempts, "stale 400"), inbox.ErrLeaseLost)
	after = intentOf(t, o, id)
	require.Equal(t, inbox.IntentDelivered, after.Status, "a stale Bury does not undo the live claim's delivery")
	require.Equal(t, "lease ran out", after.Reason)
}

// testSettleUnfenced: attempt 0 settles whatever the intent's attempts (operators' tools).
func testSettleUnfenced(t *testing.T, o inbox.Outbox) {
	ctx := context.Background()
	_, ids := promoted(t, o, 3)
	claimIDs(t, o, 10, time.Hour)
	for _, id := range ids[:2] {
		require.NoError(t, o.Retry(ctx, id, 1, "lease ran out", time.Now().Add(-time.Second)))
	}
	got := claimIDs(t, o, 10, time.Hour)
	require.Len(t, got, 2)
	require.Equal(t, 2, got[ids[0]].Attempts)

	at := time.Now().Add(-time.Minute)
	require.NoError(t, o.Retry(ctx, ids[0], 0, "operator: retry now", at))
	it := intentOf(t, o, ids[0])
	require.Equal(t, inbox.IntentPending, it.Status)
	require.Equal(t, "operator: retry now", it.Reason)
	require.Equal(t, 2, it.Attempts)
	require.Contains(t, claimIDs(t, o, 10, time.Hour), ids[0], "due again")

	require.NoError(t, o.Bury(ctx, ids[1], 0, "operator: cancelled"))
	it = intentOf(t, o, ids[1])
	require.Equal(t, inbox.IntentDead, it.Status)
	require.Equal(t, "operator: cancelled", it.Reason)

	require.NoError(t, o.Delivered(ctx, ids[2], 0))
	require.Equal(t, inbox.IntentDelivered, intentOf(t, o, ids[2]).Status)
}

func testRedriveIntent(t *testing.T, o inbox.Outbox) {
	ctx := context.Background()
	_, ids := promoted(t, o, 2)
	claimIDs(t, o, 10, time.Hour)
	_, err := o.RedriveIntent(ctx, ids[0], "x")
	require.ErrorIs(t, err, inbox.ErrIntentNotDead, "a pending intent")
	require.NoError(t, o.Bury(ctx, ids[0], 1, "attempts ran out"))
	it, err := o.RedriveIntent(ctx, ids[0], "fixed the endpoint")
	require.NoError(t, err)
	require.Equal(t, inbox.IntentPending, it.Status)
	require.Zero(t, it.Attempts)
	require.Equal(t, "fixed the endpoint", it.Reason)
	require.Equal(t, ids[0], it.ID)
	_, err = o.RedriveIntent(ctx, ids[0], "again")
	require.ErrorIs(t, err, inbox.ErrIntentNotDead, "re-driven already")
	got := claimIDs(t, o, 10, time.Hour)
	require.Contains(t, got, ids[0], "a re-driven intent is due now")
	require.Equal(t, 1, got[ids[0]].Attempts)

	require.NoError(t, o.Delivered(ctx, ids[1], 1))
	_, err = o.RedriveIntent(ctx, ids[1], "x")
	require.ErrorIs(t, err, inbox.ErrIntentNotDead, "a delivered intent")
	_, err = o.RedriveIntent(ctx, inbox.IntentID("req-"+randID(t), 1), "x")
	require.ErrorIs(t, err, inbox.ErrNotFound)
}

func testIntents(t *testing.T, o inbox.Outbox) {
	ctx := context.Background()
	a, aIDs := promoted(t, o, 3)
	b, bIDs := promoted(t, o, 2)
	require.NoError(t, o.Bury(ctx, aIDs[0], 0, "x"))
	require.NoError(t, o.Delivered(ctx, bIDs[0], 0))

	count := func(f inbox.IntentFilter) int {
		t.Helper()
		its, err := o.Intents(ctx, f)
		require.NoError(t, err)
		for _, it := range its {
			if f.Status != 0 {
				require.Equal(t, f.Status, it.Status)
			}
			if f.Conversation != "" {
				require.Equal(t, f.Conversation, it.Conversation)
			}
		}
		return len(its)
	}
	require.Equal(t, 5, count(inbox.IntentFilter{}))
	require.Equal(t, 3, count(inbox.IntentFilter{Status: inbox.IntentPending}))
	require.Equal(t, 1, count(inbox.IntentFilter{Status: inbox.IntentDead}))
	require.Equal(t, 1, count(inbox.IntentFilter{Status: inbox.IntentDelivered}))
	require.Equal(t, 3, count(inbox.IntentFilter{Conversation: a.Conversation}))
	require.Equal(t, 1, count(inbox.IntentFilter{Conversation: b.Conversation, Status: inbox.IntentPending}))
	require.Equal(t, 0, count(inbox.IntentFilter{Conversation: "conv-" + randID(t)}))
	require.Equal(t, 2, count(inbox.IntentFilter{Limit: 2}))

	its, err := o.Intents(ctx, inbox.IntentFilter{})
	require.NoError(t, err)
	for i := 1; i < len(its); i++ {
		require.False(t, its[i].CreatedAt.Before(its[i-1].CreatedAt), "oldest first")
	}
}

func testPurgeIntents(t *testing.T, o inbox.Outbox) {
	ctx := context.Background()
	d, ids := promoted(t, o, 3)
	require.NoError(t, o.Complete(ctx, d.Key, []byte("r")))
	require.NoError(t, o.Delivered(ctx, ids[0], 0))
	require.NoError(t, o.Bury(ctx, ids[1], 0, "x"))

	n, err := o.Purge(ctx, time.Now().Add(-time.Hour))
	require.NoError(t, err)
	require.Zero(t, n, "nothing is older than an hour ago")
	n, err = o.Purge(ctx, time.Now().Add(time.Hour))
	require.NoError(t, err)
	require.EqualValues(t, 3, n, "the entry, the delivered and the dead intent")
	its, err := o.Intents(ctx, inbox.IntentFilter{})
	require.NoError(t, err)
	require.Len(t, its, 1, "a pending intent is never purged")
	require.Equal(t, ids[2], its[0].ID)
	require.Equal(t, inbox.IntentPending, its[0].Status)
}

func testOutboxInvalid(t *testing.T, o inbox.Outbox) {
	ctx := context.Background()
	_, err := o.Promote(ctx, "", 0)
	require.ErrorIs(t, err, inbox.ErrInvalid)
	_, err = o.Claim(ctx, 0, time.Minute)
	require.ErrorIs(t, err, inbox.ErrInvalid)
	_, err = o.Claim(ctx, 1, 0)
	require.ErrorIs(t, err, inbox.ErrInvalid)
	require.ErrorIs(t, o.Delivered(ctx, "", 0), inbox.ErrInvalid)
	require.ErrorIs(t, o.Retry(ctx, "", 0, "x", time.Now()), inbox.ErrInvalid)
	require.ErrorIs(t, o.Bury(ctx, "", 0, "x"), inbox.ErrInvalid)
	_, ids := promoted(t, o, 1)
	require.ErrorIs(t, o.Delivered(ctx, ids[0], -1), inbox.ErrInvalid)
	require.ErrorIs(t, o.Retry(ctx, ids[0], -1, "x", time.Now()), inbox.ErrInvalid)
	require.ErrorIs(t, o.Bury(ctx, ids[0], -1, "x"), inbox.ErrInvalid)
	_, err = o.RedriveIntent(ctx, "", "x")
	require.ErrorIs(t, err, inbox.ErrInvalid)
	_, err = o.Intents(ctx, inbox.IntentFilter{Limit: -1})
	require.ErrorIs(t, err, inbox.ErrInvalid)
	_, err = o.Intents(ctx, inbox.IntentFilter{Status: 99})
	require.ErrorIs(t, err, inbox.ErrInvalid)
}

// testPromoteTx: intents promoted in a transaction exist once it commits, and not when it
// rolls back.
func testPromoteTx(t *testing.T, o inbox.TxOutbox) {
	ctx := context.Background()
	d := withSteps(t, o, "model", "tool:refund")
	promoteIn := func(commit bool) int {
		t.Helper()
		tx, err := o.TxDB().BeginTx(ctx, nil)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback() }()
		n, err := o.PromoteTx(ctx, tx, d.Key, 0)
		require.NoError(t, err)
		require.NoError(t, o.CompleteTx(ctx, tx, d.Key, []byte("r")))
		if commit {
			require.NoError(t, tx.Commit())
		}
		return n
	}
	require.Equal(t, 1, promoteIn(false))
	its, err := o.Intents(ctx, inbox.IntentFilter{Conversation: d.Conversation})
	require.NoError(t, err)
	require.Empty(t, its, "a rolled back promotion leaves no intent")
	require.Equal(t, inbox.StatusInProgress, getEntry(t, o, d.Key).Status)

	require.Equal(t, 1, promoteIn(true))
	its, err = o.Intents(ctx, inbox.IntentFilter{Conversation: d.Conversation})
	require.NoError(t, err)
	require.Len(t, its, 1)
	require.Equal(t, inbox.IntentID(d.Key, 2), its[0].ID)
	require.Equal(t, inbox.StatusDone, getEntry(t, o, d.Key).Status)

	_, err = o.PromoteTx(ctx, nil, d.Key, 0)
	require.ErrorIs(t, err, inbox.ErrInvalid)
}
