package window

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// step is one call on a window, written as "op arg..." and checked against what it returns.
//
//	push OFFSET KEY    Push; want: the events ("ready filled" ...), "refused" after Close
//	start              Start; want: the offset started, "none" when nil
//	begin OFFSET       BeginSend
//	sent OFFSET        Sent; want: the events
//	sendfail OFFSET    SendFailed
//	complete OFFSET    Complete; want: the events
//	ack OFFSET         Acked; want: the events
//	abandon            Abandoned
//	unsent             Unsent
//	stage OFFSET       Stage; want: the offsets released, in order ("" for none)
//	take OFFSET N      TakeQueued(OFFSET's record, N); want: the offsets taken
//	close              Close; want: the events
//	stop               Stop
//
// After each step the case may check the watermark (mark: "none" or the offset; staged
// counts the records released by stage as in the transaction) and the counts.
type step struct {
	do    string
	want  string
	mark  string // "" leaves the watermark unchecked
	state string // "" leaves states unchecked; else "OFFSET=state ..." for every record pushed
}

type harness struct {
	t       *testing.T
	w       *Window[string]
	recs    map[int64]*Record[string]
	order   []int64
	inTxn   map[int64]bool
	limits  Limits
	stepNum int
}

func newHarness(t *testing.T, limits Limits) *harness {
	return &harness{t: t, w: New[string](limits), recs: map[int64]*Record[string]{}, inTxn: map[int64]bool{}, limits: limits}
}

func events(e Event) string {
	var out []string
	for _, f := range []struct {
		e    Event
		name string
	}{{Ready, "ready"}, {Filled, "filled"}, {Freed, "freed"}, {Advanced, "advanced"}} {
		if e.Has(f.e) {
			out = append(out, f.name)
		}
	}
	return strings.Join(out, " ")
}

func (h *harness) rec(arg string) *Record[string] {
	var off int64
	_, err := fmt.Sscan(arg, &off)
	require.NoError(h.t, err)
	r := h.recs[off]
	require.NotNil(h.t, r, "no record at offset %d", off)
	return r
}

func (h *harness) run(s step) {
	h.stepNum++
	f := strings.Fields(s.do)
	got := ""
	switch f[0] {
	case "push":
		var off int64
		_, err := fmt.Sscan(f[1], &off)
		require.NoError(h.t, err)
		r := &Record[string]{Offset: off, Value: "v" + f[1]}
		ev, ok := h.w.Push(r, []byte(f[2]))
		if !ok {
			got = "refused"
		} else {
			h.recs[off] = r
			h.order = append(h.order, off)
			got = events(ev)
		}
	case "start":
		if r := h.w.Start(); r != nil {
			got = fmt.Sprint(r.Offset)
		} else {
			got = "none"
		}
	case "begin":
		h.w.BeginSend(h.rec(f[1]))
	case "sent":
		got = events(h.w.Sent(h.rec(f[1])))
	case "sendfail":
		h.w.SendFailed(h.rec(f[1]))
	case "complete":
		got = events(h.w.Complete(h.rec(f[1])))
	case "ack":
		got = events(h.w.Acked(h.rec(f[1])))
	case "abandon":
		h.w.Abandoned()
	case "unsent":
		h.w.Unsent()
	case "stage":
		var offs []string
		for _, r := range h.w.Stage(h.rec(f[1])) {
			offs = append(offs, fmt.Sprint(r.Offset))
			h.inTxn[r.Offset] = true
		}
		got = strings.Join(offs, " ")
	case "take":
		var n int
		_, err := fmt.Sscan(f[2], &n)
		require.NoError(h.t, err)
		var offs []string
		for _, r := range h.w.TakeQueued(h.rec(f[1]), n) {
			offs = append(offs, fmt.Sprint(r.Offset))
		}
		got = strings.Join(offs, " ")
	case "close":
		got = events(h.w.Close())
	case "stop":
		h.w.Stop()
	default:
		h.t.Fatalf("unknown step %q", s.do)
	}
	require.Equal(h.t, s.want, got, "step %d: %s", h.stepNum, s.do)
	if s.mark != "" {
		off, ok := h.w.Watermark(func(r *Record[string]) bool { return h.inTxn[r.Offset] })
		mark := "none"
		if ok {
			mark = fmt.Sprint(off)
		}
		require.Equal(h.t, s.mark, mark, "step %d: %s: watermark", h.stepNum, s.do)
	}
	if s.state != "" {
		var states []string
		for _, off := range h.order {
			states = append(states, fmt.Sprintf("%d=%s", off, h.recs[off].State()))
		}
		require.Equal(h.t, s.state, strings.Join(states, " "), "step %d: %s: states", h.stepNum, s.do)
	}
}

