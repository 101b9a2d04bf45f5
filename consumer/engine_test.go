package consumer_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/turn"
)

// overlap counts the model calls running at once and remembers the most.
type overlap struct {
	now, peak atomic.Int64
}

func (o *overlap) enter() {
	n := o.now.Add(1)
	for {
		p := o.peak.Load()
		if n <= p || o.peak.CompareAndSwap(p, n) {
			return
		}
	}
}

func (o *overlap) leave() { o.now.Add(-1) }

// commitWatch polls the group's committed offset of one partition until stop, noting when
// each offset was first seen committed.
type commitWatch struct {
	mu   sync.Mutex
	seen []commitSeen
}

type commitSeen struct {
	offset int64
	hwm    map[int32]int64 // the results topic's high-water marks read just after
}

func (e *env) watchCommits(partition int32, stop <-chan struct{}) *commitWatch {
	w := &commitWatch{}
	client, err := sarama.NewClient(e.cluster.Brokers(), e.cluster.Config())
	require.NoError(e.t, err)
	done := make(chan struct{})
	e.t.Cleanup(func() { client.Close() })
	go func() {
		defer close(done)
		last := int64(-1)
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			off := e.cluster.CommittedOffset(e.t, e.group, e.requests, partition)
			if off <= last {
				continue
			}
			last = off
			// Read after the commit: a result acknowledged before it (acks=all) is below
			// its partition's high-water mark by now.
			hwm := map[int32]int64{}
			parts, err := client.Partitions(e.results)
			if err != nil {
				continue
			}
			for _, p := range parts {
				if hwm[p], err = client.GetOffset(e.results, p, sarama.OffsetNewest); err != nil {
					hwm = nil
					break
				}
			}
			if hwm != nil {
				w.mu.Lock()
				w.seen = append(w.seen, commitSeen{off, hwm})
				w.mu.Unlock()
			}
		}
	}()
	e.t.Cleanup(func() { <-done })
	return w
}

// By key, turns of different conversations in one partition overlap while each conversation's
// turns apply in offset order, and the committed offset never passes a record whose result
// was not yet acknowledged: whenever the group's committed offset is seen to move to C, the
// result of every request below C is already in the results topic (below its high-water mark
// read right after). The broker holds every produce to the results topic for 150 ms, longer
// than the commit interval, so an offset marked before its result's acknowledgement would be
// committed while the result is not yet written.
func TestKeyOrderOverlapAndWatermark(t *testing.T) {
	t.Parallel()
	if testOrdering != consumer.OrderByKey {
		t.Skip("turns of one partition overlap by key only")
	}
	e := setup(t, 1, 1)
	e.delayProduce(e.results, 150*time.Millisecond)
	// Two records of each conversation are a backlog when the member starts, so that turns
	// overlap however slowly a loaded machine produces; the rest arrive round by round, each
	// once the one before is committed, so that the committed offset is seen moving in many
	// steps (a backlog of all of them is served in a few produce requests, and the offset
	// moves in as many jumps).
	const convs, perConv = 100, 10
	sent := produceConversations(e, convs, 2)
	stop := make(chan struct{})
	watch := e.watchCommits(0, stop)
	var ov overlap
	e.start(memberOpts{model: func(ctx context.Context, in turn.Input) (turn.Output, error) {
		ov.enter()
		defer ov.leave()
		select {
		case <-time.After(time.Duration(rand.IntN(21)) * time.Millisecond):
		case <-ctx.Done():
			return turn.Output{}, ctx.Err()
		}
		return echo(in)
	}})
	for i := 2; i < perConv; i++ {
		eventually(t, func() bool { return e.cluster.CommittedOffset(t, e.group, e.requests, 0) == int64(i*convs) },
			"the rounds before %d committed", i)
		produceMore(e, sent, convs, i, i+1)
	}
	offsetOf := map[string]int64{}
	for _, msg := range e.cluster.ReadAll(t, e.requests, convs*perConv, wait) {
		req, err := turn.Decoder{}.Decode(msg.Value)
		require.NoError(t, err)
		offsetOf[req.ID] = msg.Offset
	}

	results := e.distinctResults(convs * perConv)
	require.Len(t, results, convs*perConv, "nothing lost")
	eventually(t, func() bool {
		return e.cluster.CommittedOffset(t, e.group, e.requests, 0) == int64(convs*perConv)
	}, "the group commits the end of the partition")
	close(stop)
	e.checkHistories(sent) // each conversation in offset order, each request once
	require.GreaterOrEqual(t, ov.peak.Load(), int64(20), "turns of one partition overlap")

	watch.mu.Lock()
	defer watch.mu.Unlock()
	require.Greater(t, len(watch.seen), 2, "the committed offset was seen moving")
	for _, c := range watch.seen {
		for id, msgs := range results {
			if offsetOf[id] >= c.offset {
				continue
			}
			m := msgs[0] // the first result of the request (ReadAll sorts by offset)
			require.Less(t, m.Offset, c.hwm[m.Partition],
				"offset %d was committed before the result of offset %d was written", c.offset, offsetOf[id])
		}
	}
}

