package consumer_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turntest"
)

// paced returns echo that takes d per turn, so that turns are in flight when members come
// and go.
func paced(d time.Duration) func(ctx context.Context, in turn.Input) (turn.Output, error) {
	return func(ctx context.Context, in turn.Input) (turn.Output, error) {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return turn.Output{}, ctx.Err()
		}
		return echo(in)
	}
}

func produceConversations(e *env, convs, perConv int) map[string][]turn.Request {
	sent := map[string][]turn.Request{}
	produceMore(e, sent, convs, 0, perConv)
	return sent
}

// produceMore produces messages from..to-1 of each of convs conversations, round by round,
// and appends them to sent.
func produceMore(e *env, sent map[string][]turn.Request, convs, from, to int) {
	for i := from; i < to; i++ {
		for c := range convs {
			conv := fmt.Sprintf("conv-%d", c)
			r := request(conv, fmt.Sprintf("%s message %02d", conv, i))
			sent[conv] = append(sent[conv], r)
			e.produce(r)
		}
	}
}

func TestMemberLeavesAndAnotherJoinsMidRun(t *testing.T) {
	t.Parallel()
	const partitions, convs = 6, 24
	e := setup(t, partitions, partitions)
	// Every partition has work for a few seconds: by partition, 6 turns run at once; by key,
	// all 24 conversations do, so their turns are slower.
	pace, inFlight := 50*time.Millisecond, partitions
	if e.ordering == consumer.OrderByKey {
		pace, inFlight = 400*time.Millisecond, convs
	}
	a := e.start(memberOpts{model: paced(pace)})
	sent := produceConversations(e, convs, 5)

	eventually(t, func() bool { return a.c.Stats().Results >= 60 }, "member a makes progress")
	b := e.start(memberOpts{model: paced(pace)})
	// The second half is produced once b holds partitions: on a loaded machine the rebalance
	// can take longer than a needs for the first half, and b must have work of its own.
	eventually(t, func() bool { return b.c.Stats().Claims > 0 }, "b is given partitions")
	produceMore(e, sent, convs, 5, 10)
	eventually(t, func() bool { return b.c.Stats().Results >= 10 }, "b serves the partitions it was given")
	a.stop(t) // a graceful leave: in-flight turns finish or are cancelled, marks committed

	results := e.resultsByID(240)
	require.Len(t, results, 240, "nothing lost")
	e.checkHistories(sent) // no duplicate turn, order kept
	// At most one turn per partition (by key: per conversation) was in flight at each of the
	// two rebalances.
	require.LessOrEqual(t, e.totalCalls(), int64(240+2*inFlight))
	require.EqualValues(t, 240, e.cluster.RecordCount(t, e.results)-a.c.Stats().Replayed-b.c.Stats().Replayed,
		"repeats, if any, are replays of stored results")
	for id, msgs := range results {
		first, err := turn.DecodeResult(msgs[0].Value)
		require.NoError(t, err)
		for _, m := range msgs[1:] { // a repeat is the same result
			again, err := turn.DecodeResult(m.Value)
			require.NoError(t, err)
			require.Equal(t, first, again, "result of %s", id)
		}
	}
}

// blocker is a model that blocks on chosen requests, ignoring cancellation, until the test
// ends: a turn that hangs inside the host's model call.
type blocker struct {
	entered chan string
	release chan struct{}
	once    sync.Once
}

func newBlocker(t *testing.T) *blocker {
	b := &blocker{entered: make(chan string, 16), release: make(chan struct{})}
	t.Cleanup(b.unblock) // runs before the members' cleanups stop them
	return b
}

func (b *blocker) unblock() { b.once.Do(func() { close(b.release) }) }

func (b *blocker) model(match func(turn.Request) bool) func(context.Context, turn.Input) (turn.Output, error) {
	return func(_ context.Context, in turn.Input) (turn.Output, error) {
		if match(in.Request) {
			b.entered <- in.Request.ID
			<-b.release
		}
		return echo(in)
	}
}

func (b *blocker) waitEntered(t *testing.T) string {
	t.Helper()
	select {
	case id := <-b.entered:
		return id
	case <-time.After(wait):
		t.Fatalf("no turn reached the model within %v", wait)
		return ""
	}
}