var roomy = Limits{MaxBuffered: 100, MaxInFlight: 100}

// TestWindowTransitions walks every move of a record and the events each returns.
func TestWindowTransitions(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		limits Limits
		steps  []step
	}{
		{"queued, running, sending, done", roomy, []step{
			{do: "push 0 a", want: "ready", mark: "0", state: "0=queued"},
			{do: "start", want: "0", state: "0=running"},
			{do: "begin 0", state: "0=sending"},
			{do: "sent 0", mark: "0"},
			{do: "ack 0", want: "advanced", mark: "1", state: "0=done"},
		}},
		{"running to done with nothing to publish", roomy, []step{
			{do: "push 5 a", want: "ready"},
			{do: "start", want: "5"},
			{do: "complete 5", want: "advanced", mark: "6", state: "5=done"},
		}},
		{"an acknowledgement before Sent", roomy, []step{
			{do: "push 0 a", want: "ready"},
			{do: "push 1 a"},
			{do: "start", want: "0"},
			{do: "begin 0"},
			{do: "ack 0", want: "advanced", mark: "1"},
			{do: "sent 0", want: "ready", state: "0=done 1=queued"},
			{do: "start", want: "1"},
		}},
		{"a key's next record waits for the handoff, not the acknowledgement", roomy, []step{
			{do: "push 0 a", want: "ready"},
			{do: "push 1 a"},
			{do: "start", want: "0"},
			{do: "start", want: "none"},
			{do: "begin 0"},
			{do: "sent 0", want: "ready", state: "0=sending 1=queued"},
			{do: "start", want: "1"},
			{do: "complete 1", mark: "0", state: "0=sending 1=done"},
			{do: "ack 0", want: "advanced", mark: "2"},
		}},
		{"a refused handoff goes back to running and keeps its key", roomy, []step{
			{do: "push 0 a", want: "ready"},
			{do: "push 1 a"},
			{do: "start", want: "0"},
			{do: "begin 0"},
			{do: "sendfail 0", state: "0=running 1=queued"},
			{do: "start", want: "none", mark: "0"},
		}},
		{"an abandoned turn holds the watermark and its key", roomy, []step{
			{do: "push 0 a", want: "ready"},
			{do: "push 1 b", want: "ready"},
			{do: "push 2 a"},
			{do: "start", want: "0"},
			{do: "start", want: "1"},
			{do: "abandon"},
			{do: "complete 1", mark: "0", state: "0=running 1=done 2=queued"},
			{do: "start", want: "none"},
		}},
		{"an unsent outcome holds the watermark", roomy, []step{
			{do: "push 0 a", want: "ready"},
			{do: "start", want: "0"},
			{do: "begin 0"},
			{do: "sent 0"},
			{do: "unsent", mark: "0", state: "0=sending"},
		}},
		{"the per-partition bound", Limits{MaxBuffered: 100, MaxInFlight: 2}, []step{
			{do: "push 0 a", want: "ready"},
			{do: "push 1 b", want: "ready"},
			{do: "push 2 c", want: "ready"},
			{do: "start", want: "0"},
			{do: "start", want: "1"},
			{do: "start", want: "none"},
			{do: "complete 1"},
			{do: "start", want: "2"},
		}},
		{"filled and freed", Limits{MaxBuffered: 4, MaxInFlight: 10}, []step{
			{do: "push 0 a", want: "ready"},
			{do: "push 1 a"},
			{do: "push 2 a"},
			{do: "push 3 a", want: "filled"},
			{do: "push 4 a"},
			{do: "start", want: "0"},
			{do: "complete 0", want: "ready advanced"},
			{do: "start", want: "1"},
			{do: "complete 1", want: "ready advanced"},
			{do: "start", want: "2"},
			{do: "complete 2", want: "ready freed advanced", mark: "3"},
		}},
		{"close lets only the gap records start", roomy, []step{
			{do: "push 0 a", want: "ready"},
			{do: "push 1 a"},
			{do: "push 2 b", want: "ready"},
			{do: "push 3 c", want: "ready"},
			{do: "start", want: "0"},
			{do: "start", want: "2"},
			{do: "close"},
			{do: "push 4 d", want: "refused"},
			{do: "start", want: "none"},
			{do: "complete 0", want: "ready advanced"},
			{do: "start", want: "1"},
			{do: "complete 1", want: "advanced"},
			{do: "complete 2", want: "advanced", mark: "3", state: "0=done 1=done 2=done 3=queued"},
			{do: "start", want: "none"},
		}},
		{"a batch: a key's queued records join the turn, and end one by one", roomy, []step{
			{do: "push 0 a", want: "ready"},
			{do: "push 1 a"},
			{do: "push 2 b", want: "ready"},
			{do: "push 3 a"},
			{do: "push 4 a"},
			{do: "start", want: "0"},
			{do: "take 0 2", want: "1 3", state: "0=running 1=running 2=queued 3=running 4=queued"},
			{do: "start", want: "2"},
			{do: "complete 0", want: "advanced", mark: "1"},
			{do: "start", want: "none"},
			{do: "complete 1", want: "advanced", mark: "2"},
			{do: "begin 3"},
			{do: "sent 3", want: "ready"},
			{do: "start", want: "4"},
			{do: "take 4 5", want: ""},
			{do: "complete 2", want: "advanced", mark: "3"},
			{do: "ack 3", want: "advanced", mark: "4"},
		}},
		{"a batch takes no gap record's neighbours above the limit after close", roomy, []step{
			{do: "push 0 a", want: "ready"},
			{do: "push 1 a"},
			{do: "push 2 b", want: "ready"},
			{do: "push 3 a"},
			{do: "start", want: "0"},
			{do: "start", want: "2"},
			{do: "close"},
			{do: "take 0 5", want: "1"},
		}},
		{"close frees a filled window", Limits{MaxBuffered: 2, MaxInFlight: 10}, []step{
			{do: "push 0 a", want: "ready"},
			{do: "push 1 a", want: "filled"},
			{do: "close", want: "freed"},
		}},
		{"stop ends gap records too", roomy, []step{
			{do: "push 0 a", want: "ready"},
			{do: "push 1 a"},
			{do: "push 2 b", want: "ready"},
			{do: "start", want: "0"},
			{do: "start", want: "2"},
			{do: "close"},
			{do: "complete 0", want: "ready advanced"},
			{do: "stop"},
			{do: "start", want: "none"},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, c.limits)
			for _, s := range c.steps {
				h.run(s)
			}
		})
	}
}

