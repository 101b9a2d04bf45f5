// Package chaos is turnstile's chaos suite: consumer group members as separate OS processes,
// each a turn.Runner on the PostgreSQL stores behind a consumer.Consumer, against a kfake
// broker in a process of its own that keeps its data on disk, all under a seeded schedule of
// faults, then an independent check of what came out.
//
// # The matrix
//
// A run is made in one cell of the matrix ([Config.Cell], [Cells]): [CellByKey] (direct mode,
// ordering by key), [CellByKeyOTel] (the same with the consumer's Config.Telemetry on the
// OpenTelemetry SDK, spans and metrics collected and dropped), [CellByPartition]
// (consumer.OrderByPartition), [CellTransactional] (the consumer's transactional mode; the
// checker reads read_committed) and [CellTemporal] (bridge members and Temporal workers as
// separate processes against a dev server that keeps its state in a database file). The cell
// reaches the child processes in their arguments. Every cell gets the same workload kinds:
// valid requests, invalid records, records of another user's conversation ([Config.Strangers];
// in Temporal mode with the victim's next sequence), requests whose model, session store or
// (Temporal mode) Handler panics ([Config.Panics]), requests the model always rate-limits
// ([Config.Limited]) and poison requests. TestChaosShort walks Cells, so a cell cannot be
// left out of the test command.
//
// # The run
//
// [Run] starts the broker (kfake with DataDir and SyncWrites, one broker on a fixed port of
// 127.0.0.1), creates the requests, results and dead-letter topics, migrates the stores under
// a table prefix of the run's own, and starts [Config.Members] member processes. It then
// produces [Config.Requests] requests over [Config.Conversations] conversations, interleaved,
// each conversation's in its own order, at [Config.Rate] records per second, with a franz-go
// (kgo) client, plus a few records that are not valid requests (they must be dead-lettered)
// and [Config.Poison] requests whose model call kills its member every time (a crash loop:
// they must be dead-lettered once their attempts run out, G5).
//
// While it produces, the schedule (drawn from [Config.Seed]) applies:
//
//   - kill -9 of a member (SIGKILL), which a supervisor restarts after a short pause;
//   - SIGTERM of a member, which drains, commits, leaves the group and is restarted;
//   - database connection kills: pg_terminate_backend on every connection of the members
//     (found by their application_name);
//   - broker restarts: SIGTERM to the broker process, which closes kfake (saving its state),
//     and a new process on the same port and data directory;
//   - 429 bursts: SIGUSR1 to a member (a worker in Temporal mode), whose model then answers
//     every call with turn.RetryAfter for a while;
//   - in Temporal mode, kill -9 of a worker ([Config.WorkerKills]) and a restart of the dev
//     server on its database file ([Config.ServerRestarts]).
//
// # The agent
//
// The fake model is a three-step agent on the turn's step journal (turn.Input.Journal):
//
//  1. "model": the plan. A seeded share of requests sleeps in it, up to a few seconds.
//  2. "tool:refund": a refund recorded in a PostgreSQL table keyed by the step's idempotency
//     key (turn.Step.Key), the way a payment API dedups. A seeded share of requests fails the
//     step on their first attempt, after the refund (an HTTP 500), so the step runs again on
//     the next attempt with the same key.
//  3. "email", deferred (turn.Journal.Defer, arguments the conversation and the request id):
//     the Runner promotes it to the outbox when the turn commits.
//  4. "model": the answer, which quotes the last user message of the history it was given,
//     which is how a context miss shows.
//
// The members' and workers' Runners compact (HistoryLimit 6: a conversation's fifth turn
// compacts, then every third), with the model as their summarizer (turn.Summarizer): a
// compaction is the turn's first journal step (the model's steps come one later), and its
// summary is the previous one and every folded user message, one a line, so that the checker
// knows what each checkpoint must say. It counts its execution in chaos_compactions, as a
// model step does in chaos_steps.
//
// Each model step counts its execution in the chaos_steps table (request id, ordinal, runs)
// as the last thing it does before it returns, so a step cut before its end (a kill while it
// sleeps) is no execution, and a step counted twice ran again after it had completed once: a
// model call the journal did not save. The faults of a whole turn come before any step: a
// 429 burst, the poison request's exit, the panicking model's panic, the always rate-limited
// request's turn.RetryAfter.
//
// Every process that runs turns (a member in direct mode, a worker in Temporal mode, where
// the activity runs the Runner) runs an inbox.Relay on its sqlinbox with a 100 ms poll and
// a 5 s lease, delivering each intent to a fake email service: a table keyed by the intent's
// idempotency key (turn.Intent.Key), whose calls column counts redeliveries. The relay runs
// until its process has drained (SIGTERM) or dies with it (kill -9); an intent it had claimed
// is claimed again by another relay once its lease ends.
//
// # The check
//
// When every request has an outcome on the topics (or the drain timeout passed), the members
// get SIGTERM. A relay in the checker's process then delivers the outbox's tail (the intents
// the members' relays left pending, or claimed and died with) until none is pending, for up
// to a minute. The checker reads the results and dead-letter topics from the start with a new
// kgo client, and the session, event, refund, email, model step and outbox tables with plain
// SQL, and counts:
//
//   - lost: a valid request with no result, a result whose turn is not in its session, or a
//     record that should have been dead-lettered and was not;
//   - duplicate turns: a request id with more than one turn in its session, or a result whose
//     text differs from the turn stored (two different turns of one request were seen);
//   - order violations: a conversation whose history holds its messages out of produced order;
//   - context misses: a reply that does not quote the previous message of its conversation,
//     so the model did not see an earlier turn;
//   - duplicate side effects: a request with more than one refund row, or more than one
//     email row;
//   - extra model steps: executions of a model step beyond one per request and step
//     (Figures.ExtraModelSteps), which must not exceed the faults that can cut a step
//     between its execution and its record in the journal (Figures.ExtraBound): the kill -9s
//     of members and workers, the poison requests' exits (which kill a member like a kill -9),
//     the SIGTERMs (a drain that cuts a turn) and the connections the database kills ended. The window is one database round trip (the count has landed, the
//     record has not), so the figure stays far below the bound; a journal that lost a record
//     or was not read again would repay nearly every model step of the turns that ran twice;
//   - compaction problems (Figures.CompactionProblems), read from the session tables: a
//     turn whose checkpoint is not its first event or that holds two (doubled), checkpoints
//     that do not chain (each folds from the previous one's Through plus one, the first from
//     seq 1: a gap is an event uncovered, an overlap one folded twice) or that end inside a
//     turn, a summary that does not hold every user message of the seqs it covers, a
//     checkpoint whose compaction no execution counted, and more events after the latest
//     checkpoint's range than the Runner lets the model see before it compacts, plus the
//     last turn's (an event left uncovered: a lost checkpoint shows so); compactions run
//     again count with the extra model steps against the same bound, and the compacted
//     turns delivered more than once (Figures.CompactedReruns, reported) are those a fault
//     met after their compaction could have run;
//   - emails without a commit: an email row of a request with no turn in its session (an
//     intent of a turn that never committed was delivered: a dead-lettered, invalid, poison
//     or panicking request, the panicking store's after it deferred its email);
//   - committed turns without their email: a valid request's turn with no email row;
//   - dead and pending intents: an intent the relays buried, or one still pending after the
//     tail;
//   - email redeliveries (reported, not a failure): calls to the email service beyond one
//     per row, the relay's at least once;
//   - valid dead letters: a valid request (not one of the poison requests) on the dead-letter
//     topic;
//   - no outcome: a record with neither a result nor a dead letter;
//   - duplicate results: a request id with more than one result record, a failure in the
//     transactional cell, where the topics are read read_committed;
//   - the other checks: an expected dead letter (invalid, stranger, panicking, always limited,
//     poison) served or dead-lettered without a reason, a member or worker that exited by
//     itself (a panic that killed it), a turn or result of no record produced, a turn with
//     no execution counted of one of its model steps.
//
// Figures.Line is the one-line summary; Figures.Failures lists the checks that failed, and
// the command's exit code follows it. RELIABILITY.md records the figures of the short and
// long forms with their commands.
//
// # Processes
//
// The broker and the members run the program that [Config.Exe] names, with the environment
// variable TURNSTILE_CHAOS_CHILD set: such a program must call [ChildMain] first thing in
// main (or TestMain). The command tools/chaos/cmd/chaos does; TestChaosShort builds it
// without the race detector, so that the members run at production speed while the test
// itself may run under -race.
package chaos
