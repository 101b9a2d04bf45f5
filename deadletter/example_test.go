package deadletter_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/deadletter"
	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
)

// Parse reads the consumer's headers of a dead-letter record; the producer's own headers stay
// in Headers.
func ExampleParse() {
	h := func(k, v string) *sarama.RecordHeader { return &sarama.RecordHeader{Key: []byte(k), Value: []byte(v)} }
	msg := &sarama.ConsumerMessage{
		Topic: "agent.requests.dlq", Partition: 2, Offset: 17,
		Key: []byte("c-7731"), Value: []byte(`{"schema":1,...}`),
		Headers: []*sarama.RecordHeader{
			h("tenant", "acme"),
			h(consumer.HeaderRequestID, "6f1b7c1e-2d8f-4a53-9c1e-0f6f3a3c2b10"),
			h(consumer.HeaderConversationID, "c-7731"),
			h(consumer.HeaderReason, "3 attempts exhausted; last error: model answered 500"),
			h(consumer.HeaderError, "model answered 500"),
			h(consumer.HeaderAttempts, "3"),
			h(consumer.HeaderKind, "attempt"),
			h(consumer.HeaderSourceTopic, "agent.requests"),
			h(consumer.HeaderSourcePartition, "2"),
			h(consumer.HeaderSourceOffset, "4711"),
		},
	}
	l := deadletter.Parse(msg)
	fmt.Println(l.ID(), l.RequestID, l.ConversationID)
	fmt.Printf("%s: %d attempts, error %q\n", l.Kind, l.Attempts, l.Error)
	fmt.Println(l.Reason)
	fmt.Printf("from %s/%d/%d, own headers %d: %s=%s\n", l.Source.Topic, l.Source.Partition, l.Source.Offset,
		len(l.Headers), l.Headers[0].Key, l.Headers[0].Value)
	// Output:
	// agent.requests.dlq/2/17 6f1b7c1e-2d8f-4a53-9c1e-0f6f3a3c2b10 c-7731
	// attempt: 3 attempts, error "model answered 500"
	// 3 attempts exhausted; last error: model answered 500
	// from agent.requests/2/4711, own headers 1: tenant=acme
}

// A Filter selects dead letters by request id, reason, location and time; set fields must all
// match.
func ExampleFilter_Match() {
	letters := []deadletter.Letter{
		{Offset: 0, RequestID: "req-1", Reason: "turn req-1 attempt 1: model: permanent: bug 42", Source: turn.Source{Partition: 0}},
		{Offset: 1, RequestID: "req-2", Reason: "3 attempts exhausted; last error: model answered 500", Source: turn.Source{Partition: 1}},
		{Offset: 2, RequestID: "req-3", Reason: "turn req-3 attempt 1: model: permanent: bug 42", Source: turn.Source{Partition: 1}},
	}
	one := int32(1)
	for _, f := range []deadletter.Filter{{}, {Reason: "bug 42"}, {Reason: "bug 42", SourcePartition: &one}, {RequestID: "req-2"}} {
		var ids []string
		for _, l := range letters {
			if f.Match(l) {
				ids = append(ids, l.RequestID)
			}
		}
		fmt.Println(ids)
	}
	// Output:
	// [req-1 req-2 req-3]
	// [req-1 req-3]
	// [req-3]
	// [req-2]
}

// The day after go-live: a bug dead-letters every request that asks for a refund. Once it is
// fixed, Read lists its dead letters and Redrive runs them again, once each: a second Redrive
// finds them done and publishes nothing.
func ExampleRedrive() {
	kafka, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "agent.requests", "agent.results", "agent.requests.dlq"))
	if err != nil {
		log.Fatal(err)
	}
	defer kafka.Close()
	brokers := kafka.ListenAddrs()

	var fixed atomic.Bool
	model := turn.ModelFunc(func(_ context.Context, in turn.Input) (turn.Output, error) {
		if strings.Contains(in.Request.Text, "refund") && !fixed.Load() {
			return turn.Output{}, turn.Permanent(errors.New("bug 42: the refund tool is misconfigured"))
		}
		return turn.Output{Events: []session.Event{{Text: "answered: " + in.Request.Text}}}, nil
	})
	dedup := inbox.NewMemoryInbox() // the service's inbox: in production its sqlinbox.Inbox
	runner := &turn.Runner{Model: model, Sessions: session.NewMemoryStore(), Inbox: dedup, Logger: slog.New(slog.DiscardHandler)}
	c, err := consumer.New(consumer.Config{Brokers: brokers, GroupID: "support-agent",
		RequestsTopic: "agent.requests", ResultsTopic: "agent.results", DeadLetterTopic: "agent.requests.dlq",
		Logger: slog.New(slog.DiscardHandler)}, consumer.RunnerHandler(runner))
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()

	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	cfg.Producer.Return.Successes = true
	client, err := sarama.NewClient(brokers, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	produce(client, "6f1b7c1e-2d8f-4a53-9c1e-0f6f3a3c2b10", "please refund order A-1")
	produce(client, "0b9c4f4e-8a1d-4c55-9d7e-1f2a3b4c5d6e", "where is my parcel?")
	waitUntil(func() bool { return c.Stats().Records == 2 }) // one answered, one dead-lettered

	fixed.Store(true) // the fix is deployed
	letters, err := deadletter.Read(ctx, client, "agent.requests.dlq", deadletter.Filter{Reason: "bug 42"})
	if err != nil {
		log.Fatal(err)
	}
	for _, l := range letters {
		fmt.Printf("%s %s: %s\n", l.ID(), l.Kind, l.Reason)
	}
	opts := deadletter.Options{Client: client, Inbox: dedup, Note: "alice: bug 42 fixed", Logger: slog.New(slog.DiscardHandler)}
	for range 2 {
		outcomes, err := deadletter.Redrive(ctx, opts, letters)
		if err != nil {
			log.Fatal(err)
		}
		for _, o := range outcomes {
			fmt.Println(o.Letter.RequestID, o.Action, o.Err)
		}
		waitUntil(func() bool { return c.Stats().Results == 2 }) // the re-driven request is answered
	}

	stop()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	s := c.Stats()
	fmt.Printf("results %d, dead letters %d\n", s.Results, s.DeadLetters)
	// Output:
	// agent.requests.dlq/0/0 permanent: turn 6f1b7c1e-2d8f-4a53-9c1e-0f6f3a3c2b10 attempt 1: model: permanent: bug 42: the refund tool is misconfigured
	// 6f1b7c1e-2d8f-4a53-9c1e-0f6f3a3c2b10 redriven <nil>
	// 6f1b7c1e-2d8f-4a53-9c1e-0f6f3a3c2b10 skipped: done <nil>
	// results 2, dead letters 1
}

// waitUntil polls cond for up to a minute.
func waitUntil(cond func() bool) {
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			log.Fatal("not within a minute")
		}
	}
}

// produce sends a request of conversation c-7731 to agent.requests, keyed by its conversation.
func produce(client sarama.Client, id, text string) {
	req := turn.Request{Schema: turn.SchemaVersion, ID: id, ConversationID: "c-7731", UserID: "u-12", Text: text}
	value, err := req.Encode()
	if err != nil {
		log.Fatal(err)
	}
	p, err := sarama.NewSyncProducerFromClient(client)
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: "agent.requests",
		Key: sarama.StringEncoder(req.ConversationID), Value: sarama.ByteEncoder(value)}); err != nil {
		log.Fatal(err)
	}
}
