package chaos

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/turnstile-go/turnstile/turn"
)

// served is a run in which every record got the outcome it should: each valid request a
// result and a turn in its conversation's history with the reply the model gives, each
// poison and invalid record a dead letter, each turn one refund.
type served struct {
	committed bool
	w         *workload
	o         *outcomes
	events    []turnRow
	refunds   map[string]int
}

func newServed(t *testing.T) *served {
	t.Helper()
	cfg := Config{Cell: CellTemporal, Requests: 40, Conversations: 8, Invalid: 3, Poison: 1, Strangers: 1, Panics: 1, Limited: 1}
	w, err := newWorkload(rand.New(rand.NewPCG(1, 2)), cfg)
	require.NoError(t, err)
	s := &served{w: w, o: newOutcomes(w), refunds: map[string]int{}}
	byConv := map[string][]item{}
	for _, it := range w.order {
		switch it.kind {
		case kindValid:
			byConv[it.conv] = append(byConv[it.conv], it)
			s.refunds[it.id] = 1
		case kindInvalid:
			s.o.addDead(&kgo.Record{Value: it.value, Headers: []kgo.RecordHeader{{Key: "reason", Value: []byte("broken JSON")}}})
		default:
			// As a worker of Temporal mode dead-letters: the request re-encoded, known by its
			// request id header.
			s.o.addDead(&kgo.Record{Key: []byte(it.conv), Value: []byte(`{"re-encoded":true}`), Headers: []kgo.RecordHeader{
				{Key: "request-id", Value: []byte(it.id)}, {Key: "reason", Value: []byte(it.kind.String())}, {Key: "attempts", Value: []byte("3")}}})
		}
	}
	for c := range cfg.Conversations {
		conv := convName(c)
		prev := ""
		for _, it := range byConv[conv] {
			text := userText(conv, it.n, kindValid)
			reply := replyText(text, prev)
			s.events = append(s.events, turnRow{conv, it.id, "user", text}, turnRow{conv, it.id, "assistant", reply})
			s.o.addResult(&kgo.Record{Key: []byte(conv), Value: []byte(`{"request_id":"` + it.id + `","conversation_id":"` + conv + `","text":` + quote(reply) + `}`)})
			prev = text
		}
	}
	return s
}

func convName(c int) string { return fmt.Sprintf("conv-%03d", c+1) }

func quote(s string) string { return strconv.Quote(s) }

func (s *served) judge() *Figures {
	f := &Figures{}
	judge(s.w, s.o, s.events, s.refunds, s.committed, f)
	return f
}

// validIDs returns the valid request ids in produce order.
func (s *served) validIDs() []string {
	var ids []string
	for _, it := range s.w.order {
		if it.kind == kindValid {
			ids = append(ids, it.id)
		}
	}
	return ids
}

func TestJudgePassesARunThatServedEverything(t *testing.T) {
	t.Parallel()
	s := newServed(t)
	f := s.judge()
	require.Empty(t, f.Failures)
	require.Equal(t, 40, f.Turns)
	require.Equal(t, 3+1+1+3+1, f.DeadLetters, "invalid, poison, stranger, three panicking, always limited")
	for _, k := range kinds {
		require.Positive(t, s.w.count(k), "the workload has a record of kind %s", k)
	}
}

// byKind returns the id of the first record of kind k.
func (s *served) byKind(k kind) string {
	for _, it := range s.w.order {
		if it.kind == k {
			return it.id
		}
	}
	panic("no record of kind " + k.String())
}

// A republished result is no failure when readers dedup, and is one read_committed.
func TestJudgeCountsCommittedDuplicates(t *testing.T) {
	t.Parallel()
	for _, committed := range []bool{false, true} {
		s := newServed(t)
		s.committed = committed
		id := s.validIDs()[4]
		s.o.results[id] = append(s.o.results[id], s.o.results[id][0])
		f := s.judge()
		require.Equal(t, 1, f.DuplicateResults)
		require.Equal(t, committed, !f.OK(), "failures: %v", f.Failures)
	}
}

