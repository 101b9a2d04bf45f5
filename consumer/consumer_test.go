package consumer_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turntest"
)

// checkHistories asserts G1 and G3 on the sessions: per conversation, the user messages are
// exactly the produced texts, in produced order, each request once.
func (e *env) checkHistories(sent map[string][]turn.Request) {
	e.t.Helper()
	for conv, reqs := range sent {
		texts, perRequest := e.history(conv)
		want := make([]string, len(reqs))
		for i, r := range reqs {
			want[i] = r.Text
			require.Equal(e.t, 1, perRequest[r.ID], "request %s of %s has %d turns", r.ID, conv, perRequest[r.ID])
		}
		require.Equal(e.t, want, texts, "history of %s", conv)
	}
}

func TestOrderedTurnsTwoMembers(t *testing.T) {
	t.Parallel()
	e := setup(t, 6, 6)
	a, b := e.start(memberOpts{}), e.start(memberOpts{})
	// Both members hold partitions before the first record: this test is about two members
	// sharing the work, not a rebalance under load (rebalance_test.go has those).
	eventually(t, func() bool { return a.c.Stats().Claims > 0 && b.c.Stats().Claims > 0 }, "both members assigned")

	sent := produceConversations(e, 3, 50)
	results := e.resultsByID(150)
	for conv, reqs := range sent {
		for _, r := range reqs {
			require.Len(t, results[r.ID], 1, "one result for request %s of %s", r.ID, conv)
			res, err := turn.DecodeResult(results[r.ID][0].Value)
			require.NoError(t, err)
			require.Equal(t, r.ConversationID, res.ConversationID)
			require.Contains(t, res.Text, r.Text)
		}
	}
	require.Len(t, results, 150)
	e.checkHistories(sent)
	require.EqualValues(t, 150, e.cluster.RecordCount(t, e.results), "no extra result record")
}

func TestCommittedOffsetAfterFiveRecords(t *testing.T) {
	t.Parallel()
	e := setup(t, 1, 1)
	m := e.start(memberOpts{})
	for i := range 5 {
		e.produce(request("c-five", fmt.Sprintf("m%d", i)))
	}
	e.resultsByID(5)
	eventually(t, func() bool { return m.c.Stats().Records == 5 })
	m.stop(t)
	require.EqualValues(t, 5, e.cluster.CommittedOffset(t, e.group, e.requests, 0), "the committed offset is the next to read")
}

func TestBadRecordsAreDeadLettered(t *testing.T) {
	t.Parallel()
	e := setup(t, 1, 1)
	// A small limit: the test producer, like most, refuses records over 1 MiB. Set on the
	// Runner, the consumer adopts it (RunnerHandler) and decodes records with it.
	m := e.start(memberOpts{runner: func(r *turn.Runner) { r.Decoder.MaxTextBytes = 1000 }})
	valid := request("c-bad", "a fine request")
	good, err := valid.Encode()
	require.NoError(t, err)
	mutate := func(f func(r *turn.Request)) []byte {
		r := request("c-bad", "x")
		f(&r)
		data, err := r.Encode()
		require.NoError(t, err)
		return data
	}
	bad := []struct {
		name, key string
		value     []byte
		reason    string
	}{
		{"not JSON", "c-bad", []byte("hello, agent"), "not JSON"},
		{"wrong schema version", "c-bad", mutate(func(r *turn.Request) { r.Schema = 7 }), "schema: unknown version 7"},
		{"key differs from conversation id", "c-other", mutate(func(*turn.Request) {}), "differs from conversation_id"},
		{"text over the limit", "c-bad", mutate(func(r *turn.Request) { r.Text = strings.Repeat("x", 1001) }), "text: 1001 bytes, over the limit of 1000"},
		{"missing request id", "c-bad", mutate(func(r *turn.Request) { r.ID = "" }), "request_id: missing"},
		{"no key", "", good, "no key"},
	}
	for _, b := range bad {
		if b.key == "" {
			e.cluster.ProduceTo(t, e.requests, 0, "", b.value, map[string]string{"origin": b.name})
			continue
		}
		e.cluster.ProduceTo(t, e.requests, 0, b.key, b.value, map[string]string{"origin": b.name})
	}
	e.produce(valid) // after them all: nothing may stall it

	dead := e.cluster.ReadAll(t, e.dlq, len(bad), wait)
	require.Len(t, dead, len(bad))
	// Records of different keys may finish in any order (OrderByKey); the source offset says
	// which record each dead letter is.
	slices.SortFunc(dead, func(a, b *sarama.ConsumerMessage) int {
		return cmp.Compare(turntest.HeaderMap(a)[consumer.HeaderSourceOffset], turntest.HeaderMap(b)[consumer.HeaderSourceOffset])
	})
	for i, d := range dead {
		h := turntest.HeaderMap(d)
		require.Equal(t, bad[i].name, h["origin"], "producer headers are kept")
		require.Contains(t, h[consumer.HeaderReason], bad[i].reason, bad[i].name)
		require.Equal(t, e.requests, h[consumer.HeaderSourceTopic])
		require.Equal(t, "0", h[consumer.HeaderSourcePartition])
		require.Equal(t, fmt.Sprint(i), h[consumer.HeaderSourceOffset])
		require.Equal(t, bad[i].value, d.Value, "the record is dead-lettered as it came")
	}
	results := e.resultsByID(1)
	require.Len(t, results[valid.ID], 1)
	eventually(t, func() bool { return m.c.Stats().Records == int64(len(bad)+1) })
	require.EqualValues(t, len(bad), m.c.Stats().DeadLetters)
}

func TestPoisonRequestDeadLettersAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	e := setup(t, 2, 2)
	m := e.start(memberOpts{model: func(_ context.Context, in turn.Input) (turn.Output, error) {
		if strings.Contains(in.Request.Text, "6 MB log") {
			return turn.Output{}, errors.New("context window exceeded")
		}
		return echo(in)
	}})
	poison := request("c-7731", "here is my 6 MB log")
	after := []turn.Request{request("c-7731", "second email"), request("c-7731", "third email")}
	e.produce(poison)
	e.produce(after...)

	dead := e.cluster.ReadAll(t, e.dlq, 1, wait)
	require.Len(t, dead, 1)
	h := turntest.HeaderMap(dead[0])
	require.Equal(t, poison.ID, h[consumer.HeaderRequestID])
	require.Equal(t, "3", h[consumer.HeaderAttempts])
	require.Contains(t, h[consumer.HeaderReason], "3 attempts exhausted")
	require.Contains(t, h[consumer.HeaderError], "context window exceeded")
	require.Equal(t, e.requests, h[consumer.HeaderSourceTopic])
	require.NotEmpty(t, h[consumer.HeaderSourcePartition])
	require.Equal(t, "0", h[consumer.HeaderSourceOffset])
	require.Equal(t, "c-7731", string(dead[0].Key))

	results := e.resultsByID(2)
	for _, r := range after {
		require.Len(t, results[r.ID], 1)
	}
	require.EqualValues(t, 3, e.callsOf(poison.ID))
	texts, _ := e.history("c-7731")
	require.Equal(t, []string{"second email", "third email"}, texts)
	eventually(t, func() bool { return m.c.Stats().Records == 3 })
	require.EqualValues(t, 1, m.c.Stats().DeadLetters)
	require.EqualValues(t, 1, e.cluster.RecordCount(t, e.dlq), "exactly one dead letter")
	require.EqualValues(t, 2, e.cluster.RecordCount(t, e.results))
}
