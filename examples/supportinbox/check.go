package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/turnstile-go/turnstile/deadletter"
	"github.com/turnstile-go/turnstile/examples/internal/demo"
	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/inbox/sqlinbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turn/agent"
)

// check fills rep from what the watcher read, the session store, the inbox's journal and
// outbox, the fake LLM's and tools' counts and the payment and mail services, and runs the
// checks. The members and the relay must have stopped and the watcher closed.
func check(ctx context.Context, rep *Report, mb *mailbag, w *demo.Watcher, sup *support, pay *payments, ml *mail, sessions session.Store, ib *sqlinbox.Inbox) error {
	replies, deadLetters := w.Results(), w.DeadLetters()
	rep.Replies = len(replies)
	rep.ReplyRecords, _, _ = w.Records()
	for _, d := range deadLetters {
		rep.DeadLetters = append(rep.DeadLetters, d)
	}
	refunds, calls := pay.issued()
	rep.Refunds, rep.RefundCalls = len(refunds), calls
	rep.ModelCalls, rep.ToolCalls = sup.rec.totals()
	msgs, sends := ml.sent()
	rep.Mails, rep.MailRequests = len(msgs), sends

	// One reply per email, and one turn per email in its conversation.
	var missing, twice []string
	for _, c := range mb.customers {
		if c.poison {
			continue
		}
		sess, err := sessions.Get(ctx, c.key(), 1000)
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
				rep.Transcript = append(rep.Transcript, fmt.Sprintf("%-9s %s", e.Author, oneLine(eventText(e), 200)))
			}
		}
	}
	emails := len(mb.order) - 1
	rep.Checks.Add(len(missing) == 0 && len(twice) == 0, "one reply per email",
		"%d of %d emails have a reply on %s, each in its conversation once; %d repeated result records dropped by request id%s",
		emails-len(missing), emails, ResultsTopic, rep.ReplyRecords-rep.Replies, firstOf("missing", missing)+firstOf("duplicated", twice))

	// Each refund once: one per double charge, under the key of the refund step of the email
	// that asked, from one refund call.
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
		if rs := byOrder[c.order]; len(rs) != 1 || rs[0].Key != c.stepKey(refundStep) || rs[0].Cents != c.cents || pay.callsFor(rs[0].Key) != 1 {
			wrong = append(wrong, fmt.Sprintf("order %s: %d refunds %v, %d calls", c.order, len(rs), rs, pay.callsFor(c.stepKey(refundStep))))
		}
	}
	prot := mb.byConv[Protagonist]
	rep.Checks.Add(len(wrong) == 0 && rep.Refunds == charged && rep.RefundCalls == charged, "each refund issued once, by one refund call",
		"%d refunds for %d double charges, from %d refund calls (%d with %s's key); %d refund lookups%s",
		rep.Refunds, charged, rep.RefundCalls, pay.callsFor(prot.stepKey(refundStep)), Protagonist, rep.ToolCalls[toolLookupRefund], firstOf("wrong", wrong))

	// One confirmation email per refund, delivered once by the relay through the outbox.
	byTo := map[string][]message{}
	for _, m := range msgs {
		byTo[m.To] = append(byTo[m.To], m)
	}
	var badMail []string
	for _, c := range mb.customers {
		if c.poison {
			continue
		}
		got := byTo[c.user+"@example.com"]
		want := 0
		if c.issue == doubleCharge {
			want = 1
		}
		if len(got) != want || want == 1 && (got[0].Key != c.stepKey(emailStep) || !strings.Contains(got[0].Body, byOrder[c.order][0].ID)) {
			badMail = append(badMail, fmt.Sprintf("%s: %d emails %v", c.conv, len(got), got))
		}
	}
	delivered, err := ib.Intents(ctx, inbox.IntentFilter{Status: inbox.IntentDelivered, Limit: 10000})
	if err != nil {
		return fmt.Errorf("supportinbox: outbox: %w", err)
	}
	dead, err := ib.Intents(ctx, inbox.IntentFilter{Status: inbox.IntentDead, Limit: 10000})
	if err != nil {
		return fmt.Errorf("supportinbox: outbox: %w", err)
	}
	rep.Checks.Add(len(badMail) == 0 && rep.Mails == charged && len(delivered) == charged && len(dead) == 0,
		"one confirmation email per refund, delivered once through the outbox",
		"%d emails sent for %d refunds; the relay delivered %d intents (%d dead) with %d send requests: %d redeliveries deduped by key, 0 emails sent twice%s",
		rep.Mails, charged, len(delivered), len(dead), rep.MailRequests, rep.MailRequests-rep.Mails, firstOf("wrong", badMail))

	// The poison: dead-lettered at once, over the context budget, without a model call, and
	// nothing stalled behind it.
	d, isDead := deadLetters[mb.poison.ID]
	_, replied := replies[mb.poison.ID]
	poisonCalls := len(sup.rec.modelCalls(mb.poison.ID))
	behind, answered := 0, 0
	for _, e := range mb.order {
		if e.ID != mb.poison.ID && mb.partition[e.ConversationID] == rep.Partition {
			behind++
			if _, ok := replies[e.ID]; ok {
				answered++
			}
		}
	}
	rep.Checks.Add(isDead && !replied && d.Attempts == 1 && poisonCalls == 0 && len(deadLetters) == 1 &&
		strings.Contains(d.Reason, "over the context budget") && answered == behind,
		"the poison email is in the dead-letter topic at once, over the context budget, with its reason",
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

	// The turn the redeploy cut: resumed by another member from its journal.
	victim := prot.emails[1]
	steps, err := ib.Steps(ctx, turn.InboxKey("support", victim))
	if err != nil {
		return fmt.Errorf("supportinbox: journal of %s: %w", victim.ID, err)
	}
	model, tools := sup.rec.modelCalls(victim.ID), sup.rec.toolCalls(victim.ID)
	rep.Steps = describeSteps(steps, model, tools)
	ok, detail := resumed(steps, model, tools)
	_, victimReplied := replies[victim.ID]
	refundCalls, mailSends := pay.callsFor(prot.stepKey(refundStep)), ml.sendsFor(prot.stepKey(emailStep))
	rep.Checks.Add(ok && rep.Redeploy != "" && victimReplied && refundCalls == 1 && len(byTo[prot.user+"@example.com"]) == 1,
		"the redeployed turn resumed mid-loop without re-running its completed steps",
		"%s's second email: %s; 1 reply; %d refund call(s) with its refund step's key, %d email(s) sent (%d send requests)",
		Protagonist, detail, refundCalls, len(byTo[prot.user+"@example.com"]), mailSends)
	return nil
}

