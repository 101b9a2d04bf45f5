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
// The fake model adds slow turns (a seeded share of requests sleeps up to a few seconds) and
// model failures (a seeded share fails its first attempt after its side effect). Its side
// effect is a refund recorded in a PostgreSQL table keyed by the tool's idempotency key
// (turn.Input.ToolKey, turn.ToolKey), the way a payment API dedups; its answer quotes the
// last user message of the history it was given, which is how a context miss shows.
//
// # The check
//
// When every request has an outcome on the topics (or the drain timeout passed), the members
// get SIGTERM and the checker runs. It reads the results and dead-letter topics from the
// start with a new kgo client, and the session, event and refund tables with plain SQL, and
// counts:
//
//   - lost: a valid request with no result, a result whose turn is not in its session, or a
//     record that should have been dead-lettered and was not;
//   - duplicate turns: a request id with more than one turn in its session, or a result whose
//     text differs from the turn stored (two different turns of one request were seen);
//   - order violations: a conversation whose history holds its messages out of produced order;
//   - context misses: a reply that does not quote the previous message of its conversation,
//     so the model did not see an earlier turn;
//   - duplicate side effects: a request with more than one refund row;
//   - valid dead letters: a valid request (not one of the poison requests) on the dead-letter
//     topic;
//   - no outcome: a record with neither a result nor a dead letter;
//   - duplicate results: a request id with more than one result record, a failure in the
//     transactional cell, where the topics are read read_committed;
//   - the other checks: an expected dead letter (invalid, stranger, panicking, always limited,
//     poison) served or dead-lettered without a reason, a member or worker that exited by
//     itself (a panic that killed it), a turn or result of no record produced.
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
