package chaos

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
)

// served is a run in which every record got the outcome it should: each valid request a
// result and a turn in its conversation's history with the reply the model gives, each
// poison and invalid record a dead letter, each turn one refund, one email and one execution
// of each model step.
type served struct {
	committed bool
	w         *workload
	o         *outcomes
	events    []turnRow
	tb        *tables
	fig       Figures // the figures judge starts from: the faults of the run
}

func newServed(t *testing.T) *served {
	t.Helper()
	cfg := Config{Cell: CellTemporal, Requests: 40, Conversations: 8, Invalid: 3, Poison: 1, Strangers: 1, Panics: 1, Limited: 1}
	w, err := newWorkload(rand.New(rand.NewPCG(1, 2)), cfg)
	require.NoError(t, err)
	s := &served{w: w, o: newOutcomes(w), tb: newTables()}
	byConv := map[string][]item{}
	for _, it := range w.order {
		switch it.kind {
		case kindValid:
			byConv[it.conv] = append(byConv[it.conv], it)
			s.tb.refunds[it.id], s.tb.emails[it.id] = 1, 1
			s.tb.refundCalls++
			s.tb.emailCalls++
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
		// As the members' Runner compacts: a turn that finds more than chaosHistoryLimit
		// events uncovered folds whole turns until at most half of it remain (here, in each
		// conversation's fifth turn), its checkpoint first in its turn, its model steps one
		// later.
		var seq, through int64
		var uncovered []turnRow
		var covered []string
		for _, it := range byConv[conv] {
			shift := 0
			if len(uncovered) > chaosHistoryLimit {
				n := 0
				for n == 0 || len(uncovered)-n > chaosHistoryLimit/2 {
					n += 2
				}
				for _, e := range uncovered[:n] {
					if e.author == "user" {
						covered = append(covered, e.body)
					}
				}
				from := through + 1
				through, uncovered = uncovered[n-1].seq, uncovered[n:]
				seq++
				s.events = append(s.events, turnRow{conv: conv, requestID: it.id, author: session.AuthorCheckpoint, body: summaryText(covered), seq: seq,
					data: fmt.Appendf(nil, `{"from":%d,"through":%d,"policy":"p1-test","tokens":9}`, from, through)})
				s.tb.compactions[stepRun{it.id, 1}] = 1
				shift = 1
			}
			for _, ord := range modelOrdinals {
				s.tb.steps[stepRun{it.id, ord + shift}] = 1
			}
			text := userText(conv, it.n, kindValid)
			reply := replyText(text, prev)
			user := turnRow{conv: conv, requestID: it.id, author: "user", body: text, seq: seq + 1}
			answer := turnRow{conv: conv, requestID: it.id, author: "assistant", body: reply, seq: seq + 2}
			seq += 2
			s.events = append(s.events, user, answer)
			uncovered = append(uncovered, user, answer)
			s.o.addResult(&kgo.Record{Key: []byte(conv), Value: []byte(`{"request_id":"` + it.id + `","conversation_id":"` + conv + `","text":` + quote(reply) + `}`)})
			prev = text
		}
	}
	return s
}

// checkpoints returns the indexes in s.events of the checkpoint events.
func (s *served) checkpoints() []int {
	var out []int
	for i, e := range s.events {
		if e.author == session.AuthorCheckpoint {
			out = append(out, i)
		}
	}
	return out
}

func convName(c int) string { return fmt.Sprintf("conv-%03d", c+1) }

func quote(s string) string { return strconv.Quote(s) }

func (s *served) judge() *Figures {
	f := new(Figures)
	*f = s.fig
	judge(s.w, s.o, s.events, s.tb, s.committed, f)
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
	require.Equal(t, 40, f.Emails)
	require.Equal(t, 80, f.ModelSteps)
	require.Zero(t, f.ExtraModelSteps)
	require.Zero(t, f.EmailRedeliveries)
	require.Equal(t, 8, f.Compactions, "each conversation's fifth turn compacted")
	require.Equal(t, 8, f.CompactionRuns)
	require.Zero(t, f.ExtraCompactionRuns)
	require.Zero(t, f.CompactionProblems)
	require.Zero(t, f.CompactedReruns)
	s.tb.deliveries[s.events[s.checkpoints()[1]].requestID] = 2
	s.tb.deliveries[s.validIDs()[0]] = 3 // a turn that did not compact
	require.Equal(t, 1, s.judge().CompactedReruns)
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
			break_: func(s *served) { s.tb.refunds[s.validIDs()[7]] = 2 },
			figure: func(f *Figures) int { return f.DuplicateSideEffects },
		},
		"two emails of one request": {
			break_: func(s *served) { s.tb.emails[s.validIDs()[7]] = 2 },
			figure: func(f *Figures) int { return f.DuplicateSideEffects },
		},
		"an email of a request whose turn never committed": {
			// A panicking store's request deferred its email and was dead-lettered.
			break_: func(s *served) { s.tb.emails[s.byKind(kindPanicStore)] = 1 },
			figure: func(f *Figures) int { return f.EmailsWithoutCommit },
		},
		"a committed turn without its email": {
			break_: func(s *served) { delete(s.tb.emails, s.validIDs()[6]) },
			figure: func(f *Figures) int { return f.CommittedWithoutEmail },
		},
		"a buried intent": {
			break_: func(s *served) { s.tb.deadIntents = append(s.tb.deadIntents, "key#3: permanent: no (1 attempts)") },
			figure: func(f *Figures) int { return f.DeadIntents },
		},
		"an intent left pending": {
			break_: func(s *served) { s.fig.PendingIntents = 1 },
			figure: func(f *Figures) int { return f.PendingIntents },
		},
		"a model step run again with no fault to explain it": {
			break_: func(s *served) { s.tb.steps[stepRun{s.validIDs()[2], 4}] = 2 },
			figure: func(f *Figures) int { return f.ExtraModelSteps },
		},
		"model steps run again more often than the faults": {
			break_: func(s *served) {
				s.fig.Kills, s.fig.ConnsKilled = 1, 1
				s.tb.steps[stepRun{s.validIDs()[2], 1}] = 3
				s.tb.steps[stepRun{s.validIDs()[3], 4}] = 2
			},
			figure: func(f *Figures) int { return f.ExtraModelSteps - 2 },
		},
		"a checkpoint lost": {
			break_: func(s *served) {
				i := s.checkpoints()[2]
				s.events = append(s.events[:i:i], s.events[i+1:]...)
			},
			figure: func(f *Figures) int { return f.CompactionProblems },
		},
		"a checkpoint doubled": {
			break_: func(s *served) {
				i := s.checkpoints()[2]
				s.events = append(s.events[:i+1:i+1], s.events[i:]...)
			},
			figure: func(f *Figures) int { return f.CompactionProblems },
		},
		"a checkpoint that leaves a gap": {
			break_: func(s *served) {
				e := &s.events[s.checkpoints()[1]]
				e.data = []byte(strings.Replace(string(e.data), `"from":1`, `"from":2`, 1))
			},
			figure: func(f *Figures) int { return f.CompactionProblems },
		},
		"a checkpoint that cuts a turn": {
			break_: func(s *served) {
				e := &s.events[s.checkpoints()[1]]
				e.data = []byte(strings.Replace(string(e.data), `"through":6`, `"through":5`, 1))
			},
			figure: func(f *Figures) int { return f.CompactionProblems },
		},
		"a summary that lost a message": {
			break_: func(s *served) {
				e := &s.events[s.checkpoints()[3]]
				e.body = e.body[strings.IndexByte(e.body, '\n')+1:]
			},
			figure: func(f *Figures) int { return f.CompactionProblems },
		},
		"a checkpoint no counted compaction wrote": {
			break_: func(s *served) { delete(s.tb.compactions, stepRun{s.events[s.checkpoints()[4]].requestID, 1}) },
			figure: func(f *Figures) int { return f.CompactionProblems },
		},
		"a compaction run again with no fault to explain it": {
			break_: func(s *served) { s.tb.compactions[stepRun{s.events[s.checkpoints()[0]].requestID, 1}] = 2 },
			figure: func(f *Figures) int { return f.ExtraCompactionRuns },
		},
		"a turn without its model step": {
			break_: func(s *served) { delete(s.tb.steps, stepRun{s.validIDs()[8], 1}) },
			figure: func(f *Figures) int { return f.Other },
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

// What the faults explain passes: extra model steps up to the kills, poison exits, SIGTERMs
// and killed connections, and an email delivered again (the relay's at least once).
func TestJudgeAllowsWhatTheFaultsExplain(t *testing.T) {
	t.Parallel()
	s := newServed(t)
	s.fig.Kills, s.fig.WorkerKills, s.fig.Crashes, s.fig.Terms, s.fig.ConnsKilled = 1, 1, 1, 1, 1
	ids := s.validIDs()
	s.tb.steps[stepRun{ids[0], 1}] = 2
	s.tb.steps[stepRun{ids[1], 4}] = 3
	s.tb.steps[stepRun{ids[2], 4}] = 2
	s.tb.compactions[stepRun{s.events[s.checkpoints()[0]].requestID, 1}] = 2
	s.tb.emailCalls += 3
	f := s.judge()
	require.Empty(t, f.Failures)
	require.Equal(t, 5, f.ExtraBound())
	require.Equal(t, 4, f.ExtraModelSteps)
	require.Equal(t, 1, f.ExtraCompactionRuns)
	require.Equal(t, 84, f.ModelSteps)
	require.Equal(t, 9, f.CompactionRuns)
	require.Equal(t, 3, f.EmailRedeliveries)
	require.Contains(t, f.Line(), "extra_model_steps=4 (bound 5) compactions=8 compaction_runs=9 extra_compaction_runs=1 compaction_problems=0 compacted_reruns=0")
	require.Contains(t, f.Line(), "email_redeliveries=3")
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
