package deadletter_test

import (
	"context"
	"errors"
	"fmt"
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
	inbox                  *sqlinbox.Inbox
	fixed                  atomic.Bool
	mu                     sync.Mutex
	calls                  map[string]int // model calls after the fix, by request id
}

func newService(t *testing.T) *service {
	t.Helper()
	kc := turntest.NewCluster(t, turntest.Options{})
	s := &service{kc: kc, requests: kc.CreateTopic(t, "requests", 3), results: kc.CreateTopic(t, "results", 3),
		dlq: kc.Unique("dlq"), calls: map[string]int{}}
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
	c, err := consumer.New(consumer.Config{Brokers: kc.Brokers(), GroupID: kc.Unique("svc"), RequestsTopic: s.requests,
		ResultsTopic: s.results, DeadLetterTopic: s.dlq, Sarama: kc.Config(), CommitInterval: 100 * time.Millisecond,
		Logger: quiet}, consumer.RunnerHandler(r))
	require.NoError(t, err)
	rctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(rctx) }()
	t.Cleanup(func() { stop(); require.NoError(t, <-done) })
	return s
}

func (s *service) callsOf(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[id]
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
	req := turntest.NewRequest("c-9", "u-9", "refund order A-9")
	s.kc.ProduceRequest(t, s.requests, req)
	letters := s.kc.ReadDeadLetters(t, s.dlq, 1, wait)
	s.fixed.Store(true)
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
	require.Equal(t, fmt.Sprint(inbox.StatusDone), fmt.Sprint(e.Status))
}
