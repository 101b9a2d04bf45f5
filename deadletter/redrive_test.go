package deadletter_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/deadletter"
	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
	"github.com/turnstile-go/turnstile/internal/sqltest"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turntest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, turntest.LeakOptions()...) }

const wait = time.Minute

var quiet = slog.New(slog.DiscardHandler)

// service is a production service whose model has a bug until fixed is set: it refuses
// requests that mention "refund" for good (turn.Permanent), so they are dead-lettered.
type service struct {
	kc                     *turntest.Cluster
	requests, results, dlq string
	group                  string
	inbox                  *sqlinbox.Inbox
	fixed                  atomic.Bool
	mu                     sync.Mutex
	calls                  map[string]int // model calls after the fix, by request id
}

func newService(t *testing.T) *service {
	t.Helper()
	kc := turntest.NewCluster(t, turntest.Options{})
	s := &service{kc: kc, requests: kc.CreateTopic(t, "requests", 3), results: kc.CreateTopic(t, "results", 3),
		dlq: kc.Unique("dlq"), group: kc.Unique("svc"), calls: map[string]int{}}
	// The dead-letter topic takes records of 4 KiB at most: a larger request is dead-lettered
	// without its value.
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	_, err := turntest.CreateTopics(ctx, kc.Brokers(), nil, turntest.Topic{Name: s.dlq, Partitions: 3,
		Configs: map[string]string{"max.message.bytes": "4096"}})
	require.NoError(t, err)
	db := sqltest.SQLiteFile(t)
	s.inbox, err = sqlinbox.New(db, sqlinbox.SQLite, sqlinbox.Options{})
	require.NoError(t, err)
	require.NoError(t, s.inbox.Migrate(context.Background()))

	model := turn.ModelFunc(func(_ context.Context, in turn.Input) (turn.Output, error) {
		if !s.fixed.Load() {
			if strings.Contains(in.Request.Text, "refund") {
				return turn.Output{}, turn.Permanent(errors.New("bug 42: the refund tool is misconfigured"))
			}
		} else {
			s.mu.Lock()
			s.calls[in.Request.ID]++
			s.mu.Unlock()
		}
		return turn.Output{Events: []session.Event{{Text: "answered " + in.Request.ID}}}, nil
	})
	r := &turn.Runner{Model: model, Sessions: session.NewMemoryStore(), Inbox: s.inbox, Logger: quiet}
	c, err := consumer.New(consumer.Config{Brokers: kc.Brokers(), GroupID: s.group, RequestsTopic: s.requests,
		ResultsTopic: s.results, DeadLetterTopic: s.dlq, Sarama: kc.Config(), CommitInterval: 100 * time.Millisecond,
		Logger: quiet}, consumer.RunnerHandler(r))
	require.NoError(t, err)
	rctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(rctx) }()
	t.Cleanup(func() { stop(); require.NoError(t, <-done) })
	return s
}

// deadLettered produces a request the service's bug dead-letters, reads its dead letter, and
// fixes the bug.
func (s *service) deadLettered(t *testing.T, conversation, text string) (turn.Request, []deadletter.Letter) {
	t.Helper()
	req := turntest.NewRequest(conversation, "u-"+conversation, text)
	s.kc.ProduceRequest(t, s.requests, req)
	letters := s.kc.ReadDeadLetters(t, s.dlq, 1, wait)
	s.fixed.Store(true)
	return req, letters
}

func (s *service) callsOf(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[id]
}

// drained waits until the service has committed every record of the requests topic.
func (s *service) drained(t *testing.T) {
	t.Helper()
	client := s.client(t)
	require.Eventually(t, func() bool {
		parts, err := client.Partitions(s.requests)
		require.NoError(t, err)
		for _, p := range parts {
			end, err := client.GetOffset(s.requests, p, sarama.OffsetNewest)
			require.NoError(t, err)
			if end > 0 && s.kc.CommittedOffset(t, s.group, s.requests, p) < end {
				return false
			}
		}
		return true
	}, wait, 20*time.Millisecond, "the service did not commit the requests topic to its end")
}

func (s *service) client(t *testing.T) sarama.Client {
	t.Helper()
	client, err := sarama.NewClient(s.kc.Brokers(), s.kc.Config())
	require.NoError(t, err)
	t.Cleanup(func() { client.Close() })
	return client
}

