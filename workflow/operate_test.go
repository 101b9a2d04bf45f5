package workflow

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"

	"github.com/turnstile-go/turnstile/deadletter"
	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/internal/record"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turntest"
)

// gapLetters returns the sequences of the gap dead letters p received, in order.
func (p *recordingPublisher) gapLetters() []int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []int64
	for i, dl := range p.deadLetters {
		if dl.Reason == GapReason {
			out = append(out, p.deadEnvs[i].Request.Sequence)
		}
	}
	return out
}

// unitEnvironment returns a testsuite environment with u's worker registered.
func unitEnvironment(t *testing.T, u *unit) *testsuite.TestWorkflowEnvironment {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	require.NoError(t, Register(env, u.opts))
	return env
}

// execute runs the conversation workflow from st in env until it ends, without an error.
func execute(t *testing.T, env *testsuite.TestWorkflowEnvironment, st State) {
	t.Helper()
	env.ExecuteWorkflow(WorkflowName, st)
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
}

// A request dead-lettered by its turn, re-driven after the fix (its inbox entry re-driven, the
// record sent again with Envelope.RedrivenFrom), runs one new turn with one result and its
// inbox entry ends done, although the conversation applied it (as a dead letter) and moved on;
// a second copy of the re-drive publishes nothing, and a plain duplicate is still dropped.
func TestRedriveRunsAgainAfterTheFix(t *testing.T) {
	t.Parallel()
	u := newUnit(t)
	const conv = "c-redrive"
	r1, r2 := request(conv, 1, "one"), request(conv, 2, "two")
	var broken atomic.Bool
	broken.Store(true)
	u.model.errFunc = func(in turn.Input) error {
		if in.Request.ID == r1.ID && broken.Load() {
			return turn.Permanent(context.DeadlineExceeded)
		}
		return nil
	}
	redriven := Envelope{Request: r1, RedrivenFrom: "dlq/0/0"}
	env := unitEnvironment(t, u)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalName, batchOf(r1, r2)) }, time.Second)
	env.RegisterDelayedCallback(func() {
		_, dead := u.publisher.deadLetterOf(r1.ID)
		require.True(t, dead, "r1 dead-lettered")
		broken.Store(false)
		_, err := u.inbox.Redrive(context.Background(), u.runner.InboxKey(r1), "fixed")
		require.NoError(t, err)
		env.SignalWorkflow(SignalName, Batch{Envelopes: []Envelope{redriven}})
	}, time.Minute)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalName, Batch{Envelopes: []Envelope{redriven}}) }, 2*time.Minute)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalName, batchOf(r1)) }, 3*time.Minute)
	var st Status
	env.RegisterDelayedCallback(func() { st = queryStatus(t, env) }, 4*time.Minute)
	execute(t, env, State{ConversationID: conv, Config: Config{IdleTimeout: time.Hour}})

	require.Equal(t, []string{r1.ID, r2.ID, r1.ID}, u.model.ids(), "one new turn for the re-drive, none for its second copy or the duplicate")
	require.Equal(t, []string{r2.ID, r1.ID}, u.publisher.resultIDs(), "one result for the re-driven request")
	e, err := u.inbox.Get(context.Background(), u.runner.InboxKey(r1))
	require.NoError(t, err)
	require.Equal(t, inbox.StatusDone, e.Status)
	require.Equal(t, int64(2), st.LastAppliedSequence, "the re-drive below the mark does not move it")
	require.Zero(t, st.Pending)
	require.Equal(t, int64(3), st.Applied, "two turns and the re-drive")
}

// releaseCall is the outcome of a release update sent in a testsuite environment, filled in
// when the update completes.
type releaseCall struct {
	out  Released
	err  error
	done bool
}

// sendRelease sends the release update on env; its outcome lands in the returned call.
func sendRelease(env *testsuite.TestWorkflowEnvironment, reason string) *releaseCall {
	c := &releaseCall{}
	env.UpdateWorkflow(ReleaseUpdateName, "release-"+reason, &testsuite.TestUpdateCallback{
		OnAccept: func() {},
		OnReject: func(err error) { c.err, c.done = err, true },
		OnComplete: func(v any, err error) {
			c.err, c.done = err, true
			if r, ok := v.(Released); ok {
				c.out = r
			}
		},
	}, Release{Reason: reason})
	return c
}

// A gap held at 2 and 4 (1, 3, 5 sent) shows in the status as held with the missing sequences;
// the release update skips 2 and 4 (a gap dead letter each) and the held requests apply in
// order; a release of a conversation that is not held is rejected.
func TestReleaseUpdateSkipsTheGaps(t *testing.T) {
	t.Parallel()
	u := newUnit(t)
	const conv = "c-release"
	r1, r3, r5 := request(conv, 1, "one"), request(conv, 3, "three"), request(conv, 5, "five")
	env := unitEnvironment(t, u)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalName, batchOf(r1, r3, r5)) }, time.Second)
	var held, after Status
	var first, second *releaseCall
	env.RegisterDelayedCallback(func() { held = queryStatus(t, env) }, time.Minute)
	env.RegisterDelayedCallback(func() { first = sendRelease(env, "ops") }, 2*time.Minute)
	env.RegisterDelayedCallback(func() { after = queryStatus(t, env) }, 3*time.Minute)
	env.RegisterDelayedCallback(func() { second = sendRelease(env, "again") }, 4*time.Minute)
	execute(t, env, State{ConversationID: conv, Config: Config{IdleTimeout: time.Hour}})

	require.True(t, held.Held)
	require.Equal(t, []int64{2, 4}, held.Missing)
	require.Equal(t, int64(2), held.MissingCount)
	require.False(t, held.HeldSince.IsZero())
	require.True(t, first.done)
	require.NoError(t, first.err)
	require.Equal(t, Released{Skipped: []int64{2, 4}, Count: 2, LastAppliedSequence: 5}, first.out)
	require.Equal(t, []int64{1, 3, 5}, u.model.sequences(), "the held requests apply in order")
	require.Equal(t, []int64{2, 4}, u.publisher.gapLetters(), "a gap dead letter per skipped sequence")
	require.False(t, after.Held)
	require.Equal(t, int64(5), after.LastAppliedSequence)
	require.Equal(t, int64(2), after.Skipped)
	require.True(t, second.done)
	require.ErrorContains(t, second.err, "not held at a gap")
}