// TestWatermark checks the committable offset with gaps in the offsets, hot keys, abandoned
// turns and staged outcomes.
func TestWatermark(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		steps []step
	}{
		{"empty: nothing to commit", []step{{do: "stop", mark: "none"}}},
		{"a fresh head keeps its own offset", []step{
			{do: "push 40 a", want: "ready", mark: "40"},
			{do: "start", want: "40", mark: "40"},
		}},
		{"offset gaps (compaction, transaction markers)", []step{
			{do: "push 10 a", want: "ready"},
			{do: "push 13 b", want: "ready"},
			{do: "push 20 c", want: "ready"},
			{do: "start", want: "10"},
			{do: "start", want: "13"},
			{do: "start", want: "20"},
			{do: "complete 13", mark: "10"},
			{do: "complete 10", want: "advanced", mark: "14"},
			{do: "complete 20", want: "advanced", mark: "21"},
		}},
		{"a hot key holds the watermark below its backlog, other keys finish above it", []step{
			{do: "push 0 hot", want: "ready"},
			{do: "push 1 hot"},
			{do: "push 2 cold", want: "ready"},
			{do: "push 3 hot"},
			{do: "push 4 other", want: "ready"},
			{do: "start", want: "0"},
			{do: "start", want: "2"},
			{do: "start", want: "4"},
			{do: "complete 2", mark: "0"},
			{do: "complete 4", mark: "0"},
			{do: "complete 0", want: "ready advanced", mark: "1"},
			{do: "start", want: "1"},
			{do: "complete 1", want: "ready advanced", mark: "3"},
			{do: "start", want: "3"},
			{do: "complete 3", want: "advanced", mark: "5", state: "0=done 1=done 2=done 3=done 4=done"},
		}},
		{"an abandoned turn keeps the watermark at its offset for good", []step{
			{do: "push 7 a", want: "ready"},
			{do: "push 8 b", want: "ready"},
			{do: "start", want: "7"},
			{do: "start", want: "8"},
			{do: "complete 8", mark: "7"},
			{do: "abandon", mark: "7"},
		}},
		{"after the head left, an unfinished head keeps one past the last done", []step{
			{do: "push 0 a", want: "ready"},
			{do: "push 5 b", want: "ready"},
			{do: "start", want: "0"},
			{do: "start", want: "5"},
			{do: "complete 0", want: "advanced", mark: "1"},
		}},
		{"staged outcomes are released in offset order and count towards the watermark", []step{
			{do: "push 0 a", want: "ready"},
			{do: "push 1 b", want: "ready"},
			{do: "push 2 c", want: "ready"},
			{do: "start", want: "0"},
			{do: "start", want: "1"},
			{do: "start", want: "2"},
			{do: "begin 1"},
			{do: "stage 1", want: "", mark: "0"},
			{do: "sent 1"},
			{do: "begin 2"},
			{do: "stage 2", want: "", mark: "0"},
			{do: "sent 2"},
			{do: "begin 0"},
			{do: "stage 0", want: "0 1 2", mark: "3"},
			{do: "sent 0"},
			{do: "ack 0", want: "advanced", mark: "3"},
			{do: "ack 2", mark: "3"},
			{do: "ack 1", want: "advanced", mark: "3", state: "0=done 1=done 2=done"},
		}},
		{"a staged outcome above an unstaged record waits", []step{
			{do: "push 0 a", want: "ready"},
			{do: "push 1 b", want: "ready"},
			{do: "start", want: "0"},
			{do: "start", want: "1"},
			{do: "complete 0", want: "advanced", mark: "1"},
			{do: "begin 1"},
			{do: "stage 1", want: "1", mark: "2"},
		}},
		{"a staged, released outcome is not released twice", []step{
			{do: "push 0 a", want: "ready"},
			{do: "push 1 a"},
			{do: "start", want: "0"},
			{do: "begin 0"},
			{do: "stage 0", want: "0", mark: "1"},
			{do: "sent 0", want: "ready"},
			{do: "start", want: "1"},
			{do: "begin 1"},
			{do: "stage 1", want: "1", mark: "2"},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, roomy)
			for _, s := range c.steps {
				h.run(s)
			}
		})
	}
}

