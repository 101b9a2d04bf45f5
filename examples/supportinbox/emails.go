package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/uuid"

	"github.com/turnstile-go/turnstile/turn"
)

// Protagonist is the conversation of the ADK note's worked example: a customer who was charged
// twice writes, then writes again a minute later, and the member serving the second email is
// redeployed in the middle of its turn.
const Protagonist = "c-7731"

// issue is what a customer writes about.
type issue int

const (
	// doubleCharge: charged twice; the second email asks for the refund.
	doubleCharge issue = iota
	// lateParcel: a parcel that has not arrived; the second email asks for news.
	lateParcel
)

// customer is one conversation: two emails a minute apart, or the single poison email.
type customer struct {
	conv, user string
	issue      issue
	order      string // the order id, named only in the first email
	cents      int64  // the amount charged twice
	subject    string // the first email's subject
	emails     []turn.Request
	poison     bool
}

// mailbag is the whole inbox: the customers and their emails in the order they arrive.
type mailbag struct {
	customers []*customer
	byConv    map[string]*customer
	order     []turn.Request // by created_at: the order they are produced in
	poison    turn.Request
	partition map[string]int32 // conversation -> requests partition
}

// base is when the first customer writes; fixed, so that every run tells the same story.
var base = time.Date(2026, 5, 4, 9, 0, 0, 0, time.UTC)

// newMailbag makes n customers (the Protagonist among them) who each write twice a minute
// apart, and one customer whose only email carries a pasted log of poisonBytes bytes. That
// conversation is chosen to hash to the Protagonist's partition, and the email arrives between
// the Protagonist's two, so that it sits in their way on the partition.
func newMailbag(n, partitions, poisonBytes int) *mailbag {
	mb := &mailbag{byConv: map[string]*customer{}, partition: map[string]int32{}}
	spacing := 2 * time.Minute / time.Duration(n) // first emails spread over two minutes
	for i := range n {
		conv := fmt.Sprintf("c-%04d", 1000+(i*7919)%9000) // distinct: 7919 is prime to 9000
		c := &customer{conv: conv, user: "cust-" + conv[2:], issue: issue(i % 2)}
		switch {
		case i == n/3:
			c.conv, c.user, c.issue = Protagonist, "cust-7731", doubleCharge
		case conv == Protagonist: // the id is customer n/3's
			c.conv, c.user = "c-0001", "cust-0001"
		}
		first := base.Add(time.Duration(i) * spacing)
		switch c.issue {
		case doubleCharge:
			c.order, c.cents = fmt.Sprintf("A-%05d", 10000+i*37), int64(1999+i*100)
			c.subject = fmt.Sprintf("Charged twice for order %s", c.order)
			c.emails = []turn.Request{
				email(c, first, fmt.Sprintf("Subject: %s\n\nHello, my card was charged $%s twice for order %s. Please help.", c.subject, dollars(c.cents), c.order)),
				email(c, first.Add(time.Minute), "Subject: Re: my last email\n\nI still see both charges on my statement. Can you refund the duplicate?"),
			}
		case lateParcel:
			c.order = fmt.Sprintf("B-%05d", 20000+i*41)
			c.subject = fmt.Sprintf("Order %s has not arrived", c.order)
			c.emails = []turn.Request{
				email(c, first, fmt.Sprintf("Subject: %s\n\nHi, my order %s from two weeks ago has not arrived yet.", c.subject, c.order)),
				email(c, first.Add(time.Minute), "Subject: Re: my last email\n\nAny news? It still has not come."),
			}
		}
		mb.add(c)
	}
	for _, c := range mb.customers {
		mb.partition[c.conv] = partitionOf(c.conv, partitions)
	}
	// The poison: a conversation on the Protagonist's partition, written between its emails.
	target := mb.partition[Protagonist]
	for i := 1; ; i++ {
		conv := fmt.Sprintf("c-9%03d", i)
		if _, taken := mb.byConv[conv]; taken || partitionOf(conv, partitions) != target {
			continue
		}
		c := &customer{conv: conv, user: "cust-" + conv[2:], poison: true, subject: "Checkout broken, full log below"}
		at := mb.byConv[Protagonist].emails[0].CreatedAt.Add(30 * time.Second)
		c.emails = []turn.Request{email(c, at, "Subject: "+c.subject+"\n\nCheckout fails every time. Here is the whole log:\n\n"+pastedLog(poisonBytes))}
		mb.add(c)
		mb.partition[conv] = target
		mb.poison = c.emails[0]
		break
	}
	for _, c := range mb.customers {
		mb.order = append(mb.order, c.emails...)
	}
	slices.SortStableFunc(mb.order, func(a, b turn.Request) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return mb
}

func (mb *mailbag) add(c *customer) {
	mb.customers = append(mb.customers, c)
	mb.byConv[c.conv] = c
}

func email(c *customer, at time.Time, text string) turn.Request {
	return turn.Request{
		Schema: turn.SchemaVersion, ID: uuid.NewString(), ConversationID: c.conv, UserID: c.user,
		Sequence: int64(len(c.emails) + 1), Text: text, ReplyTo: "email", CreatedAt: at,
	}
}

func dollars(cents int64) string { return fmt.Sprintf("%d.%02d", cents/100, cents%100) }

// partitionOf is the partition a Java producer (murmur2) puts the key on.
func partitionOf(key string, partitions int) int32 {
	p, err := sarama.NewMurmur2Partitioner("").Partition(&sarama.ProducerMessage{Key: sarama.StringEncoder(key)}, int32(partitions))
	if err != nil {
		panic(err) // only for a key that does not encode, and a string always does
	}
	return p
}

// pastedLog returns about size bytes of a service's log: what a customer pastes into an
// email when asked for "the error".
func pastedLog(size int) string {
	var b strings.Builder
	b.Grow(size + 200)
	t := base.Add(-time.Hour)
	for i := 0; b.Len() < size; i++ {
		t = t.Add(137 * time.Millisecond)
		fmt.Fprintf(&b, "%s ERROR checkout-web[%d]: POST /api/checkout 502 upstream payment-gateway timed out after 30000ms (trace=%016x, cart=%d items)\n",
			t.Format("2006-01-02T15:04:05.000Z"), 4000+i%16, uint64(i)*0x9e3779b97f4a7c15, 1+i%7)
	}
	return b.String()[:size]
}
