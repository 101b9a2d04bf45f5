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
// Each is proven by tests in this module, under crashes and rebalances.
//
//   - G1 order: the turns of one conversation apply one at a time, in the order of their
//     records in the partition.
//   - G2 no loss: a request's offset is committed only after its outcome is durable (result
//     stored and published, or dead-lettered); a crash anywhere means redelivery, never a gap.
//   - G3 effectively once: one request id gives at most one turn in the session history and
//     one stored result; tools get idempotency keys derived from the request id
//     ([turn.ToolKey]) so their side effects happen once even when the model runs again.
//   - G4 context survives: the session lives in a shared durable store keyed by
//     conversation; any worker continues any conversation.
//   - G5 no stall: a poison or slow record cannot hold its partition: a whole-turn deadline,
//     bounded attempts (crash loops count), then the dead-letter topic with the reason in
//     headers.
//   - G6 bounded: in-flight records and turns are bounded by configuration; a rate-limited
//     model ([turn.RetryAfter]) pauses the partitions instead of failing turns.
//   - G7 isolation: a request only reaches the session of its own (app, user, conversation);
//     a record naming another user's conversation is dead-lettered, never served.
//
// # What the host must do
//
// Make every side effect of a turn idempotent on [turn.ToolKey] (or [turn.Input.ToolKey]):
// the model may be called again for the same request after a crash. Derive the call id from
// something the re-run repeats (the tool's name and ordinal in the turn, or a hash of its
// arguments), never from the provider's tool-call id, which changes with every response;
// [github.com/turnstile-go/turnstile/turntest.CheckCrashes] checks it across the crash table. Readers of the results
// topic dedup on the request-id header: a result may be published twice when a worker dies
// between publishing and committing. Return [turn.Permanent] for errors retrying cannot fix,
// [turn.RetryAfter] for rate limits and [turn.Unavailable] for outages that cannot be the
// request's fault (a model server refusing connections); any other error is a failed attempt.
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
// The packages: turn (envelopes, Runner, error kinds), session and inbox (interfaces,
// in-memory and SQL implementations, conformance suites), consumer (the Kafka consumer),
// workflow (Temporal mode: a durable workflow per conversation, fed by the consumer through a
// bridge, with the same guarantees and Temporal's history as the record). See the examples
// directory for runnable programs: examples/quickstart runs the whole thing on an embedded
// broker with one command, examples/temporal does it in Temporal mode.
package turnstile

import (
	// Imported for the doc links above.
	_ "github.com/turnstile-go/turnstile/consumer"
	_ "github.com/turnstile-go/turnstile/inbox"
	_ "github.com/turnstile-go/turnstile/session"
	_ "github.com/turnstile-go/turnstile/turn"
)
