package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/turnstile-go/turnstile/examples/internal/demo"
	"github.com/turnstile-go/turnstile/session"
)

// txnCheck is the name of the check of the transactional mode.
const txnCheck = "0 repeated result records for a read_committed reader (transactional mode)"

// check fills sum from what the watcher read and what the stores hold, and runs the checks.
// The members must have stopped. Its error is for a store it cannot read.
func check(ctx context.Context, sum *Summary, wl *workload, prod *producer, w *demo.Watcher, fl *fleet, st *stores) error {
	w.Close()
	sum.Replayed = fl.Stats().Replayed
	results, deadLetters := w.Results(), w.DeadLetters()
	resultRecords, badResults, deadRecords := w.Records()
	sum.Results, sum.ResultRecords, sum.DeadLetters = len(results), resultRecords, deadRecords

	lost, firstLost := 0, ""
	latencies := make([]time.Duration, 0, len(wl.order))
	for _, req := range wl.order {
		a, ok := results[req.ID]
		if !ok {
			if lost++; lost == 1 {
				firstLost = fmt.Sprintf("; first: request %s of %s", req.ID, req.ConversationID)
				if d, dead := deadLetters[req.ID]; dead {
					firstLost += fmt.Sprintf(", dead-lettered after %d attempts: %s", d.Attempts, d.Reason)
				}
			}
			continue
		}
		if sent, ok := prod.sentTime(req.ID); ok {
			latencies = append(latencies, a.At.Sub(sent))
		}
	}
	sum.P50, sum.P99 = percentile(latencies, 50), percentile(latencies, 99)
	sum.Checks.Add(lost == 0, "0 lost: every request has a result",
		"%d of %d request ids on %s%s", len(wl.order)-lost, len(wl.order), ResultsTopic, firstLost)
	if fl.transactional {
		sum.Checks.Add(sum.ResultRecords == sum.Results, txnCheck,
			"%d result records for %d request ids", sum.ResultRecords, sum.Results)
	}
	sum.Checks.Add(badResults == 0, "every result record is a valid result envelope",
		"%d of %d records on %s do not decode", badResults, resultRecords, ResultsTopic)

	var (
		dupTurns, disordered, badReplies  int
		firstDup, firstDisorder, firstBad string
	)
	for _, conv := range wl.convs {
		reqs := wl.byConv[conv]
		sess, err := st.sessions.Get(ctx, session.Key{App: "quickstart", User: reqs[0].UserID, Conversation: conv}, 1<<20)
		if err != nil {
			return fmt.Errorf("quickstart: read session %s: %w", conv, err)
		}
		sum.Turns += int(sess.Version)
		perRequest := map[string]int{}
		var texts []string
		for _, e := range sess.Events {
			if e.Author == "user" {
				perRequest[e.RequestID]++
				texts = append(texts, e.Text)
			}
		}
		for id, n := range perRequest {
			if n > 1 {
				if dupTurns++; dupTurns == 1 {
					firstDup = fmt.Sprintf("; first: request %s is %d times in %s", id, n, conv)
				}
			}
		}
		want := make([]string, len(reqs))
		for i, r := range reqs {
			want[i] = r.Text
		}
		if !slices.Equal(texts, want) {
			if disordered++; disordered == 1 {
				firstDisorder = fmt.Sprintf("; first: %s holds %q, want %q", conv, texts, want)
			}
		}
		for i, r := range reqs {
			prev := ""
			if i > 0 {
				prev = reqs[i-1].Text
			}
			a, ok := results[r.ID]
			if !ok {
				continue // counted as lost
			}
			if expect := reply(conv, int64(i+1), prev); a.Result.Text != expect {
				if badReplies++; badReplies == 1 {
					firstBad = fmt.Sprintf("; first: %q, want %q", a.Result.Text, expect)
				}
			}
		}
	}
	sum.Checks.Add(dupTurns == 0, "0 duplicate turns: every request is in its session history once",
		"%d turns in %d histories, %d requests more than once%s", sum.Turns, len(wl.convs), dupTurns, firstDup)
	sum.Checks.Add(disordered == 0, "each conversation's history is in order",
		"%d of %d conversations hold their messages in the order produced%s", len(wl.convs)-disordered, len(wl.convs), firstDisorder)
	sum.Checks.Add(badReplies == 0, "replies show earlier context",
		"%d of %d replies quote their conversation's previous message%s", sum.Results-badReplies, sum.Results, firstBad)
	return nil
}

// percentile returns the p-th percentile (nearest rank) of ds, sorting it; 0 for none.
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := (len(ds)*p + 99) / 100
	return ds[max(i-1, 0)]
}

// print writes the summary and the checks.
func (s Summary) print(out io.Writer) {
	fmt.Fprintf(out, "\nsummary\n")
	row := func(name string, v any, note string) {
		fmt.Fprintf(out, "  %-22s %8v   %s\n", name, v, note)
	}
	row("requests", s.Requests, fmt.Sprintf("over %d conversations", s.Conversations))
	row("turns", s.Turns, fmt.Sprintf("in session histories; the model was called %d times", s.ModelCalls))
	row("results", s.Results, fmt.Sprintf("distinct request ids on %s", ResultsTopic))
	row("duplicates suppressed", s.DuplicatesSuppressed(), fmt.Sprintf("redeliveries answered from the inbox, no second turn; %d result records repeat a request id (readers dedup them)",
		s.ResultRecords-s.Results))
	row("dead letters", s.DeadLetters, "on "+DeadLetterTopic)
	row("turn latency p50", s.P50.Round(time.Millisecond), "from producing a request to reading its result")
	row("turn latency p99", s.P99.Round(time.Millisecond), "")
	row("elapsed", s.Elapsed.Round(10*time.Millisecond), fmt.Sprintf("%.0f requests/s", float64(s.Requests)/s.Elapsed.Seconds()))
	if s.Rebalance != "" {
		fmt.Fprintf(out, "  %s\n", s.Rebalance)
	}
	s.Checks.Print(out)
}
