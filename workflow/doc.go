// Package workflow is turnstile's Temporal mode: a durable workflow per conversation, fed
// from Kafka, that owns the conversation's semantic progress.
//
// # Roles
//
// Kafka is the transport and Temporal's history is the record. The consumer (package
// consumer) reads request records as in direct mode, but its Handler is a Bridge: for each
// request it sends a SignalWithStart to the workflow whose id is BridgeOptions.IDPrefix plus
// the conversation id, and returns once the server accepted the signal, so the record's offset
// commits after a durable hand-off (transport progress). The Bridge is a
// consumer.BatchHandler: with consumer.Config.MaxBatch above 1 (the default is 1, off), a
// conversation's records waiting in the consumer's window go in one signal (several of at most
// 128 KiB each when they are larger), which hands off about 4 times as many records per second
// as one signal each (BENCHMARKS.md, which also
// says why batching is off by default). The conversation workflow then decides
// when the request is applied (semantic progress): one at a time, in Sequence order when the
// producer sets one (a gap holds the later requests), in arrival order otherwise, dropping
// duplicates. Each turn is an activity that runs the same turn.Runner as direct mode, so the
// inbox and the session store keep G3 and G4 exactly as there, and publishes the Result or the
// dead letter with the consumer's topics, headers and placement (KafkaPublisher).
//
// # Wiring
//
// On each worker (client and worker are the SDK's packages, twf its workflow package, whose
// ContextPropagator type the client takes):
//
//	c, err := client.Dial(client.Options{HostPort: hostPort, ContextPropagators: []twf.ContextPropagator{workflow.NewContextPropagator()}})
//	must(err)
//	pub, err := workflow.NewKafkaPublisher(brokers, nil, "agent.results", "agent.requests.dlq")
//	must(err)
//	w, err := workflow.NewWorker(c, "turnstile", worker.Options{}, workflow.WorkerOptions{Runner: runner, Publisher: pub, States: ledger})
//	must(err)
//	must(w.Run(worker.InterruptCh())) // on SIGTERM: the turns in flight finish first
//
// On each consumer member (the consumer hands the bridge each request with its record's
// headers, such as traceparent; the ledger is the durable record of what was handed off, for
// Reconcile):
//
//	bridge, err := workflow.NewBridge(c, workflow.BridgeOptions{TaskQueue: "turnstile", Ledger: ledger})
//	must(err)
//	cons, err := consumer.New(consumer.Config{ /* brokers, group, topics */ }, bridge)
//	must(err)
//	must(cons.Run(ctx))
//
// NewWorker sets worker.Options.WorkerStopTimeout to StopTimeout (the turn activity's
// timeout): the SDK's default of 0 cancels the turn in flight at once on Stop, and the turn is
// redone elsewhere after its heartbeat timeout. HeaderTap is for code that hands the bridge
// requests without turn.Request.Headers; the consumer sets them.
//
// A caller that wants the answer synchronously (an HTTP front door) uses Bridge.Submit: an
// UpdateWithStart whose update id is the request id, answered with the turn's Result.
//
// # What the workflow rests on
//
//   - Signals are received in the workflow's main coroutine (Await on the condition or a
//     non-empty channel, then ReceiveAsync until empty). Receiving them in a separate
//     coroutine lost signals at continue-as-new in measurements on the dev server.
//   - A run continues as new after Config.MaxTurnsPerRun turns, Config.MaxSignalsPerRun
//     signals (the server refuses signals past its per-run limit, 10,000 by default),
//     Config.MaxHistoryEvents events or when the server suggests it. Before it does, it
//     rejects new submit updates (Submit sends them again to the next run), finishes the
//     updates in flight (workflow.AllHandlersFinished) and drains the signal channel; the
//     pending requests (by their positions in the OverflowStore, when the workers have one),
//     the sequence mark and a bounded window of applied request ids travel into the next run.
//     While signals keep arriving the server refuses the continue-as-new command and retries
//     the task, so a run's history can overshoot the thresholds a little.
//   - A run with nothing pending ends after Config.IdleTimeout, saving its State in the
//     workers' StateStore (WorkerOptions.States); the next request starts a new run, which
//     loads it and goes on from the same sequence mark. Without a store idle runs keep waiting.
//   - Activity inputs carry the request and its ids, never the transcript nor a summary of
//     it: the session store holds the context, which the Runner reads and writes inside the
//     activity, so a run's history stays small however long the conversation (20 turns over
//     300 KB contexts each stay near 30 KB of history in the tests). A request's own text is
//     an input: it travels whole in its signal and in its turn's activity input (and, while
//     pending across continue-as-new, in the OverflowStore's activities), up to
//     BridgeOptions.MaxPayloadBytes; a body too large for that travels as a reference to an
//     attachment store, put there by the producer.
//   - The activity's start-to-close timeout is the Runner's whole-turn deadline plus a margin,
//     it heartbeats every third of WorkerOptions.HeartbeatTimeout (a killed worker's turn is
//     retried elsewhere after that timeout), turn.RetryAfter sets the next retry's delay, and
//     retries are unlimited in number because the inbox stays the authority on attempts: the
//     Runner dead-letters after MaxAttempts, the activity publishes the dead letter, and the
//     workflow moves on.
//
// # Retention and deletion
//
// The user's texts live in three places in Temporal mode: the session store (as in direct
// mode), the workflows' histories (the inputs of signals, updates and activities) and the
// hand-off ledger (SQLLedger: each sequenced request handed off, an idle run's State, the
// overflow of a long backlog). DeleteUser terminates the user's running conversation
// workflows and deletes every run of them with its history (the visibility store finds them
// by TurnstileUser; pass the conversations of the user's sessions for runs without search
// attributes), then the user's ledger rows; "turnstile session delete --user U --temporal
// HOST:PORT" does it before deleting the sessions. RunLedgerPurge (and "turnstile ledger
// purge") deletes hand-offs older than a horizon, on inbox.RunPurge's schedule. The
// namespace's retention period (temporal operator namespace update --retention) is how long
// the server keeps a closed run's history, and so its texts, after the run closed (completed
// idle, continued as new, terminated): a run is deleted at the end of it without any call,
// while a running conversation's history is kept for as long as it runs.
//
// # What carries across runs
//
// A run hands the next one its State: the pending requests, the sequence mark and the dedup
// window. With an OverflowStore (WorkerOptions.States, when it is one: SQLLedger and
// MemoryLedger are), the pending requests wait there at consecutive positions of the
// conversation's queue and the State carries the positions, so the continue-as-new input
// holds ids and counters, never a request's text: at most the dedup window (Config.DedupWindow
// ids of about 40 bytes, at most MaxDedupWindow) plus about 3 KB whatever the conversation's
// length or backlog (39,285 bytes at most over the 11 runs of a 1,000-turn conversation in the
// tests, every payload of their histories under 115 KB). The next runs load them back, oldest
// first, at most Config.MaxCarriedBytes/2 per activity. Without an OverflowStore they travel
// whole in the input.
//
// # Operating it
//
// Queries QueryLastAppliedSequence and QueryStatus say how far a conversation got. With
// Config.SearchAttributes on (register SearchAttributeTypes in the namespace first), list
// queries find a user's conversations (TurnstileUser = 'u-12') and stuck ones
// (TurnstilePending > 0). Bridge.Reconcile compares a workflow's last applied sequence with
// the Ledger's high-water mark and re-sends the gap; Bridge.RunSweeps does it periodically
// for every conversation whose last hand-off is older than a threshold.
//
// A gap that was never handed off (a sequence never sent) cannot be reconciled: it holds its
// conversation until released. Status says whether a conversation is held, since when and
// which sequences it misses; Bridge.Held lists the held conversations (the running workflows
// of the task queue from visibility, narrowed to TurnstilePending > 0 with
// Config.SearchAttributes, each asked its status), and Bridge.WatchHeld reports them as the
// gauges MetricHeldRequests, MetricHeldConversations and MetricHeldOldestAge through
// BridgeOptions.Telemetry. Bridge.Release (the ReleaseUpdateName update; the CLI's turnstile
// release) skips the missing sequences now, and Config.GapTimeout does it once a conversation
// has been held that long: each skipped sequence is a dead letter with the reason GapReason
// (no value; its request-origin header says "gap"; its request-id header is a version 5 UUID of the
// workflow id and the sequence, so that a reader dedups the copies a retried report
// publishes), and the held requests then apply in order.
//
// Dead letters re-drive as in direct mode (deadletter.Redrive, turnstile dlq redrive): the
// re-published record carries the redriven-from header, the bridge marks its envelope
// RedrivenFrom, and the workflow runs it again instead of dropping it as already applied; the
// inbox decides whether it runs (one new turn, one result, the entry done; a second copy
// publishes nothing). A dead letter of Bridge.Submit carries the request-origin header "submit" and the
// workflow-id header, and deadletter.Redrive sends it to the requests topic on its key's
// partition. Changes to the
// workflow's code must keep replaying the histories recorded in testdata (the replay test);
// use workflow.GetVersion for a change to its command sequence.
package workflow
