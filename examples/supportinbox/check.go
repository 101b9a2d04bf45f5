package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/turnstile-go/turnstile/deadletter"
	"github.com/turnstile-go/turnstile/examples/internal/demo"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
)

// check fills rep from what the watcher read, the session store and the payment service hold,
// and runs the checks. The members must have stopped and the watcher closed.
func check(ctx context.Context, rep *Report, mb *mailbag, w *demo.Watcher, ag *agent, pay *payments, sessions session.Store) error {
	replies, deadLetters := w.Results(), w.DeadLetters()
	rep.Replies = len(replies)
	rep.ReplyRecords, _, _ = w.Records()
	for _, d := range deadLetters {
		rep.DeadLetters = append(rep.DeadLetters, d)
	}
	refunds, calls := pay.issued()
	rep.Refunds, rep.RefundCalls = len(refunds), calls

	// One reply per email, and one turn per email in its conversation.
	var missing, twice []string
	for _, c := range mb.customers {
		if c.poison {
			continue
		}
		sess, err := sessions.Get(ctx, session.Key{App: "support", User: c.user, Conversation: c.conv}, 1000)
		if err != nil {
			return fmt.Errorf("supportinbox: session %s: %w", c.conv, err)
		}
		turns := map[string]int{}
		for _, e := range sess.Events {
			if e.Author == "user" {
				turns[e.RequestID]++
			}
		}
		for _, e := range c.emails {
			if _, ok := replies[e.ID]; !ok {
				missing = append(missing, fmt.Sprintf("%s#%d", c.conv, e.Sequence))
			}
			if turns[e.ID] != 1 {
				twice = append(twice, fmt.Sprintf("%s#%d in history %d times", c.conv, e.Sequence, turns[e.ID]))
			}
		}
		if c.conv == Protagonist {
			for _, e := range sess.Events {
				rep.Transcript = append(rep.Transcript, fmt.Sprintf("%-9s %s", e.Author, oneLine(e.Text, 220)))
			}
		}
	}
	emails := len(mb.order) - 1
	rep.Checks.Add(len(missing) == 0 && len(twice) == 0, "one reply per email",
		"%d of %d emails have a reply on %s, each in its conversation once; %d repeated result records dropped by request id%s",
		emails-len(missing), emails, ResultsTopic, rep.ReplyRecords-rep.Replies, firstOf("missing", missing)+firstOf("duplicated", twice))

	// Each refund once: one per double charge, under the key of the email that asked.
	byOrder := map[string][]refund{}
	for _, r := range refunds {
		byOrder[r.Order] = append(byOrder[r.Order], r)
	}
	var wrong []string
	charged := 0
	for _, c := range mb.customers {
		if c.poison || c.issue != doubleCharge {
			continue
		}
		charged++
		key := turn.SessionToolKey(session.Key{App: "support", User: c.user, Conversation: c.conv}, c.emails[1].ID, "refund")
		if rs := byOrder[c.order]; len(rs) != 1 || rs[0].Key != key || rs[0].Cents != c.cents {
			wrong = append(wrong, fmt.Sprintf("order %s: %d refunds %v", c.order, len(rs), rs))
		}
	}
	prot := mb.byConv[Protagonist]
	victimKey := turn.SessionToolKey(session.Key{App: "support", User: prot.user, Conversation: prot.conv}, prot.emails[1].ID, "refund")
	rep.Checks.Add(len(wrong) == 0 && rep.Refunds == charged, "each refund issued once",
		"%d refunds for %d double charges; %d refund requests, %d of them with %s's key%s",
		rep.Refunds, charged, rep.RefundCalls, pay.callsFor(victimKey), Protagonist, firstOf("wrong", wrong))

	// The poison: dead-lettered after three attempts with the reason, and nothing stalled behind it.
	d, dead := deadLetters[mb.poison.ID]
	_, replied := replies[mb.poison.ID]
	poisonCalls := len(ag.callers(mb.poison.ID))
	behind, answered := 0, 0
	for _, e := range mb.order {
		if e.ID != mb.poison.ID && mb.partition[e.ConversationID] == rep.Partition {
			behind++
			if _, ok := replies[e.ID]; ok {
				answered++
			}
		}
	}
	rep.Checks.Add(dead && !replied && d.Attempts == MaxAttempts && poisonCalls == MaxAttempts && len(deadLetters) == 1 &&
		strings.Contains(d.Reason, "3 attempts exhausted") && strings.Contains(d.Reason, "context window") && answered == behind,
		"the poison email is in the dead-letter topic after 3 attempts, with its reason",
		"%s on %s: attempts=%d, reason=%q, %d bytes; the model was called %d times; %d of %d other emails of partition %d answered",
		mb.poison.ConversationID, DeadLetterTopic, d.Attempts, oneLine(d.Reason, 200), len(d.Value), poisonCalls, answered, behind, rep.Partition)

	// Every second email answered from what the first one said.
	var outOfContext []string
	for _, c := range mb.customers {
		if c.poison {
			continue
		}
		arrival, ok := replies[c.emails[1].ID]
		res := arrival.Result
		want := []string{fmt.Sprintf("%q", c.subject), c.order}
		if c.issue == doubleCharge {
			for _, r := range byOrder[c.order] {
				want = append(want, r.ID)
			}
		}
		if !ok || !containsAll(res.Text, want) {
			outOfContext = append(outOfContext, fmt.Sprintf("%s: %q lacks %q", c.conv, res.Text, want))
		}
	}
	rep.Checks.Add(len(outOfContext) == 0, "every second email is answered in the context of the first",
		"%d of %d replies to a second email quote the first email's subject and order%s",
		mb.countCustomers()-len(outOfContext), mb.countCustomers(), firstOf("out of context", outOfContext))

	// The turn the redeploy cut: run again by another member, one refund, one reply.
	victim := mb.byConv[Protagonist].emails[1]
	callers := ag.callers(victim.ID)
	_, victimReplied := replies[victim.ID]
	rep.Checks.Add(rep.Redeploy != "" && len(callers) == 2 && callers[0] != callers[1] && victimReplied && pay.callsFor(victimKey) == 2,
		"the turn cut by the redeploy ran again elsewhere, with one refund and one reply",
		"%s's second email: model called by %v; refund tool called %d times with key %s; %d refund(s) for order %s",
		Protagonist, callers, pay.callsFor(victimKey), victimKey, len(byOrder[mb.byConv[Protagonist].order]), mb.byConv[Protagonist].order)
	return nil
}