func TestMemberCrashesMidTurn(t *testing.T) {
	t.Parallel()
	e := setup(t, 2, 2)
	bl := newBlocker(t)
	victim := request("c-victim", "the turn during which the worker dies")
	a := e.start(memberOpts{model: bl.model(func(r turn.Request) bool { return r.ID == victim.ID })})
	e.produce(victim)
	require.Equal(t, victim.ID, bl.waitEntered(t))

	a.crash() // no commit, no goodbye: the group expels it when its session times out
	b := e.start(memberOpts{})
	results := e.resultsByID(1)
	require.NotEmpty(t, results[victim.ID])
	for _, m := range results[victim.ID] {
		res, err := turn.DecodeResult(m.Value)
		require.NoError(t, err)
		require.Equal(t, victim.ID, res.RequestID)
		require.Equal(t, `reply to "the turn during which the worker dies" after 0 events`, res.Text)
	}
	_, perRequest := e.history("c-victim")
	require.Equal(t, map[string]int{victim.ID: 1}, perRequest, "the redone turn is in history once")
	require.EqualValues(t, 2, e.callsOf(victim.ID), "the dead member's call and the redo")
	eventually(t, func() bool { return b.c.Stats().Records == 1 })
}

func TestSlowTurnOutlivesRevokeGrace(t *testing.T) {
	t.Parallel()
	e := setup(t, 2, 2)
	bl := newBlocker(t)
	slow := []turn.Request{request("slow-0", "slow on partition 0"), request("slow-1", "slow on partition 1")}
	a := e.start(memberOpts{model: bl.model(func(r turn.Request) bool { return strings.HasPrefix(r.ConversationID, "slow") })})
	for i, r := range slow {
		data, err := r.Encode()
		require.NoError(t, err)
		e.cluster.ProduceTo(t, e.requests, int32(i), r.ConversationID, data, nil)
	}
	bl.waitEntered(t)
	bl.waitEntered(t) // both partitions have a turn hanging in a's model

	b := e.start(memberOpts{}) // the rebalance moves one partition to b
	first := e.resultsByID(1)  // both, if a was expelled (a missed heartbeat under load)
	var moved, kept turn.Request
	for i, r := range slow {
		if len(first[r.ID]) > 0 {
			moved, kept = r, slow[1-i]
		}
	}
	require.NotEmpty(t, moved.ID, "b published the moved partition's request")
	eventually(t, func() bool { return b.c.Stats().Records >= 1 })

	bl.unblock() // a's hung turns now finish: the moved one late, the kept one in time
	// At least the moved partition's turn was abandoned; on a loaded machine a missed
	// heartbeat can end a's session and take the kept partition too, which is no failure.
	eventually(t, func() bool { return a.c.Stats().Abandoned+a.c.Stats().LateDropped >= 1 })
	all := e.resultsByID(2)
	require.Len(t, all[moved.ID], 1, "a's late completion is not published")
	require.Len(t, all[kept.ID], 1)
	eventually(t, func() bool { return e.committed(2) == 2 }, "both records committed")
	require.LessOrEqual(t, a.c.Stats().Records, int64(1), "a never marked the moved partition's record")
	_, perRequest := e.history(moved.ConversationID)
	require.Equal(t, map[string]int{moved.ID: 1}, perRequest)
}

// The first crash is not counted: the record ran with no other turn beside it, but its
// member did not make it run alone (turn.WithCrashIsolation), so that crash could have been
// another turn's. The next MaxAttempts crashes, each while it ran alone, are.
func TestRecordThatKillsEveryMemberIsDeadLettered(t *testing.T) {
	t.Parallel()
	e := setup(t, 1, 1)
	bl := newBlocker(t)
	deadly := request("c-deadly", "the record that kills its worker")
	next := request("c-deadly", "the next email")
	e.produce(deadly, next)
	for range turn.DefaultMaxAttempts + 1 {
		m := e.start(memberOpts{model: bl.model(func(r turn.Request) bool { return r.ID == deadly.ID })})
		require.Equal(t, deadly.ID, bl.waitEntered(t))
		m.crash()
	}
	survivor := e.start(memberOpts{})
	dead := e.cluster.ReadAll(t, e.dlq, 1, wait)
	require.Len(t, dead, 1)
	h := turntest.HeaderMap(dead[0])
	require.Equal(t, deadly.ID, h[consumer.HeaderRequestID])
	require.Contains(t, h[consumer.HeaderReason], "3 attempts exhausted")
	require.Equal(t, "3", h[consumer.HeaderAttempts])
	require.Equal(t, "0", h[consumer.HeaderSourceOffset])
	require.EqualValues(t, turn.DefaultMaxAttempts+1, e.callsOf(deadly.ID), "the survivor never ran it")
	results := e.resultsByID(1)
	require.Len(t, results[next.ID], 1)
	eventually(t, func() bool { return survivor.c.Stats().Records == 2 })
	require.EqualValues(t, 1, e.cluster.RecordCount(t, e.dlq), "exactly one dead letter")
	require.EqualValues(t, 1, e.cluster.RecordCount(t, e.results))
}
