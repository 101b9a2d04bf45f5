// Package turntest is turnstile's test kit for hosts: what a service built on turnstile needs
// to test its own handler against Kafka, and its own side effects against the crash table.
//
// # A Kafka cluster
//
// [NewCluster] gives a test a cluster: by default an in-process kfake cluster
// (github.com/twmb/franz-go/pkg/kfake, a Kafka wire-protocol broker written in Go) that sarama
// reaches over TCP on 127.0.0.1, or, when the environment variable TURNSTILE_KAFKA_BROKERS
// holds a comma separated list of host:port, a real cluster. Tests are written the same way
// for both: they create their topics with [Cluster.CreateTopic] and name groups and
// transactional ids with [Cluster.Unique], so that parallel tests and repeated runs never
// share state on a real cluster.
//
// # In a program
//
// Every helper that takes a testing.TB has a context form that returns an error instead
// ([NewClusterContext], [Cluster.CreateTopicContext], [Cluster.ProduceContext],
// [Cluster.ReadResultsContext], ...); the testing.TB form is a thin wrapper over it. A program
// (a demo, a load script, a local dev loop: examples/devloop) uses those. [Start] starts kfake
// whatever TURNSTILE_KAFKA_BROKERS says (the examples run on it), and [CreateTopics] creates
// topics with the names given on any cluster.
//
// # Requests, results and dead letters
//
// [Cluster.ProduceRequest] writes a turn.Request as its producer would (keyed by the
// conversation id, placed by murmur2 as a Java producer places it); [Cluster.ReadResults]
// and [Cluster.ReadDeadLetters] read the consumer's output back, decoded.
//
// A host's test runs its own agent on the embedded broker with the consumer it ships:
//
//	kc := turntest.NewCluster(t, turntest.Options{})
//	requests, results, dlq := kc.CreateTopic(t, "requests", 3), kc.CreateTopic(t, "results", 3), kc.CreateTopic(t, "dlq", 3)
//	runner := &turn.Runner{Model: myModel{payments: turntest.NewEffects()}, Sessions: session.NewMemoryStore(), Inbox: inbox.NewMemoryInbox()}
//	c, err := consumer.New(consumer.Config{Brokers: kc.Brokers(), GroupID: kc.Unique("svc"), RequestsTopic: requests,
//		ResultsTopic: results, DeadLetterTopic: dlq, Sarama: kc.Config()}, consumer.RunnerHandler(runner))
//	require.NoError(t, err)
//	ctx, cancel := context.WithCancel(context.Background())
//	done := make(chan error, 1)
//	go func() { done <- c.Run(ctx) }()
//	defer func() { cancel(); require.NoError(t, <-done) }()
//
//	kc.ProduceRequest(t, requests, turntest.NewRequest("c-1", "u-1", "where is my refund?"))
//	got := kc.ReadResults(t, results, 1, time.Minute)
//
// # The crash harness
//
// [CheckCrashes] runs the host's turn.ModelClient through a turn.Runner on memory stores,
// crashes the turn at each point of the crash table (docs/DESIGN.md), redelivers it, and fails
// the test when a side effect the model performed through [Effects] happened more often than
// one run of the turn performs it: the host's duty under G3 is to key every side effect with
// turn.ToolKey from something stable across re-runs. An effect is identified by its key; two
// effects of one run that look alike (two refunds of the same amount) are two effects:
//
//	turntest.CheckCrashes(t, turntest.CrashConfig{
//		NewModel: func(fx *turntest.Effects) turn.ModelClient { return myModel{payments: fx} },
//	})
//
// With compaction (a small HistoryLimit or ContextBudget set through CrashConfig.Runner, and
// CrashConfig.History for earlier turns to fold), the harness crashes during and after the
// compaction step too, and checks that a finished compaction never runs again, that each
// turn that compacted stores its one checkpoint, that the checkpoints chain from seq 1 in
// whole turns, and that every model call saw the latest summary and every event after it.
//
// The helpers that take a testing.TB fail the test (t.Fatalf) on error, so call them from the
// test's own goroutine, never from a goroutine it started. A test that needs a service it
// cannot find skips with the reason; under CI (CI=true) it fails instead. kfake is always
// available, so this concerns a TURNSTILE_KAFKA_BROKERS that cannot be reached and a missing
// kcat binary.
package turntest
