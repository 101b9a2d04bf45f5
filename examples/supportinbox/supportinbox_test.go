package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/examples/internal/demo/demotest"
	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turn/agent"
)

func TestMain(m *testing.M) { demotest.Main(m) }

func TestSupportInbox(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out bytes.Buffer
	rep, err := run(ctx, Config{Customers: 24, Timeout: 2 * time.Minute}, &out)
	t.Logf("output:\n%s", &out)
	require.NoError(t, err)

	demotest.RequireChecks(t, rep.Checks,
		"one reply per email",
		"each refund issued once, by one refund call",
		"one confirmation email per refund, delivered once through the outbox",
		"the poison email is in the dead-letter topic at once, over the context budget, with its reason",
		"every second email is answered in the context of the first",
		"the redeployed turn resumed mid-loop without re-running its completed steps",
	)
	require.Equal(t, 2*24+1, rep.Emails)
	require.Equal(t, 2*24, rep.Replies)
	require.Equal(t, 12, rep.Refunds, "every other customer was charged twice")
	require.Equal(t, 12, rep.RefundCalls, "the journal answered the redone turn's refund step: no second call")
	require.Equal(t, 12, rep.Mails, "one confirmation email per refund")
	require.GreaterOrEqual(t, rep.MailRequests, rep.Mails)
	require.Equal(t, 12, rep.ToolCalls[toolRefund])
	require.Equal(t, 12, rep.ToolCalls[toolLookupRefund])
	require.Equal(t, 24, rep.ToolCalls[toolOpenCase], "one case per customer")
	// First emails: 2 model calls each (open_case, answer); late parcels' second: 1; double
	// charges' second: 4; the poison: none (refused by the context budget); the cut turn's
	// held call: 1 more.
	require.Equal(t, 24*2+12*1+12*4+1, rep.ModelCalls)
	require.Len(t, rep.Steps, 7)
	require.Len(t, rep.DeadLetters, 1)
	require.Equal(t, 1, rep.DeadLetters[0].Attempts)
	require.Greater(t, len(rep.DeadLetters[0].Value), DefaultPoisonBytes, "the dead letter carries the email as it came")
	require.Contains(t, rep.Redeploy, "abandoned mid-turn")
	require.Contains(t, out.String(), "all checks passed")
}

func TestPaymentsRefundOncePerKey(t *testing.T) {
	t.Parallel()
	p := newPayments()
	ctx := context.Background()
	key := turn.ToolKey("0b9c6f55-8a1e-4c56-9a7c-3f1f3d1f2a10", "refund")
	first, err := p.Refund(ctx, key, "A-1", 500)
	require.NoError(t, err)
	again, err := p.Refund(ctx, key, "A-1", 500)
	require.NoError(t, err)
	require.Equal(t, first, again, "a repeated key gets the first refund back")
	other, err := p.Refund(ctx, turn.ToolKey("0b9c6f55-8a1e-4c56-9a7c-3f1f3d1f2a11", "refund"), "A-2", 700)
	require.NoError(t, err)
	require.NotEqual(t, first.ID, other.ID)
	refunds, calls := p.issued()
	require.Len(t, refunds, 2)
	require.Equal(t, 3, calls)
	require.Equal(t, 2, p.callsFor(key))
	_, err = p.Refund(ctx, "", "A-3", 1)
	require.ErrorContains(t, err, "idempotency key")
}