// Each check fails on the fault it is there for.
func TestJudgeFindsEachFault(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		break_ func(s *served)
		figure func(f *Figures) int
	}{
		"a result missing is lost": {
			break_: func(s *served) { delete(s.o.results, s.validIDs()[5]) },
			figure: func(f *Figures) int { return f.Lost },
		},
		"a turn missing is lost": {
			break_: func(s *served) {
				id := s.validIDs()[5]
				var kept []turnRow
				for _, e := range s.events {
					if e.requestID != id {
						kept = append(kept, e)
					}
				}
				s.events = kept
			},
			figure: func(f *Figures) int { return f.Lost },
		},
		"an invalid record not dead-lettered is lost": {
			break_: func(s *served) {
				for _, it := range s.w.order {
					if it.kind == kindInvalid {
						delete(s.o.dead, it.id)
						return
					}
				}
			},
			figure: func(f *Figures) int { return f.Lost },
		},
		"a turn stored twice": {
			break_: func(s *served) { s.events = append(s.events, s.events[len(s.events)-2:]...) },
			figure: func(f *Figures) int { return f.DuplicateTurns },
		},
		"a result of another turn": {
			break_: func(s *served) { id := s.validIDs()[3]; s.o.results[id] = append(s.o.results[id], "another answer") },
			figure: func(f *Figures) int { return f.DuplicateTurns },
		},
		"two turns swapped": {
			break_: func(s *served) {
				// The conversation's first two turns, reply texts rebuilt so that only the order is wrong.
				e := s.events
				e[0], e[1], e[2], e[3] = e[2], e[3], e[0], e[1]
				e[1].body = replyText(e[0].body, "")
				e[3].body = replyText(e[2].body, e[0].body)
			},
			figure: func(f *Figures) int { return f.OrderViolations },
		},
		"a reply that missed the previous turn": {
			break_: func(s *served) { s.events[5].body = replyText(s.events[4].body, "") },
			figure: func(f *Figures) int { return f.ContextMisses },
		},
		"two refunds of one request": {
			break_: func(s *served) { s.refunds[s.validIDs()[7]] = 2 },
			figure: func(f *Figures) int { return f.DuplicateSideEffects },
		},
		"a valid request dead-lettered": {
			break_: func(s *served) {
				id := s.validIDs()[9]
				delete(s.o.results, id)
				s.o.dead[id] = true
			},
			figure: func(f *Figures) int { return f.ValidDeadLetters },
		},
	}
	for _, k := range kinds {
		if k == kindValid {
			continue
		}
		cases["a "+k.String()+" record served"] = struct {
			break_ func(s *served)
			figure func(f *Figures) int
		}{
			break_: func(s *served) {
				id := s.byKind(k)
				delete(s.o.dead, id)
				s.o.results[id] = []string{"served"}
			},
			figure: func(f *Figures) int { return f.Other },
		}
		cases["a "+k.String()+" record with no outcome"] = struct {
			break_ func(s *served)
			figure func(f *Figures) int
		}{
			break_: func(s *served) { delete(s.o.dead, s.byKind(k)) },
			figure: func(f *Figures) int { return f.NoOutcome },
		}
		cases["a "+k.String()+" record dead-lettered without a reason"] = struct {
			break_ func(s *served)
			figure func(f *Figures) int
		}{
			break_: func(s *served) { s.o.reasons[s.byKind(k)] = "" },
			figure: func(f *Figures) int { return f.Other },
		}
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := newServed(t)
			c.break_(s)
			f := s.judge()
			require.Equal(t, 1, c.figure(f), "figures: %s", f.Line())
			require.NotEmpty(t, f.Failures)
			require.False(t, f.OK())
		})
	}
}

func TestWorkloadKeepsEachConversationsOrder(t *testing.T) {
	t.Parallel()
	cfg := Config{Requests: 1000, Conversations: 30, Invalid: 10, Poison: 2}
	w, err := newWorkload(rand.New(rand.NewPCG(7, 7)), cfg)
	require.NoError(t, err)
	require.Equal(t, 1000, w.count(kindValid))
	require.Equal(t, 2, w.count(kindPoison))
	require.Equal(t, 10, w.count(kindInvalid))
	require.Len(t, w.byID, 1012, "request ids are unique")
	last := map[string]int{}
	for _, it := range w.order {
		if it.kind == kindInvalid || it.kind == kindStranger {
			continue
		}
		require.Equal(t, last[it.conv]+1, it.n, "conversation %s", it.conv)
		last[it.conv] = it.n
	}
	again, err := newWorkload(rand.New(rand.NewPCG(7, 7)), cfg)
	require.NoError(t, err)
	require.Equal(t, w.order, again.order, "one seed, one workload")
}