// delayProduce makes the broker hold every produce request for topic for d before it
// handles it, as a slow or distant cluster would.
func (e *env) delayProduce(topic string, d time.Duration) {
	fake := e.cluster.Fake()
	fake.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		fake.KeepControl()
		if pr, ok := req.(*kmsg.ProduceRequest); ok && slices.ContainsFunc(pr.Topics, func(t kmsg.ProduceRequestTopic) bool { return t.Topic == topic }) {
			fake.SleepControl(func() { time.Sleep(d) })
		}
		return nil, nil, false
	})
}

// A member killed with about 50 turns in flight over many conversations: the next owner
// starts at the committed watermark and redoes only records at or above it; nothing is lost
// and no turn is doubled.
func TestCrashWithManyTurnsInFlight(t *testing.T) {
	t.Parallel()
	if testOrdering != consumer.OrderByKey {
		t.Skip("50 turns in flight in one partition need key-level concurrency (TestMemberCrashesMidTurn covers by partition)")
	}
	e := setup(t, 1, 1)
	const convs, perConv, inFlight = 100, 3, 50
	var (
		running atomic.Int64
		hold    = make(chan struct{}) // never closed: held turns end with their member
	)
	a := e.start(memberOpts{model: func(ctx context.Context, in turn.Input) (turn.Output, error) {
		if in.Request.Source.Offset < convs { // the first round goes through, and is committed
			return echo(in)
		}
		running.Add(1)
		select {
		case <-hold:
		case <-ctx.Done():
		}
		return turn.Output{}, ctx.Err()
	}, tune: func(c *consumer.Config) { c.MaxInFlight = inFlight }})
	sent := produceConversations(e, convs, perConv)
	eventually(t, func() bool { return running.Load() == inFlight }, "the member holds 50 turns in flight")
	eventually(t, func() bool { return e.cluster.CommittedOffset(t, e.group, e.requests, 0) >= convs },
		"the first round is committed")
	a.crash()
	committed := e.cluster.CommittedOffset(t, e.group, e.requests, 0)
	require.Less(t, committed, int64(convs*perConv), "work is left for the next owner")

	var lowest atomic.Int64
	lowest.Store(1 << 62)
	e.start(memberOpts{wrap: func(h consumer.Handler) consumer.Handler {
		return consumer.HandlerFunc(func(ctx context.Context, req turn.Request) (*turn.Result, error) {
			for {
				old := lowest.Load()
				if req.Source.Offset >= old || lowest.CompareAndSwap(old, req.Source.Offset) {
					break
				}
			}
			return h.Handle(ctx, req)
		})
	}})
	results := e.distinctResults(convs * perConv)
	require.Len(t, results, convs*perConv, "nothing lost")
	e.checkHistories(sent)
	require.GreaterOrEqual(t, lowest.Load(), committed, "the next owner starts at the committed offset")
}

// Bounds far below the work (two records per window, two turns at once) slow the member
// down but never stall it: every pause is lifted and every freed slot is taken.
func TestTinyBoundsNeverStall(t *testing.T) {
	t.Parallel()
	e := setup(t, 3, 3)
	m := e.start(memberOpts{tune: func(c *consumer.Config) { c.MaxBuffered, c.MaxInFlight = 2, 2 }})
	sent := produceConversations(e, 30, 10)
	results := e.resultsByID(300)
	require.Len(t, results, 300)
	e.checkHistories(sent)
	// MaxBuffered, plus what sarama had fetched when the partition paused: a channel of one
	// record (MaxBuffered/4, at least 1) and one fetch of 16 KiB (the least New derives), of
	// requests of at least 150 bytes.
	require.LessOrEqual(t, m.c.Stats().PeakBuffered, int64(2+1+(16<<10)/150))
}

// By key, a conversation with a long backlog of slow turns does not hold up the other
// conversations of its partition: they finish while it is still working.
func TestHotKeyDoesNotStarveOthers(t *testing.T) {
	t.Parallel()
	if testOrdering != consumer.OrderByKey {
		t.Skip("by partition, every record waits for the ones before it")
	}
	e := setup(t, 1, 1)
	var hot []turn.Request
	for i := range 100 {
		hot = append(hot, request("hot", fmt.Sprintf("hot %d", i)))
	}
	e.produce(hot...)
	var cold []turn.Request
	for i := range 20 {
		cold = append(cold, request(fmt.Sprintf("cold-%d", i), "cold"))
	}
	e.produce(cold...)
	// The hot backlog is there before the member starts: on a loaded machine producing one
	// record may take as long as a hot turn, and a backlog built while the member runs may
	// never grow.
	var hotDone atomic.Int64
	e.start(memberOpts{model: func(ctx context.Context, in turn.Input) (turn.Output, error) {
		if in.Request.ConversationID == "hot" {
			time.Sleep(20 * time.Millisecond)
			hotDone.Add(1)
		}
		return echo(in)
	}})
	eventually(t, func() bool {
		results := e.resultsByID(int(e.cluster.RecordCount(t, e.results))) // all written so far
		for _, r := range cold {
			if len(results[r.ID]) == 0 {
				return false
			}
		}
		return true
	}, "every cold conversation is answered")
	require.Less(t, hotDone.Load(), int64(len(hot)), "the cold conversations finished while the hot one still worked")
	e.distinctResults(len(hot) + len(cold))
}