func TestMailbag(t *testing.T) {
	t.Parallel()
	mb := newMailbag(30, DefaultPartitions, 2<<20)
	require.Len(t, mb.order, 61)
	hero := mb.byConv[Protagonist]
	require.NotNil(t, hero)
	require.Equal(t, doubleCharge, hero.issue)
	require.Equal(t, time.Minute, hero.emails[1].CreatedAt.Sub(hero.emails[0].CreatedAt), "a minute apart")
	require.NotContains(t, hero.emails[1].Text, hero.order, "only the first email names the order")
	require.Equal(t, mb.partition[Protagonist], mb.partition[mb.poison.ConversationID])
	require.Len(t, mb.poison.Text, len("Subject: Checkout broken, full log below\n\nCheckout fails every time. Here is the whole log:\n\n")+2<<20)

	pos := map[string]int{}
	for i, e := range mb.order {
		pos[e.ID] = i
		if i > 0 {
			require.False(t, e.CreatedAt.Before(mb.order[i-1].CreatedAt), "produced in the order written")
		}
	}
	require.Less(t, pos[hero.emails[0].ID], pos[mb.poison.ID])
	require.Less(t, pos[mb.poison.ID], pos[hero.emails[1].ID], "the poison sits between the two emails")
	convs := map[string]bool{}
	for _, c := range mb.customers {
		require.False(t, convs[c.conv], "conversation %s used twice", c.conv)
		convs[c.conv] = true
		require.True(t, strings.HasPrefix(c.user, "cust-"))
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, cfg := range []Config{{Customers: -1}, {Members: 1}, {Members: 8, Partitions: 4}, {PoisonBytes: 1000}, {PoisonBytes: MaxRecordBytes}} {
		cfg.setDefaults()
		require.Error(t, cfg.validate(), "%+v", cfg)
	}
	var out, errOut bytes.Buffer
	require.Equal(t, 2, command().Main([]string{"-customers", "x"}, &out, &errOut))
	require.Equal(t, 1, command().Main([]string{"-customers", "-3"}, &out, &errOut))
	require.Contains(t, errOut.String(), "Customers")
}

func TestMailSendOncePerKey(t *testing.T) {
	t.Parallel()
	m := newMail()
	ctx := context.Background()
	first, err := m.Send(ctx, "k1", "a@example.com", "s", "b")
	require.NoError(t, err)
	again, err := m.Send(ctx, "k1", "a@example.com", "s", "b")
	require.NoError(t, err)
	require.Equal(t, first, again, "a redelivery gets the first message back")
	_, err = m.Send(ctx, "k2", "b@example.com", "s", "b")
	require.NoError(t, err)
	msgs, requests := m.sent()
	require.Len(t, msgs, 2)
	require.Equal(t, 3, requests)
	require.Equal(t, 2, m.sendsFor("k1"))
	_, err = m.Send(ctx, "", "c@example.com", "s", "b")
	require.ErrorContains(t, err, "idempotency key")
}

// TestAgentResumesFromJournal runs a double-charge case's two emails through a Runner on the
// memory stores, cuts the second turn in its model call after the refund, and runs it again:
// the journal answers the completed steps, so neither the model nor the tools run them again.
func TestAgentResumesFromJournal(t *testing.T) {
	t.Parallel()
	mb := newMailbag(3, DefaultPartitions, 2<<20)
	c := mb.byConv[Protagonist]
	pay, ml := newPayments(), newMail()
	sup, err := newSupport(pay, ml, ContextWindow, c.emails[1].ID)
	require.NoError(t, err)
	ib, sessions := inbox.NewMemoryInbox(), session.NewMemoryStore()
	runner := func(member string) *turn.Runner {
		return &turn.Runner{Model: sup.desk(member), Sessions: sessions, Inbox: ib, App: "support"}
	}
	r1, r2 := runner("m1"), runner("m2")

	ctx := context.Background()
	res, err := r1.Run(ctx, c.emails[0])
	require.NoError(t, err)
	require.Contains(t, res.Text, "double charge of $"+dollars(c.cents))
	sess, err := sessions.Get(ctx, c.key(), 100)
	require.NoError(t, err)
	require.JSONEq(t, fmt.Sprintf(`{"order":%q,"issue":"double_charge","cents":%d,"first_email_at":%q}`,
		c.order, c.cents, c.emails[0].CreatedAt.Format(time.RFC3339Nano)), string(sess.State))

	cut, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := r1.Run(cut, c.emails[1])
		done <- err
	}()
	h := <-sup.llm.held
	require.Equal(t, "m1", h.member)
	cancel()
	require.Error(t, <-done)

	res, err = r2.Run(ctx, c.emails[1])
	require.NoError(t, err)
	refunds, calls := pay.issued()
	require.Len(t, refunds, 1)
	require.Equal(t, 1, calls, "the journal answered the refund step")
	require.Equal(t, c.stepKey(refundStep), refunds[0].Key)
	require.Contains(t, res.Text, refunds[0].ID)

	steps, err := ib.Steps(ctx, turn.InboxKey("support", c.emails[1]))
	require.NoError(t, err)
	model, tools := sup.rec.modelCalls(c.emails[1].ID), sup.rec.toolCalls(c.emails[1].ID)
	ok, detail := resumed(steps, model, tools)
	require.True(t, ok, detail)

	rctx, stop := context.WithCancel(ctx)
	defer stop()
	relay := &inbox.Relay{Outbox: ib, Deliver: agent.Deliverer(sup.tools...), Poll: 10 * time.Millisecond,
		OnSettled: func(inbox.Intent, error) { stop() }}
	require.NoError(t, relay.Run(rctx))
	msgs, _ := ml.sent()
	require.Len(t, msgs, 1)
	require.Equal(t, c.stepKey(emailStep), msgs[0].Key)
	require.Equal(t, c.user+"@example.com", msgs[0].To)
}