func (mb *mailbag) countCustomers() int {
	n := 0
	for _, c := range mb.customers {
		if !c.poison {
			n++
		}
	}
	return n
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

func firstOf(what string, list []string) string {
	if len(list) == 0 {
		return ""
	}
	return fmt.Sprintf("; %d %s, first: %s", len(list), what, list[0])
}

// oneLine shortens s to its first line, at most n bytes.
func oneLine(s string, n int) string {
	s = strings.ReplaceAll(s, "\n\n", " / ")
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// print writes the report.
func (r Report) print(out io.Writer) {
	fmt.Fprintf(out, "\n%s's conversation, from the session store:\n", Protagonist)
	for _, line := range r.Transcript {
		fmt.Fprintf(out, "  %s\n", line)
	}
	fmt.Fprintf(out, "\ndead letters on %s:\n", DeadLetterTopic)
	dl := slices.Clone(r.DeadLetters)
	slices.SortFunc(dl, func(a, b deadletter.Letter) int { return strings.Compare(a.RequestID, b.RequestID) })
	for _, d := range dl {
		fmt.Fprintf(out, "  %s (request %s, from partition %d, %d bytes): attempts=%d reason=%q\n",
			d.ConversationID, d.RequestID, d.Source.Partition, len(d.Value), d.Attempts, oneLine(d.Reason, 200))
	}
	fmt.Fprintf(out, "\nsummary\n")
	fmt.Fprintf(out, "  %d emails from %d customers, %d replies (%d result records), %d refunds (%d refund requests), %d dead letter(s), %s\n",
		r.Emails, r.Customers, r.Replies, r.ReplyRecords, r.Refunds, r.RefundCalls, len(r.DeadLetters), r.Elapsed.Round(10*time.Millisecond))
	if r.Redeploy != "" {
		fmt.Fprintf(out, "  %s\n", r.Redeploy)
	}
	r.Checks.Print(out)
}
