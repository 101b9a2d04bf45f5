package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
)

// A Handler of the host's own around the Runner: requests without a tenant are refused with
// turn.Permanent, so the consumer dead-letters them at once; the others run as turns.
func ExampleHandlerFunc() {
	model := turn.ModelFunc(func(_ context.Context, in turn.Input) (turn.Output, error) {
		return turn.Output{Events: []session.Event{{Text: "hello, " + in.Request.Metadata["tenant"]}}}, nil
	})
	runner := consumer.RunnerHandler(&turn.Runner{Model: model, Sessions: session.NewMemoryStore(),
		Inbox: inbox.NewMemoryInbox(), Logger: slog.New(slog.DiscardHandler)})
	h := consumer.HandlerFunc(func(ctx context.Context, req turn.Request) (*turn.Result, error) {
		if req.Metadata["tenant"] == "" {
			return nil, turn.Permanent(errors.New("no tenant in metadata"))
		}
		return runner.Handle(ctx, req)
	})

	req := turn.Request{Schema: turn.SchemaVersion, ID: "6f1b7c1e-2d8f-4a53-9c1e-0f6f3a3c2b10",
		ConversationID: "c-7731", UserID: "u-12", Text: "hi"}
	_, err := h.Handle(context.Background(), req)
	fmt.Println(turn.Classify(err), err)
	req.Metadata = map[string]string{"tenant": "acme"}
	res, err := h.Handle(context.Background(), req)
	fmt.Println(turn.Classify(err), res.Text) // consumer.New(cfg, h) serves records with h
	// Output:
	// permanent permanent: no tenant in metadata
	// none hello, acme
}

// Stats counts what a member did: here three requests, each a turn with its result published
// and its offset marked for commit.
func ExampleConsumer_Stats() {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "requests", "results", "dlq"))
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()
	model := turn.ModelFunc(func(_ context.Context, in turn.Input) (turn.Output, error) {
		return turn.Output{Events: []session.Event{{Text: "ok"}}}, nil
	})
	runner := &turn.Runner{Model: model, Sessions: session.NewMemoryStore(), Inbox: inbox.NewMemoryInbox()}
	c, err := consumer.New(consumer.Config{
		Brokers: cluster.ListenAddrs(), GroupID: "agents",
		RequestsTopic: "requests", ResultsTopic: "results", DeadLetterTopic: "dlq",
		Logger: slog.New(slog.DiscardHandler),
	}, consumer.RunnerHandler(runner))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()

	produceRequests(cluster.ListenAddrs(), "requests", 3)
	for c.Stats().Records < 3 {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	s := c.Stats()
	fmt.Printf("records %d, turns %d, results %d, dead letters %d, retries %d\n",
		s.Records, s.Turns, s.Results, s.DeadLetters, s.Retries)
	// Output: records 3, turns 3, results 3, dead letters 0, retries 0
}

// A process that runs several Consumers reports them as one.
func ExampleStats_Add() {
	a := consumer.Stats{Records: 10, Turns: 9, DeadLetters: 1, PeakBuffered: 40}
	b := consumer.Stats{Records: 5, Turns: 5, PeakBuffered: 12}
	sum := a.Add(b)
	fmt.Println(sum.Records, sum.Turns, sum.DeadLetters, sum.PeakBuffered)
	// Output: 15 14 1 40
}

// produceRequests sends n requests of one conversation to topic.
func produceRequests(brokers []string, topic string, n int) {
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	cfg.Producer.Return.Successes = true
	p, err := sarama.NewSyncProducer(brokers, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	for i := range n {
		req := turn.Request{Schema: turn.SchemaVersion, ID: fmt.Sprintf("00000000-0000-4000-8000-%012d", i+1),
			ConversationID: "c-1", UserID: "u-1", Text: fmt.Sprint("message ", i)}
		data, err := req.Encode()
		if err != nil {
			log.Fatal(err)
		}
		if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(req.ConversationID),
			Value: sarama.ByteEncoder(data)}); err != nil {
			log.Fatal(err)
		}
	}
}
