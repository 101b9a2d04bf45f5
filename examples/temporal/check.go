package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/turnstile-go/turnstile/examples/internal/demo"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turntest"
	"github.com/turnstile-go/turnstile/workflow"
)

// syncMap is a map safe for concurrent use.
type syncMap struct {
	mu sync.Mutex
	m  map[string]string
}

func (s *syncMap) store(k, v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]string{}
	}
	s.m[k] = v
}

func (s *syncMap) load(k string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[k]
	return v, ok
}

// Summary is what a run saw and checked.
type Summary struct {
	Requests, Conversations int
	// Turns counts the turns in the session histories; ModelCalls the calls of the in-process
	// workers' model (the killed worker's call is not counted).
	Turns      int
	ModelCalls int64
	// Results counts the distinct request ids on the results topic; ResultRecords its records.
	Results, ResultRecords int
	// Refunds counts the tool's side effects; RefundCalls how often it was asked.
	Refunds, RefundCalls int
	// KilledRequest is the request whose turn the killed worker was running.
	KilledRequest string
	Elapsed       time.Duration
	Checks        demo.Checks
}

// OK reports whether every check passed.
func (s Summary) OK() bool { return s.Checks.OK() }

func (s Summary) print(out io.Writer) {
	fmt.Fprintf(out, "\nrequests %d over %d conversations in %.1fs: %d turns, %d model calls, %d results (%d records), %d refunds (%d tool calls)\n",
		s.Requests, s.Conversations, s.Elapsed.Seconds(), s.Turns, s.ModelCalls, s.Results, s.ResultRecords, s.Refunds, s.RefundCalls)
	s.Checks.Print(out)
}

// check fills in the summary's counts and checks.
func check(ctx context.Context, sum *Summary, w *world, wl *workload, watch *demo.Watcher, model *demoModel) error {
	sum.Results, _ = watch.Counts()
	sum.ResultRecords, _, _ = watch.Records()
	sum.ModelCalls = model.calls.Load()
	ordered, badReply, missingTrace, behind := 0, "", 0, ""
	for _, conv := range wl.convs {
		reqs := wl.reqs[conv]
		sess, err := w.st.sessions.Get(ctx, session.Key{App: turn.DefaultApp, User: reqs[0].UserID, Conversation: conv}, 10_000)
		if err != nil {
			return fmt.Errorf("session %s: %w", conv, err)
		}
		sum.Turns += int(sess.EventCount / 2)
		good := len(sess.Events) == 2*len(reqs)
		for i := 0; good && i < len(reqs); i++ {
			user, answer := sess.Events[2*i], sess.Events[2*i+1]
			prev := ""
			if i > 0 {
				prev = reqs[i-1].Text
			}
			good = user.Text == reqs[i].Text && user.RequestID == reqs[i].ID && answer.Text == reply(int64(i+1), prev)
			if !good && badReply == "" {
				badReply = fmt.Sprintf("; first wrong: %s turn %d: %q", conv, i+1, answer.Text)
			}
		}
		if good {
			ordered++
		}
		for _, r := range reqs {
			if tp, ok := model.traces.load(r.ID); !ok || tp != wl.trace[r.ID] {
				missingTrace++
			}
		}
		var st workflow.Status
		v, err := w.client.QueryWorkflow(ctx, workflow.DefaultIDPrefix+conv, "", workflow.QueryStatus)
		if err == nil {
			err = v.Get(&st)
		}
		if (err != nil || st.LastAppliedSequence != int64(len(reqs))) && behind == "" {
			behind = fmt.Sprintf("; first behind: %s applied %d of %d (%v)", conv, st.LastAppliedSequence, len(reqs), err)
		}
	}
	if err := w.st.db.QueryRowContext(ctx, `SELECT (SELECT COUNT(*) FROM refunds), (SELECT COUNT(*) FROM refund_calls)`).Scan(&sum.Refunds, &sum.RefundCalls); err != nil {
		return err
	}
	killedTurn, err := w.st.sessions.FindTurn(ctx, keyOf(wl, sum.KilledRequest), sum.KilledRequest)
	committed, end, err2 := offsets(w.brokers)

	sum.Checks.Add(sum.Turns == sum.Requests, "every request applied once", "%d turns for %d requests", sum.Turns, sum.Requests)
	sum.Checks.Add(ordered == sum.Conversations, "in order, with context", "%d of %d conversations hold every turn in sequence order with the expected replies%s", ordered, sum.Conversations, badReply)
	sum.Checks.Add(behind == "", "workflows applied up to their last sequence", "lastAppliedSequence of every conversation's workflow equals its last request's sequence%s", behind)
	sum.Checks.Add(sum.Results == sum.Requests, "one result per request", "%d distinct request ids on %s, %d records", sum.Results, ResultsTopic, sum.ResultRecords)
	sum.Checks.Add(err == nil && len(killedTurn) == 2, "the killed worker's turn finished elsewhere", "request %s: its turn is in the session once (%d events, err %v)", sum.KilledRequest, len(killedTurn), err)
	sum.Checks.Add(sum.Refunds == sum.Requests && sum.RefundCalls > sum.Requests, "refunds once per request", "%d refunds for %d requests, %d tool calls", sum.Refunds, sum.Requests, sum.RefundCalls)
	sum.Checks.Add(missingTrace == 0 && model.traces.size() > 0, "traceparent reached the model", "%d requests whose turn saw no traceparent or another than produced", missingTrace)
	sum.Checks.Add(err2 == nil && committed == end, "offsets committed to the end", "%d of %d records (err %v)", committed, end, err2)
	return nil
}

func keyOf(wl *workload, requestID string) session.Key {
	for _, conv := range wl.convs {
		for _, r := range wl.reqs[conv] {
			if r.ID == requestID {
				return session.Key{App: turn.DefaultApp, User: r.UserID, Conversation: conv}
			}
		}
	}
	return session.Key{}
}

// offsets returns the group's committed offsets and the requests topic's end offsets, summed.
func offsets(brokers []string) (committed, end int64, err error) {
	client, err := sarama.NewClient(brokers, turntest.Config())
	if err != nil {
		return 0, 0, err
	}
	defer client.Close()
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		return 0, 0, err
	}
	parts := make([]int32, Partitions)
	for i := range parts {
		parts[i] = int32(i)
	}
	resp, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{RequestsTopic: parts})
	if err != nil {
		return 0, 0, err
	}
	for _, p := range parts {
		if b := resp.GetBlock(RequestsTopic, p); b != nil && b.Offset > 0 {
			committed += b.Offset
		}
		hw, err := client.GetOffset(RequestsTopic, p, sarama.OffsetNewest)
		if err != nil {
			return 0, 0, err
		}
		end += hw
	}
	return committed, end, nil
}

func (s *syncMap) size() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}