// The steps of the second email of a double charge, by ordinal: model (1), lookup_refund
// (2), model (3), refund (4), model (5), send_email (6), model (7).
const (
	refundStep = "tool:" + toolRefund + "#4"
	emailStep  = "tool:" + toolSendEmail + "#6"
)

// wantSteps are the journal's step names for the second email of a double charge.
var wantSteps = []string{agent.ModelStep, agent.ToolStepPrefix + toolLookupRefund, agent.ModelStep, agent.ToolStepPrefix + toolRefund,
	agent.ModelStep, agent.ToolStepPrefix + toolSendEmail, agent.ModelStep}

// key returns the customer's session key.
func (c *customer) key() session.Key {
	return session.Key{App: "support", User: c.user, Conversation: c.conv}
}

// stepKey returns the idempotency key of the step ("NAME#ORDINAL") of the customer's second
// email: what the agent passes to the payment and mail services (agent.Call.Key).
func (c *customer) stepKey(step string) string {
	return turn.SessionToolKey(c.key(), c.emails[1].ID, step)
}

// resumed checks the cut turn: its journal holds the seven steps; the model calls for the
// completed steps ran once, on the member that was redeployed; the call it cut ran again on
// the next owner, which then ran the rest; and the tools ran once each.
func resumed(steps []inbox.Step, model, tools []stepRun) (bool, string) {
	var names []string
	modelSteps := 0
	for _, s := range steps {
		names = append(names, s.Name)
		if s.Name == agent.ModelStep {
			modelSteps++
		}
	}
	var ords []int
	for _, m := range model {
		ords = append(ords, m.Ordinal)
	}
	detail := fmt.Sprintf("journal %v; model calls at steps %v on %v; tool calls %v", names, ords, members(model), tools)
	if !slices.Equal(names, wantSteps) || len(steps) != 7 || !steps[5].Deferred || len(model) != modelSteps+1 {
		return false, detail
	}
	first, next := model[0].Member, model[3].Member
	okModel := slices.Equal(ords, []int{1, 3, 5, 5, 7}) && first != next &&
		model[1].Member == first && model[2].Member == first && model[4].Member == next
	okTools := len(tools) == 2 && tools[0].Name == toolLookupRefund && tools[1].Name == toolRefund &&
		tools[0].Member == first && tools[1].Member == first
	return okModel && okTools, fmt.Sprintf("%d model calls for its %d model steps (steps 1 and 3 on %s only, step 5 cut on %s and run again on %s, step 7 on %s), lookup_refund and refund run once each, on %s",
		len(model), modelSteps, first, first, next, next, first)
}

