// Package turnstile runs LLM agent turns from Kafka without losing a message, doubling a side
// effect or forgetting a conversation.
//
// Requests arrive on a Kafka topic keyed by conversation. turnstile runs each one as a turn:
// in order per conversation, once in effect however often Kafka redelivers it, with the
// conversation's context in a shared durable store so that any worker can continue it after a
// rebalance or a crash. The host plugs in its model call ([turn.ModelClient]) and its storage
// ([session.Store], [inbox.Inbox]); turnstile brings a sarama consumer group that assembles
// them ([consumer.New]), PostgreSQL and SQLite stores, and conformance suites
// (session/sessiontest, inbox/inboxtest) for anyone writing another store.
//
// # Guarantees
//
// This is the one statement of turnstile's guarantees; the README and the package docs refer
// to it. Each holds under crashes and rebalances, in direct mode (package consumer) and in
// Temporal mode (package workflow), as long as the host does its part ("you make sure").
// docs/DESIGN.md has the guarantee index: for each guarantee, the code that keeps it and the
// tests that prove it.
//
//   - G1 order: the turns of one conversation apply one at a time, in the order of their
//     records in the partition (in Temporal mode, in the order of their sequence numbers
//     when the producer sets them). Different conversations, even in one partition, do not
//     wait for each other. You make sure producers key requests by conversation id.
//   - G2 no loss: a request's offset is committed only after its outcome is durable (result
//     stored and published, dead-lettered, or handed to its workflow); a crash anywhere means
//     redelivery, never a gap. You make sure the results and dead-letter topics exist, with
//     replication you trust.
//   - G3 effectively once: one request id gives at most one turn in the session history and
//     one stored result. You make sure every side effect of a turn takes [turn.Input.ToolKey]
//     ([turn.SessionToolKey], scoped to the session like the inbox key) as its idempotency
//     key, since the model may run again after a crash, with a call id the re-run repeats (the
//     tool's name and ordinal in the turn, or a hash of its arguments; never the provider's
//     tool-call id, which changes with every response;
//     [github.com/turnstile-go/turnstile/turntest.CheckCrashes] checks it across the crash
//     table), and that readers of the results topic dedup on the request-id header, since a
//     result may be published twice when a worker dies between publishing and committing (or
//     turn on consumer.Config.Transactional and read them with isolation.level=read_committed:
//     one result per request id).
//   - G4 context survives: the session (history and state) lives in a shared durable store
//     keyed by conversation; any worker continues any conversation after any rebalance.
//     Context also survives length: the model's input stays under [turn.Runner]'s
//     ContextBudget, and no event leaves its view without being covered by a stored summary
//     (a checkpoint, [session.Checkpoint]) that records what it covers; large inputs travel as
//     references to an attachment store ([attachment.Store]), never truncated silently. You
//     make sure all workers share one durable [session.Store] and [inbox.Inbox] (PostgreSQL,
//     say), and an attachment store when requests carry attachments.
//   - G5 no stall: a poison or slow record cannot hold its partition: a whole-turn deadline,
//     bounded attempts (crash loops count: crashes while the request ran alone), bounded rate
//     limits, then the dead-letter topic with the reason in headers. You make sure errors that
//     retrying cannot fix are [turn.Permanent], and that someone reads the dead-letter topic.
//   - G6 bounded: records buffered, turns in flight and the goroutines that run them are
//     bounded by configuration; a rate-limited model pauses the partitions instead of
//     failing turns. You make sure the model returns [turn.RetryAfter] on a rate limit (HTTP
//     429) and [turn.Unavailable] on an outage that cannot be the request's fault.
//   - G7 isolation: a request only reaches the session of its own (app, user, conversation);
//     a record naming another user's conversation is dead-lettered, never served, and a copied
//     request id cannot replay or complete another user's request, nor share its tool keys.
//     You make sure user_id comes from an authenticated source.
//
// # Wiring
//
// A host's main.go builds a [turn.Runner] from its model and two stores, hands it to
// [consumer.New] and calls Run, which blocks until its context ends and then drains:
//
//	runner := &turn.Runner{Model: myModel, Sessions: sessions, Inbox: dedup}
//	c, err := consumer.New(consumer.Config{
//		Brokers:         []string{"kafka:9092"},
//		GroupID:         "support-agent",
//		RequestsTopic:   "agent.requests",
//		ResultsTopic:    "agent.results",
//		DeadLetterTopic: "agent.requests.dlq",
//	}, consumer.RunnerHandler(runner))
//	if err != nil {
//		return err
//	}
//	return c.Run(ctx)
//
// The packages: turn (envelopes, Runner with its context budget and compaction, error kinds,
// retention), turn/agent (the agent loop, its journaled steps and tools) with the
// turn/chatcompletion and turn/anthropic clients, session, inbox and attachment (interfaces,
// in-memory and SQL implementations, conformance suites), consumer (the Kafka consumer),
// workflow (Temporal mode: a durable workflow per conversation, fed by the consumer through a
// bridge, with the same guarantees and Temporal's history as the record), deadletter
// (reading and re-driving dead letters), turntest (the test kit: an embedded broker, the
// crash harness). See the examples
// directory for runnable programs: examples/quickstart runs the whole thing on an embedded
// broker with one command, examples/temporal does it in Temporal mode.
package turnstile

import (
	// Imported for the doc links above.
	_ "github.com/turnstile-go/turnstile/attachment"
	_ "github.com/turnstile-go/turnstile/consumer"
	_ "github.com/turnstile-go/turnstile/inbox"
	_ "github.com/turnstile-go/turnstile/session"
	_ "github.com/turnstile-go/turnstile/turn"
)
