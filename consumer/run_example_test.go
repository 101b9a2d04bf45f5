package consumer_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/turnstile-go/turnstile/consumer"
	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
)

// Graceful shutdown: when Run's context ends (SIGTERM, through signal.NotifyContext in a
// main), the member starts no new turn, gives the turns in flight Config.ShutdownTimeout to
// finish, publishes and commits what finished, leaves the group and returns nil.
func ExampleConsumer_Run() {
	kafka := startKafka("requests", "results", "dlq")
	defer kafka.Close()
	started, release := make(chan struct{}), make(chan struct{})
	model := turn.ModelFunc(func(ctx context.Context, in turn.Input) (turn.Output, error) {
		close(started) // one request in this example
		select {
		case <-release:
			return turn.Output{Events: []session.Event{{Text: "finished during the drain"}}}, nil
		case <-ctx.Done(): // past ShutdownTimeout: abandoned, and redone by the next owner
			return turn.Output{}, ctx.Err()
		}
	})
	runner := &turn.Runner{Model: model, Sessions: session.NewMemoryStore(), Inbox: inbox.NewMemoryInbox()}
	c, err := consumer.New(consumer.Config{
		Brokers: kafka.ListenAddrs(), GroupID: "agents",
		RequestsTopic: "requests", ResultsTopic: "results", DeadLetterTopic: "dlq",
		ShutdownTimeout: 20 * time.Second,
		Logger:          slog.New(slog.DiscardHandler),
	}, consumer.RunnerHandler(runner))
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background()) // in main: signal.NotifyContext(ctx, syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()

	produceRequests(kafka.ListenAddrs(), "requests", 1)
	<-started
	stop() // the turn is in flight
	select {
	case err := <-done:
		log.Fatalf("Run returned before its turn finished: %v", err)
	case <-time.After(200 * time.Millisecond):
		fmt.Println("draining")
	}
	close(release)
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	s := c.Stats()
	fmt.Printf("Run returned: turns %d, results %d, abandoned %d\n", s.Turns, s.Results, s.Abandoned)
	fmt.Println(readValues(kafka.ListenAddrs(), "results", 1, sarama.ReadUncommitted)[0].Text)
	// Output:
	// draining
	// Run returned: turns 1, results 1, abandoned 0
	// finished during the drain
}

// The transactional mode: a member's results, dead letters and offsets commit in Kafka
// transactions, so a reader with isolation.level=read_committed sees one result per request id
// through any crash, and needs no dedup of its own.
func ExampleTransactional() {
	kafka := startKafka("requests", "results", "dlq")
	defer kafka.Close()
	model := turn.ModelFunc(func(_ context.Context, in turn.Input) (turn.Output, error) {
		return turn.Output{Events: []session.Event{{Text: "re: " + in.Request.Text}}}, nil
	})
	runner := &turn.Runner{Model: model, Sessions: session.NewMemoryStore(), Inbox: inbox.NewMemoryInbox()}
	c, err := consumer.New(consumer.Config{
		Brokers: kafka.ListenAddrs(), GroupID: "agents",
		RequestsTopic: "requests", ResultsTopic: "results", DeadLetterTopic: "dlq",
		Transactional: &consumer.Transactional{
			IDPrefix:   "agents",
			InstanceID: "pod-0", // a stable name per member: a restart fences its predecessor at once
		},
		Logger: slog.New(slog.DiscardHandler),
	}, consumer.RunnerHandler(runner))
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()

	produceRequests(kafka.ListenAddrs(), "requests", 3)
	for _, res := range readValues(kafka.ListenAddrs(), "results", 3, sarama.ReadCommitted) {
		fmt.Println(res.RequestID, res.Text)
	}
	stop()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	// Output:
	// 00000000-0000-4000-8000-000000000001 re: message 0
	// 00000000-0000-4000-8000-000000000002 re: message 1
	// 00000000-0000-4000-8000-000000000003 re: message 2
}