// With Config.GapTimeout, a gap is released once the conversation has been held that long; a
// request of the skipped sequence that comes later is dead-lettered as skipped.
func TestGapTimeoutReleases(t *testing.T) {
	t.Parallel()
	u := newUnit(t)
	const conv = "c-gap-timeout"
	r1, r2, r3 := request(conv, 1, "one"), request(conv, 2, "late"), request(conv, 3, "three")
	env := unitEnvironment(t, u)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalName, batchOf(r1, r3)) }, time.Second)
	var before, after Status
	env.RegisterDelayedCallback(func() { before = queryStatus(t, env) }, 5*time.Minute)
	env.RegisterDelayedCallback(func() { after = queryStatus(t, env) }, 11*time.Minute)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalName, batchOf(r2)) }, 12*time.Minute)
	execute(t, env, State{ConversationID: conv, Config: Config{IdleTimeout: time.Hour, GapTimeout: 10 * time.Minute}})

	require.True(t, before.Held, "held before the gap timeout")
	require.Equal(t, []int64{2}, before.Missing)
	require.False(t, after.Held, "released after it")
	require.Equal(t, int64(3), after.LastAppliedSequence)
	require.Equal(t, []int64{1, 3}, u.model.sequences())
	require.Equal(t, []int64{2}, u.publisher.gapLetters())
	reason, ok := u.publisher.deadLetterOf(r2.ID)
	require.True(t, ok, "the late request of the skipped sequence is dead-lettered")
	require.Contains(t, reason, "skipped as a gap")
}

// flakyGapPublisher publishes through pub and fails the first dead letter of sequence failAt
// once, unpublished, so that the ReportGap activity is retried after it published the
// sequences before.
type flakyGapPublisher struct {
	Publisher
	failAt int64
	failed atomic.Bool
}

func (p *flakyGapPublisher) PublishDeadLetter(ctx context.Context, env Envelope, dl DeadLetter) error {
	if env.Request.Sequence == p.failAt && p.failed.CompareAndSwap(false, true) {
		return errors.New("broker away")
	}
	return p.Publisher.PublishDeadLetter(ctx, env, dl)
}

// A gap report retried after it published part of the gap (2 and 3 of 2 to 4, then the broker
// fails) puts 2 and 3 on the dead-letter topic twice; each copy carries the same request id,
// record.GapRequestID of the workflow and the sequence, so a reader that dedups dead letters
// on their request id reads one per skipped sequence.
func TestRetriedGapReportDedupsByRequestID(t *testing.T) {
	t.Parallel()
	cluster := turntest.NewCluster(t, turntest.Options{})
	dlq := cluster.CreateTopic(t, "dlq", 1)
	pub, err := NewKafkaPublisher(cluster.Brokers(), cluster.Config(), cluster.CreateTopic(t, "results", 1), dlq)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	flaky := &flakyGapPublisher{Publisher: pub, failAt: 4}
	u := newUnit(t)
	u.opts.Publisher = flaky
	const conv = "c-gap-retried"
	env := unitEnvironment(t, u)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(SignalName, batchOf(request(conv, 1, "one"), request(conv, 5, "five")))
	}, time.Second)
	var released *releaseCall
	env.RegisterDelayedCallback(func() { released = sendRelease(env, "ops") }, time.Minute)
	execute(t, env, State{ConversationID: conv, Config: Config{IdleTimeout: time.Hour}})
	require.True(t, released.done)
	require.NoError(t, released.err)
	require.Equal(t, []int64{2, 3, 4}, released.out.Skipped)
	require.True(t, flaky.failed.Load(), "the report failed once and was retried")

	client, err := sarama.NewClient(cluster.Brokers(), cluster.Config())
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	var letters []deadletter.Letter
	require.Eventually(t, func() bool {
		letters, err = deadletter.Read(context.Background(), client, dlq, deadletter.Filter{Reason: GapReason})
		return err == nil && len(letters) == 5
	}, publishWait, 50*time.Millisecond, "2 and 3 twice, 4 once")
	bySequence := map[int64][]string{}
	unique := map[string]deadletter.Letter{}
	for _, l := range letters {
		require.Equal(t, deadletter.OriginGap, l.Origin)
		require.NotEmpty(t, l.WorkflowID)
		require.Equal(t, record.GapRequestID(l.WorkflowID, l.Sequence), l.RequestID, "the gap's identity")
		bySequence[l.Sequence] = append(bySequence[l.Sequence], l.RequestID)
		unique[l.RequestID] = l
	}
	require.Len(t, bySequence[2], 2)
	require.Equal(t, bySequence[2][0], bySequence[2][1], "both copies of 2 carry one id")
	require.Equal(t, bySequence[3][0], bySequence[3][1], "both copies of 3 carry one id")
	require.Len(t, unique, 3, "deduped on the request id: one dead letter per skipped sequence")
	var seqs []int64
	for _, l := range unique {
		seqs = append(seqs, l.Sequence)
	}
	require.ElementsMatch(t, []int64{2, 3, 4}, seqs)
}
