// Package turn runs one request as one idempotent turn of an agent: the same request run any
// number of times, on any worker, after any crash, adds its turn to the conversation's session
// once and yields one Result.
//
// It holds the envelopes that travel on Kafka ([Request] in, [Result] out, validated by
// [Decoder]), the host's model call ([ModelClient]), the [Runner] that assembles a model, a
// session store and an inbox into a turn, the error kinds that steer retries ([Permanent],
// [RetryAfter], [Unavailable], [Classify]) and the idempotency keys of side effects
// ([ToolKey]). The consumer (package consumer) and the Temporal activity (package workflow)
// both run turns through a Runner; the guarantees they keep together are stated once, in the
// package doc of the module root (G1-G7), with the code and tests that keep each indexed in
// docs/DESIGN.md.
//
// # The steps of one turn
//
// [Runner.Run] does, for one request:
//
//  1. Validate the request with the Runner's Decoder; a bad one is dead-lettered at once.
//  2. Begin it in the inbox under [Runner.InboxKey] (the request id scoped to its app, user and
//     conversation). The inbox counts the attempt and says where the request stands. Done:
//     return the stored Result, Replayed set, without calling the model. Dead: return the
//     [*DeadLetterError] again. More attempts than MaxAttempts (earlier deliveries crashed):
//     dead-letter it. New or in progress: go on.
//  3. Under the whole-turn deadline (TurnTimeout): get or create the session, reading back as
//     far as its latest checkpoint's range needs; when an earlier delivery began, look for
//     this request's turn in the history and reuse it if it is there. Check that each of the
//     request's attachments ([Request.Attachments]) is in [Runner.Attachments] for its user;
//     a missing one is dead-lettered with its id.
//  4. Keep the model's input within [Runner.ContextBudget]: when it would not fit, or more
//     events are uncovered than HistoryLimit, fold the oldest turns into a new summary (the
//     journal step [CompactStep]); a request that cannot fit is dead-lettered
//     ([ErrOverBudget]). Call the model with the request, the latest summary
//     ([Input.Summary]), the events after it and the attempt number.
//  5. Append the turn (a new checkpoint when step 4 compacted, the user's message, then the
//     model's events, each with an id derived from the request id) at the session version
//     read in step 3: a writer that lost the race gets session.ErrConflict and appends
//     nothing.
//  6. Complete the request in the inbox with the encoded Result, and return it. When the
//     session store and the inbox share one *sql.DB (session/sqlsession and inbox/sqlinbox),
//     steps 5 and 6 are one transaction.
//
// # Where a crash lands
//
// A crash (or a revoke, or a timeout) at any point leaves a state from which the next delivery
// of the same request finishes the turn once:
//
//	crash after          on the next delivery
//	inbox Begin          the attempt is counted; the turn runs (attempt 2)
//	model call           the model runs again; side effects dedup on ToolKey
//	session append       the turn is found in the history and reused: no second model call
//	inbox Complete       Begin says done: the stored Result is returned (Replayed)
//	result published     the consumer publishes it again; readers dedup on the request id
//
// With the joint transaction of step 6 the "session append" row cannot happen. A worker that
// lost its partition but is still mid-turn (a zombie) is fenced by step 5's expected version.
//
// # What each error kind means to the consumer
//
// [Classify] sorts every error of Run (and of a ModelClient) into a [Kind]; the consumer
// (consumer.Handler) and the Temporal activity act on it:
//
//	KindPermanent    dead-letter the record with the reason, commit its offset; never retried
//	KindAttempt      a failed attempt, counted in the inbox: retry after a backoff; the
//	                 Runner dead-letters the request once MaxAttempts are spent
//	KindRateLimited  pause every partition for RetryDelay, then retry; no attempt spent
//	KindUnavailable  a store or model outage: retry after a backoff; no attempt spent
//	KindAbandoned    the caller's context ended (revoke, shutdown): publish and commit
//	                 nothing; the partition's next owner runs the record again
//
// # Steps inside a turn
//
// An agent turn is a loop of steps: a model call, a tool call, another model call. A model
// that runs each step through the turn's step journal ([Input.Journal], [Input.Step],
// [RunStep]; package turn/agent's loop does) has each completed step recorded in the inbox
// before the next starts. When the request runs again (a crash, a revoke, a timeout, a
// failed attempt, a Temporal activity retry), a completed step returns its recorded output
// without running: a kill mid-turn repays no model call that had completed, and only the step
// that was in flight runs again, with the same key ([Step.Key]). With steps the crash table's
// "model call" row becomes "the steps recorded are answered from the journal; the step in
// flight runs again". A step may also be deferred ([Journal.Defer]): a side effect (an email,
// a webhook) recorded as an intent and promoted to the inbox's outbox when the turn commits,
// for a relay (inbox.Relay) to deliver after; a turn that never commits delivers nothing.
// The journal is bounded ([Runner.MaxSteps], [Runner.MaxJournalBytes]); a request whose steps
// no longer match its journal (the agent changed between two runs) is dead-lettered
// (inbox.ErrStepMismatch). docs/DESIGN.md, "Steps inside a turn, and the outbox", has the
// reasons.
//
// # The host's duty for side effects
//
// The model may be called more than once for a request: after a crash between the model call
// and the session append, or after a failed attempt. Every side effect of a turn (a refund, an
// email, a ticket) must therefore be idempotent: pass [Step.Key] of the step that performs it
// (or [Input.ToolKey], or [ToolKey] with the request id) as the idempotency key of the service
// that performs it, so it happens once however often the turn runs. Return [Permanent] for errors retrying cannot fix, [RetryAfter]
// for rate limits, [Unavailable] for outages that cannot be the request's fault; any other
// error is a failed attempt. Readers of the results topic dedup on the request id: a result
// may be published twice when a worker dies between publishing and committing.
package turn