func members(runs []stepRun) []string {
	var out []string
	for _, r := range runs {
		out = append(out, r.Member)
	}
	return out
}

// describeSteps renders the journal's steps: ordinal, name, where they ran, what they recorded.
func describeSteps(steps []inbox.Step, model, tools []stepRun) []string {
	ran := map[int][]string{}
	for _, r := range append(slices.Clone(model), tools...) {
		ran[r.Ordinal] = append(ran[r.Ordinal], r.Member)
	}
	var lines []string
	for _, s := range steps {
		where := "ran on " + strings.Join(ran[s.Ordinal], ", then ")
		if len(ran[s.Ordinal]) > 1 {
			where = fmt.Sprintf("cut on %s, ran on %s", ran[s.Ordinal][0], strings.Join(ran[s.Ordinal][1:], ", "))
		}
		if s.Deferred {
			where = "deferred" // recorded by the run that committed; the relay delivered it
			if prev := ran[s.Ordinal-1]; len(prev) > 0 {
				where += " on " + prev[len(prev)-1]
			}
		}
		lines = append(lines, fmt.Sprintf("%d  %-19s %-22s %s", s.Ordinal, s.Name, where, oneLine(stepOutput(s), 130)))
	}
	return lines
}

// stepOutput summarizes what a step recorded: a model reply's tool calls or answer, a tool's
// output, a deferred call's intent.
func stepOutput(s inbox.Step) string {
	switch {
	case s.Deferred:
		in, err := turn.DecodeIntent(s.Output)
		if err != nil {
			return err.Error()
		}
		return fmt.Sprintf("intent %s %s", in.Tool, in.Args)
	case s.Name == agent.ModelStep:
		var r agent.Reply
		if err := json.Unmarshal(s.Output, &r); err != nil {
			return err.Error()
		}
		if len(r.ToolCalls) == 0 {
			return "answer: " + r.Text
		}
		var calls []string
		for _, c := range r.ToolCalls {
			calls = append(calls, fmt.Sprintf("%s %s", c.Name, c.Arguments))
		}
		return "calls " + strings.Join(calls, ", ")
	}
	var out struct {
		Output string `json:"output"`
	}
	if err := json.Unmarshal(s.Output, &out); err != nil {
		return string(s.Output)
	}
	return out.Output
}

// eventText is a session event as the transcript shows it: its text, or the tool calls of an
// assistant event that made some.
func eventText(e session.Event) string {
	var d agent.ToolCallsData
	if e.Author == agent.AuthorAssistant && len(e.Data) > 0 && json.Unmarshal(e.Data, &d) == nil && len(d.ToolCalls) > 0 {
		var calls []string
		for _, c := range d.ToolCalls {
			calls = append(calls, fmt.Sprintf("%s %s", c.Name, c.Arguments))
		}
		return "-> " + strings.Join(calls, ", ")
	}
	return e.Text
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
	fmt.Fprintf(out, "\n%s's second email, its agent steps (the turn's journal in the inbox):\n", Protagonist)
	for _, line := range r.Steps {
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
	fmt.Fprintf(out, "  %d emails from %d customers, %d replies (%d result records), %d refunds (%d refund calls), %d confirmation emails (%d send requests), %d dead letter(s), %s\n",
		r.Emails, r.Customers, r.Replies, r.ReplyRecords, r.Refunds, r.RefundCalls, r.Mails, r.MailRequests, len(r.DeadLetters), r.Elapsed.Round(10*time.Millisecond))
	names := slices.Sorted(maps.Keys(r.ToolCalls))
	var tools []string
	for _, n := range names {
		tools = append(tools, fmt.Sprintf("%s %d", n, r.ToolCalls[n]))
	}
	fmt.Fprintf(out, "  %d model calls; tool calls run in turns: %s\n", r.ModelCalls, strings.Join(tools, ", "))
	if r.Redeploy != "" {
		fmt.Fprintf(out, "  %s\n", r.Redeploy)
	}
	r.Checks.Print(out)
}