// TestWindowCountsAndExhausted checks the counts the owner's drain and metrics read, and
// when no record will start again.
func TestWindowCountsAndExhausted(t *testing.T) {
	t.Parallel()
	w := New[int](roomy)
	a, b := &Record[int]{Offset: 0}, &Record[int]{Offset: 1}
	_, ok := w.Push(a, []byte("k"))
	require.True(t, ok)
	_, ok = w.Push(b, []byte("k"))
	require.True(t, ok)
	require.Equal(t, "k", a.Key())
	require.Equal(t, 2, w.Len())
	require.False(t, w.Exhausted())
	require.Same(t, a, w.Start())
	require.Equal(t, 1, w.Running())
	w.BeginSend(a)
	require.Equal(t, 1, w.Sending())
	w.Close()
	require.True(t, w.Closed())
	require.False(t, w.Exhausted(), "a running turn's handoff may make a gap record ready")
	w.Sent(a)
	require.True(t, w.Exhausted(), "b is above every started record: left to the next owner")
	require.False(t, w.Idle())
	w.Acked(a)
	require.True(t, w.Idle())
	require.Equal(t, int64(0), w.LastDone())
	require.Equal(t, 1, w.Len())
}

// TestStatesAreNamed walks every State.
func TestStatesAreNamed(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, s := range States() {
		name := s.String()
		require.NotContains(t, name, "State(", "state %d has no name", s)
		require.False(t, seen[name], "two states named %q", name)
		seen[name] = true
	}
	require.Len(t, States(), int(numStates))
	require.Equal(t, "State(9)", State(9).String())
}