// A replay into a sandbox: the production requests run again, under a group and stores of
// the replay's own, to see what a changed prompt would answer. The model learns it is a replay
// (turn.Input.Replay) and stubs its side effects; results go to the replay's own topic, and
// with StopAtEnd Run returns once it has served what the topic held when it started.
func ExampleReplay() {
	kafka := startKafka("agent.requests", "agent.results", "agent.requests.dlq", "replay.results")
	defer kafka.Close()
	produceRequests(kafka.ListenAddrs(), "agent.requests", 2) // served by production earlier

	newPrompt := turn.ModelFunc(func(_ context.Context, in turn.Input) (turn.Output, error) {
		return turn.Output{Events: []session.Event{{Text: fmt.Sprintf("v2 prompt, replay %t: %s", in.Replay, in.Request.Text)}}}, nil
	})
	production := consumer.Replay{
		ProductionGroupID:         "support-agent",
		ProductionResultsTopic:    "agent.results",
		ProductionDeadLetterTopic: "agent.requests.dlq",
		StopAtEnd:                 true,
	}
	cfg := consumer.Config{
		Brokers: kafka.ListenAddrs(), GroupID: "support-agent-replay-1",
		RequestsTopic: "agent.requests", ResultsTopic: "replay.results", // no DeadLetterTopic: dead letters are logged
		Replay: &production,
		Logger: slog.New(slog.DiscardHandler),
	}
	runner := &turn.Runner{Model: newPrompt, Sessions: session.NewMemoryStore(), Inbox: inbox.NewMemoryInbox()}
	c, err := consumer.New(cfg, consumer.RunnerHandler(runner))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := c.Run(ctx); err != nil { // returns at the end of the recording
		log.Fatal(err)
	}
	for _, res := range readValues(kafka.ListenAddrs(), "replay.results", 2, sarama.ReadUncommitted) {
		fmt.Println(res.Text)
	}

	// A replay that would publish to production is refused.
	cfg.ResultsTopic = "agent.results"
	_, err = consumer.New(cfg, consumer.RunnerHandler(runner))
	fmt.Println(err)
	// Output:
	// v2 prompt, replay true: message 0
	// v2 prompt, replay true: message 1
	// consumer: invalid Config: ResultsTopic: "agent.results" is production's results topic: a replay publishes only to topics of its own (or, empty, nowhere)
}

// Health for Kubernetes probes: ReadyHandler answers 503 until the member is in its group with
// a partition to serve (and while a rate limit pauses them all), LiveHandler 200 while Run
// runs.
func ExampleConsumer_Health() {
	kafka := startKafka("requests", "results", "dlq")
	defer kafka.Close()
	model := turn.ModelFunc(func(_ context.Context, in turn.Input) (turn.Output, error) {
		return turn.Output{Events: []session.Event{{Text: "ok"}}}, nil
	})
	runner := &turn.Runner{Model: model, Sessions: session.NewMemoryStore(), Inbox: inbox.NewMemoryInbox()}
	c, err := consumer.New(consumer.Config{
		Brokers: kafka.ListenAddrs(), GroupID: "agents",
		RequestsTopic: "requests", ResultsTopic: "results", DeadLetterTopic: "dlq",
		Logger: slog.New(slog.DiscardHandler),
	}, consumer.RunnerHandler(runner))
	if err != nil {
		log.Fatal(err)
	}
	// In main: mux.Handle("/readyz", c.ReadyHandler()); mux.Handle("/livez", c.LiveHandler())
	probe := func() {
		ready, live := httptest.NewRecorder(), httptest.NewRecorder()
		c.ReadyHandler().ServeHTTP(ready, httptest.NewRequest("GET", "/readyz", nil))
		c.LiveHandler().ServeHTTP(live, httptest.NewRequest("GET", "/livez", nil))
		h := c.Health()
		fmt.Printf("ready %d, live %d, partitions %v, reason %q\n", ready.Code, live.Code, h.Partitions, h.Reason())
	}
	probe()

	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	waitUntil("the member is ready", func() bool { return c.Health().Ready() })
	probe()
	stop()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	probe()
	// Output:
	// ready 503, live 503, partitions [], reason "not running"
	// ready 200, live 200, partitions [0], reason ""
	// ready 503, live 503, partitions [], reason "not running"
}