// A request dead-lettered for a bug that is then fixed runs once when re-driven; re-driving
// it again runs nothing; the inbox's audit keeps the old reason. A request whose dead letter
// lost its value (too large for the dead-letter topic) is re-driven from its source record.
func TestRedriveAfterTheFix(t *testing.T) {
	t.Parallel()
	s := newService(t)
	ctx := context.Background()
	small := turntest.NewRequest("c-1", "u-1", "where is my refund?")
	large := turntest.NewRequest("c-2", "u-2", "refund please: "+strings.Repeat("x", 8<<10))
	fine := turntest.NewRequest("c-3", "u-3", "hello")
	for _, req := range []turn.Request{small, large, fine} {
		s.kc.ProduceRequest(t, s.requests, req)
	}
	letters := s.kc.ReadDeadLetters(t, s.dlq, 2, wait)
	s.kc.ReadResults(t, s.results, 1, wait)
	byID := map[string]deadletter.Letter{}
	for _, l := range letters {
		byID[l.RequestID] = l
		require.Contains(t, l.Reason, "bug 42")
		require.Equal(t, s.requests, l.Source.Topic)
	}
	require.NotEmpty(t, byID[small.ID].Value)
	require.Empty(t, byID[small.ID].ValueDropped)
	require.Nil(t, byID[large.ID].Value, "the dead-letter topic refused the large value")
	require.Contains(t, byID[large.ID].ValueDropped, "bytes; refused")

	// List with filters, as an operator does before re-driving.
	client := s.client(t)
	all, err := deadletter.Read(ctx, client, s.dlq, deadletter.Filter{Reason: "bug 42"})
	require.NoError(t, err)
	require.Len(t, all, 2)
	one, err := deadletter.Read(ctx, client, s.dlq, deadletter.Filter{RequestID: large.ID})
	require.NoError(t, err)
	require.Len(t, one, 1)
	src := byID[small.ID].Source
	bySource, err := deadletter.Read(ctx, client, s.dlq, deadletter.Filter{SourcePartition: &src.Partition, SourceOffset: &src.Offset})
	require.NoError(t, err)
	require.Len(t, bySource, 1)
	require.Equal(t, small.ID, bySource[0].RequestID)
	none, err := deadletter.Read(ctx, client, s.dlq, deadletter.Filter{Since: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	require.Empty(t, none)

	s.fixed.Store(true)
	opts := deadletter.Options{Client: client, Inbox: s.inbox, Note: "bug 42 fixed", Logger: quiet}
	outcomes, err := deadletter.Redrive(ctx, opts, all)
	require.NoError(t, err)
	require.Len(t, outcomes, 2)
	for _, o := range outcomes {
		require.NoError(t, o.Err)
		require.Equal(t, deadletter.Redriven, o.Action)
		require.Equal(t, o.Letter.Source.Partition, o.Partition, "back on its source partition")
	}
	results := s.kc.ReadResults(t, s.results, 3, wait)
	answered := map[string]string{}
	for _, r := range results {
		answered[r.RequestID] = r.Text
	}
	for _, req := range []turn.Request{small, large} {
		require.Equal(t, "answered "+req.ID, answered[req.ID])
		require.Equal(t, 1, s.callsOf(req.ID), "the re-driven request ran once")
		e, err := s.inbox.Get(ctx, turn.InboxKey(turn.DefaultApp, req))
		require.NoError(t, err)
		require.Equal(t, inbox.StatusDone, e.Status)
		require.Len(t, e.Redrives, 1)
		require.Contains(t, e.Redrives[0].Reason, "bug 42", "the audit keeps the old reason")
		require.Equal(t, "bug 42 fixed", e.Redrives[0].Note)
	}

	// Again: nothing runs, nothing is published.
	published := s.kc.RecordCount(t, s.requests)
	outcomes, err = deadletter.Redrive(ctx, opts, all)
	require.NoError(t, err)
	for _, o := range outcomes {
		require.NoError(t, o.Err)
		require.Equal(t, deadletter.SkippedDone, o.Action)
	}
	require.Equal(t, published, s.kc.RecordCount(t, s.requests))
	require.Equal(t, 1, s.callsOf(small.ID))
	require.Equal(t, 1, s.callsOf(large.ID))
}

// A re-drive that stopped between the inbox and the publish is finished by the next one, and
// the request still runs once.
func TestRedriveFinishesAnInterruptedRedrive(t *testing.T) {
	t.Parallel()
	s := newService(t)
	ctx := context.Background()
	req, letters := s.deadLettered(t, "c-9", "refund order A-9")
	// The first re-drive re-drove the inbox entry and died before publishing.
	_, err := s.inbox.Redrive(ctx, turn.InboxKey(turn.DefaultApp, req), "interrupted")
	require.NoError(t, err)

	outcomes, err := deadletter.Redrive(ctx, deadletter.Options{Client: s.client(t), Inbox: s.inbox, Logger: quiet}, letters)
	require.NoError(t, err)
	require.Equal(t, deadletter.Republished, outcomes[0].Action)
	require.NoError(t, outcomes[0].Err)
	res := s.kc.ReadResults(t, s.results, 1, wait)
	require.Equal(t, req.ID, res[0].RequestID)
	require.Equal(t, 1, s.callsOf(req.ID))
	e, err := s.inbox.Get(ctx, turn.InboxKey(turn.DefaultApp, req))
	require.NoError(t, err)
	require.Len(t, e.Redrives, 1, "one re-drive in the audit")
	require.Equal(t, inbox.StatusDone, e.Status)
}

// Two operators re-drive the same dead letter at once: one re-drive wins the inbox entry,
// the other finds it re-driven (and publishes the request again, or skips it when it already
// began), and the request runs once.
func TestConcurrentRedrivesRunOnce(t *testing.T) {
	t.Parallel()
	s := newService(t)
	ctx := context.Background()
	req, letters := s.deadLettered(t, "c-5", "refund order A-5")

	opts := deadletter.Options{Client: s.client(t), Inbox: s.inbox, Note: "bug 42 fixed", Logger: quiet}
	var (
		wg       sync.WaitGroup
		outcomes [2][]deadletter.Outcome
		errs     [2]error
	)
	start := make(chan struct{})
	for i := range 2 {
		wg.Go(func() {
			<-start
			outcomes[i], errs[i] = deadletter.Redrive(ctx, opts, letters)
		})
	}
	close(start)
	wg.Wait()
	var actions []deadletter.Action
	for i := range 2 {
		require.NoError(t, errs[i])
		require.Len(t, outcomes[i], 1)
		require.NoError(t, outcomes[i][0].Err)
		actions = append(actions, outcomes[i][0].Action)
	}
	won := 0
	for _, a := range actions {
		if a == deadletter.Redriven {
			won++
			continue
		}
		require.Contains(t, []deadletter.Action{deadletter.Republished, deadletter.SkippedRunning, deadletter.SkippedDone}, a)
	}
	require.Equal(t, 1, won, "one re-drive wins the inbox entry: %v", actions)

	s.kc.ReadResults(t, s.results, 1, wait)
	s.drained(t) // every copy published has been consumed and answered
	require.Equal(t, 1, s.callsOf(req.ID), "the request ran once")
	e, err := s.inbox.Get(ctx, turn.InboxKey(turn.DefaultApp, req))
	require.NoError(t, err)
	require.Equal(t, inbox.StatusDone, e.Status)
	require.Len(t, e.Redrives, 1, "one re-drive in the audit")
}

// A re-drive under another app than the service's finds no inbox entry for a request that
// spent attempts: it says so (NoInboxEntry, a warning), and the service, whose entry is still
// dead, dead-letters the request again without running it.
func TestRedriveUnderAnotherAppIsFlagged(t *testing.T) {
	t.Parallel()
	s := newService(t)
	ctx := context.Background()
	req, letters := s.deadLettered(t, "c-7", "refund order A-7")
	require.Positive(t, letters[0].Attempts)

	var logs strings.Builder
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logs.Write(p)
	}), nil))
	outcomes, err := deadletter.Redrive(ctx, deadletter.Options{Client: s.client(t), Inbox: s.inbox, App: "another-app", Logger: logger}, letters)
	require.NoError(t, err)
	require.NoError(t, outcomes[0].Err)
	require.True(t, deadletter.NoInboxEntry(outcomes[0]))
	mu.Lock()
	require.Contains(t, logs.String(), "Options.App is not the service's Runner.App")
	mu.Unlock()

	again := s.kc.ReadDeadLetters(t, s.dlq, 2, wait)
	require.Equal(t, req.ID, again[len(again)-1].RequestID)
	require.Zero(t, s.callsOf(req.ID), "the service did not run it: its entry is still dead")

	// Under the service's app the same dead letter is re-driven for real.
	outcomes, err = deadletter.Redrive(ctx, deadletter.Options{Client: s.client(t), Inbox: s.inbox, Logger: quiet}, letters[:1])
	require.NoError(t, err)
	require.False(t, deadletter.NoInboxEntry(outcomes[0]))
	require.Equal(t, deadletter.Redriven, outcomes[0].Action)
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// A re-drive whose context ends stops, and says how far it got.
func TestRedriveStopsWhenItsContextEnds(t *testing.T) {
	t.Parallel()
	kc := turntest.NewCluster(t, turntest.Options{})
	requests := kc.CreateTopic(t, "requests", 1)
	client, err := sarama.NewClient(kc.Brokers(), kc.Config())
	require.NoError(t, err)
	defer client.Close()
	var letters []deadletter.Letter
	for i := range 3 {
		v, err := turntest.NewRequest("c", "u", "refund").Encode()
		require.NoError(t, err)
		letters = append(letters, deadletter.Letter{Topic: "dlq", Offset: int64(i), Key: []byte("c"), Value: v, Attempts: 1,
			Source: turn.Source{Topic: requests, Offset: int64(i)}})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	outcomes, err := deadletter.Redrive(ctx, deadletter.Options{Client: client, Inbox: inbox.NewMemoryInbox(), Logger: quiet}, letters)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorContains(t, err, "stopped after 1 of 3 dead letters")
	require.Len(t, outcomes, 1)
	require.Error(t, outcomes[0].Err)
	require.Zero(t, kc.RecordCount(t, requests), "nothing published")
}

// Redrive refuses what can never pass, the dry run as the real run, before it touches the
// inbox: a record over the client's Producer.MaxMessageBytes (ErrTooLarge) and a request the
// consumer refuses (ErrNeverPasses: no user id, a key that is not its conversation), unless
// Options.Force.
func TestRedriveRefusesWhatCanNeverPass(t *testing.T) {
	t.Parallel()
	kc := turntest.NewCluster(t, turntest.Options{})
	requests := kc.CreateTopic(t, "requests", 1)
	client, err := sarama.NewClient(kc.Brokers(), kc.Config())
	require.NoError(t, err)
	defer client.Close()
	letter := func(offset int64, key string, req turn.Request) deadletter.Letter {
		v, err := req.Encode()
		require.NoError(t, err)
		return deadletter.Letter{Topic: "dlq", Offset: offset, Key: []byte(key), Value: v, Attempts: 1, RequestID: req.ID,
			Source: turn.Source{Topic: requests, Offset: offset}}
	}
	noUser := turntest.NewRequest("c-1", "", "hi")
	letters := []deadletter.Letter{
		letter(0, "c-1", turntest.NewRequest("c-1", "u", strings.Repeat("x", 2000))),
		letter(1, "c-1", noUser),
		letter(2, "c-other", turntest.NewRequest("c-1", "u", "hi")),
	}
	client.Config().Producer.MaxMessageBytes = 1500
	ib := inbox.NewMemoryInbox()
	for _, dry := range []bool{true, false} {
		outcomes, err := deadletter.Redrive(context.Background(), deadletter.Options{Client: client, Inbox: ib, Logger: quiet, DryRun: dry}, letters)
		require.NoError(t, err)
		require.ErrorIs(t, outcomes[0].Err, deadletter.ErrTooLarge, "dry run %t", dry)
		require.ErrorIs(t, outcomes[1].Err, deadletter.ErrNeverPasses)
		require.ErrorContains(t, outcomes[1].Err, "user_id")
		require.ErrorIs(t, outcomes[2].Err, deadletter.ErrNeverPasses)
		require.ErrorContains(t, outcomes[2].Err, "differs from conversation_id")
	}
	require.Zero(t, kc.RecordCount(t, requests), "nothing published")
	outcomes, err := deadletter.Redrive(context.Background(), deadletter.Options{Client: client, Inbox: ib, Logger: quiet, Force: true}, letters[1:])
	require.NoError(t, err)
	for _, o := range outcomes {
		require.NoError(t, o.Err)
		require.Equal(t, deadletter.Redriven, o.Action)
	}
	require.EqualValues(t, 2, kc.RecordCount(t, requests), "forced")
}

// The dry run refuses a record over the requests topic's max.message.bytes, which the broker
// refuses in the real run, even within the producer's limit.
func TestRedriveDryRunChecksTheTopicLimit(t *testing.T) {
	t.Parallel()
	kc := turntest.NewCluster(t, turntest.Options{})
	requests := kc.Unique("requests")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	_, err := turntest.CreateTopics(ctx, kc.Brokers(), nil, turntest.Topic{Name: requests, Partitions: 1,
		Configs: map[string]string{"max.message.bytes": "2000"}})
	require.NoError(t, err)
	client, err := sarama.NewClient(kc.Brokers(), kc.Config())
	require.NoError(t, err)
	defer client.Close()
	var letters []deadletter.Letter
	for i, text := range []string{strings.Repeat("x", 3000), "small"} {
		v, err := turntest.NewRequest("c-1", "u", text).Encode()
		require.NoError(t, err)
		letters = append(letters, deadletter.Letter{Topic: "dlq", Offset: int64(i), Key: []byte("c-1"), Value: v, Attempts: 1,
			Source: turn.Source{Topic: requests, Offset: int64(i)}})
	}
	outcomes, err := deadletter.Redrive(ctx, deadletter.Options{Client: client, Logger: quiet, DryRun: true}, letters)
	require.NoError(t, err)
	require.ErrorIs(t, outcomes[0].Err, deadletter.ErrTooLarge)
	require.ErrorContains(t, outcomes[0].Err, "max.message.bytes of topic "+requests+" (2000)")
	require.NoError(t, outcomes[1].Err)
	require.Equal(t, deadletter.Redriven, outcomes[1].Action)
}
