package turnstile_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/uuid"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turntest"
)

// The wiring of the package doc, run against an in-process Kafka broker: one request in,
// one turn, one result out.
func Example() {
	brokers, stop := demoBroker("agent.requests", "agent.results", "agent.requests.dlq")
	defer stop()

	// The host's model: here, one that answers in context.
	myModel := turn.ModelFunc(func(ctx context.Context, in turn.Input) (turn.Output, error) {
		answer := fmt.Sprintf("You said %q; %d earlier events.", in.Request.Text, in.Session.EventCount)
		return turn.Output{Events: []session.Event{{Author: "assistant", Text: answer}}}, nil
	})
	// In production: the PostgreSQL stores of session/sqlsession and inbox/sqlinbox.
	sessions, dedup := session.NewMemoryStore(), inbox.NewMemoryInbox()

	runner := &turn.Runner{Model: myModel, Sessions: sessions, Inbox: dedup}
	c, err := consumer.New(consumer.Config{
		Brokers:         brokers,
		GroupID:         "support-agent",
		RequestsTopic:   "agent.requests",
		ResultsTopic:    "agent.results",
		DeadLetterTopic: "agent.requests.dlq",
		Logger:          slog.New(slog.DiscardHandler),
	}, consumer.RunnerHandler(runner))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()

	send(brokers, turn.Request{ID: uuid.NewString(), ConversationID: "c-7731", UserID: "u-12", Text: "where is my refund?"})
	res := receive(brokers, "agent.results")
	fmt.Println(res.ConversationID, res.Text)

	cancel()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	// Output: c-7731 You said "where is my refund?"; 0 earlier events.
}

func demoBroker(topics ...string) (brokers []string, stop func()) {
	cluster, err := turntest.Start(turntest.Options{})
	if err != nil {
		log.Fatal(err)
	}
	var ts []turntest.Topic
	for _, name := range topics {
		ts = append(ts, turntest.Topic{Name: name, Partitions: 1})
	}
	if _, err := turntest.CreateTopics(context.Background(), cluster.Brokers(), nil, ts...); err != nil {
		log.Fatal(err)
	}
	return cluster.Brokers(), cluster.Close
}

func send(brokers []string, req turn.Request) {
	data, err := req.Encode()
	if err != nil {
		log.Fatal(err)
	}
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	cfg.Producer.Return.Successes = true
	p, err := sarama.NewSyncProducer(brokers, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: "agent.requests", Key: sarama.StringEncoder(req.ConversationID), Value: sarama.ByteEncoder(data)}); err != nil {
		log.Fatal(err)
	}
}

func receive(brokers []string, topic string) turn.Result {
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	c, err := sarama.NewConsumer(brokers, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	pc, err := c.ConsumePartition(topic, 0, sarama.OffsetOldest)
	if err != nil {
		log.Fatal(err)
	}
	defer pc.Close()
	select {
	case msg := <-pc.Messages():
		res, err := turn.DecodeResult(msg.Value)
		if err != nil {
			log.Fatal(err)
		}
		return res
	case <-time.After(time.Minute):
		log.Fatal("no result within a minute")
	}
	return turn.Result{}
}