// Outcomes lists the values of the turnstile.outcome attribute on the turn metrics, for a
// dashboard or an alert that names each.
func ExampleOutcomes() {
	fmt.Println(strings.Join(consumer.Outcomes(), " "))
	// Output: done replayed dead_lettered abandoned
}

// ResultLimit is the largest Result the consumer can publish for a request: the producer's
// Producer.MaxMessageBytes less the room of the result record's key and headers. The consumer
// puts it in every Handler call's context (turn.ResultLimitOf); a Handler of the host's own
// that publishes elsewhere can compute it the same way.
func ExampleResultLimit() {
	req := turn.Request{Schema: turn.SchemaVersion, ID: "6f1b7c1e-2d8f-4a53-9c1e-0f6f3a3c2b10",
		ConversationID: "c-7731", UserID: "u-12", Headers: map[string]string{"tenant": "acme"}}
	for _, forward := range [][]string{nil, {"tenant"}} {
		l := consumer.ResultLimit(1_000_000, &req, forward)
		fmt.Println(l.Bytes, l.Source)
	}
	// Output:
	// 999172 the producer's Producer.MaxMessageBytes of 1000000 bytes, less room for the record's key and headers
	// 999152 the producer's Producer.MaxMessageBytes of 1000000 bytes, less room for the record's key and headers
}

// Validate names every field of a Config that is missing or out of range; New calls it.
func ExampleConfig_Validate() {
	cfg := consumer.Config{Brokers: []string{"kafka:9092"}, RequestsTopic: "agent.requests", MaxInFlight: -1}
	fmt.Println(cfg.Validate())
	// Output:
	// consumer: invalid Config: GroupID: empty
	// ResultsTopic: empty
	// DeadLetterTopic: empty
	// MaxInFlight: negative (-1)
}

// New checks the Runner too, so that a mistake in the wiring fails at start-up instead of
// dead-lettering every request.
func ExampleNew() {
	cfg := consumer.Config{Brokers: []string{"kafka:9092"}, GroupID: "support-agent",
		RequestsTopic: "agent.requests", ResultsTopic: "agent.results", DeadLetterTopic: "agent.requests.dlq"}
	_, err := consumer.New(cfg, consumer.RunnerHandler(&turn.Runner{Sessions: session.NewMemoryStore()}))
	fmt.Println(err)

	cfg.MaxAttempts = 5 // the Runner's MaxAttempts (default 3) is the one that counts
	model := turn.ModelFunc(func(_ context.Context, in turn.Input) (turn.Output, error) {
		return turn.Output{Events: []session.Event{{Text: "ok"}}}, nil
	})
	runner := &turn.Runner{Model: model, Sessions: session.NewMemoryStore(), Inbox: inbox.NewMemoryInbox()}
	_, err = consumer.New(cfg, consumer.RunnerHandler(runner))
	fmt.Println(err)
	// Output:
	// consumer: invalid Handler: turn: Runner.Model is nil
	// consumer: Config disagrees with the Runner of RunnerHandler: MaxAttempts: 5, but the Runner's is 3 (its default); set it on the Runner only
}

// startKafka starts an in-process Kafka broker (kfake) with the topics, one partition each.
func startKafka(topics ...string) *kfake.Cluster {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topics...))
	if err != nil {
		log.Fatal(err)
	}
	return cluster
}

// waitUntil polls cond for up to a minute.
func waitUntil(what string, cond func() bool) {
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			log.Fatalf("%s: not within a minute", what)
		}
	}
}

// readValues reads the first n results of topic's partition 0.
func readValues(brokers []string, topic string, n int, isolation sarama.IsolationLevel) []turn.Result {
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	cfg.Consumer.IsolationLevel = isolation
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
	var out []turn.Result
	for len(out) < n {
		select {
		case msg := <-pc.Messages():
			res, err := turn.DecodeResult(msg.Value)
			if err != nil {
				log.Fatal(err)
			}
			out = append(out, res)
		case <-time.After(time.Minute):
			log.Fatalf("%d of %d results on %s within a minute", len(out), n, topic)
		}
	}
	return out
}