func TestScheduleHasEveryFault(t *testing.T) {
	t.Parallel()
	cfg := Long()
	span := 5 * time.Minute
	s := newSchedule(rand.New(rand.NewPCG(3, 3)), cfg, span)
	count := map[faultKind]int{}
	for i, f := range s {
		count[f.kind]++
		require.Positive(t, f.at)
		require.Less(t, f.at, span)
		if i > 0 {
			require.GreaterOrEqual(t, f.at, s[i-1].at, "in time order")
		}
	}
	require.Equal(t, map[faultKind]int{faultKill: 40, faultTerm: cfg.Terms, faultDBKill: cfg.DBKills,
		faultBroker: 3, faultBurst: cfg.Bursts}, count)
	tc := Long().ForCell(CellTemporal)
	count = map[faultKind]int{}
	for _, f := range newSchedule(rand.New(rand.NewPCG(3, 3)), tc, span) {
		count[f.kind]++
	}
	require.Equal(t, tc.WorkerKills, count[faultWorkerKill])
	require.Equal(t, tc.ServerRestarts, count[faultServer])
	require.Positive(t, count[faultServer])
	require.Equal(t, s, newSchedule(rand.New(rand.NewPCG(3, 3)), cfg, span), "one seed, one schedule")
}

func TestModelFatesFollowTheShares(t *testing.T) {
	t.Parallel()
	f := modelFaults{Seed: 9, SlowShare: 0.1, FailShare: 0.2, SlowMax: time.Second}
	slow, fail := 0, 0
	for i := range 10000 {
		ft := f.fateOf(fmt.Sprintf("request-%d", i))
		if ft.slow > 0 {
			slow++
			require.LessOrEqual(t, ft.slow, time.Second)
		}
		if ft.failFirst {
			fail++
		}
	}
	require.InDelta(t, 1000, slow, 200)
	require.InDelta(t, 2000, fail, 300)
	require.Equal(t, f.fateOf("x"), f.fateOf("x"), "the same on every member")
}

// A stranger comes after its victim's first request, in Temporal mode with the sequence of the
// victim's request that follows it.
func TestWorkloadStrangers(t *testing.T) {
	t.Parallel()
	cfg := Config{Cell: CellTemporal, Requests: 300, Conversations: 30, Strangers: 5, Panics: 1, Limited: 1, Poison: 1}
	w, err := newWorkload(rand.New(rand.NewPCG(5, 5)), cfg)
	require.NoError(t, err)
	require.Equal(t, 5, w.count(kindStranger))
	seen := map[string]int{}
	for i, it := range w.order {
		if it.kind != kindStranger {
			seen[it.conv]++
			continue
		}
		require.Positive(t, seen[it.conv], "the victim's first request comes first")
		req, err := turn.Decode(it.value)
		require.NoError(t, err)
		require.NotEqual(t, fmt.Sprintf("user-%s", it.conv[len("conv-"):]), req.UserID)
		require.Equal(t, int64(it.n), req.Sequence)
		for _, next := range w.order[i+1:] {
			if next.conv == it.conv {
				require.Equal(t, it.n, next.n, "the victim's next sequence")
				break
			}
		}
	}
}

// Every cell has a stable name that parses back to it.
func TestCellsParse(t *testing.T) {
	t.Parallel()
	seen := map[Cell]bool{}
	for _, c := range Cells() {
		require.NotEmpty(t, string(c))
		require.False(t, seen[c], "cell %s listed twice", c)
		seen[c] = true
		got, err := ParseCell(string(c))
		require.NoError(t, err)
		require.Equal(t, c, got)
	}
	_, err := ParseCell("no-such-cell")
	require.Error(t, err)
}
