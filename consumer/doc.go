// Package consumer is turnstile's Kafka consumer: a sarama consumer group that runs each
// request record as a turn, in order per conversation, publishes its result, dead-letters what
// cannot be served, and commits an offset only after the record's outcome is durable.
//
// # How the consumer keeps the guarantees
//
// The guarantees are stated in the package doc of the module root (G1-G7); here is the
// consumer's part of each.
//
//   - Order (G1): with Config.Ordering = OrderByKey (the default) the records of one key (one
//     conversation) run one at a time, in offset order, while records of different keys of the
//     same partition run concurrently; with OrderByPartition a partition's records run one at
//     a time. A key's next record starts only once its previous outcome is handed to the
//     producer, which keeps a partition's order, so a conversation's results land in order.
//   - No loss (G2): auto-commit is off. Results and dead letters go through an async
//     idempotent producer (acks from all in-sync replicas); a record is done when its outcome
//     is acknowledged, and the offset marked for commit is the watermark: the offset of the
//     lowest record of the partition that is not done (Kafka's committed offset is the next to
//     read). Marks are committed every Config.CommitInterval, on revoke and on shutdown, so a
//     crash anywhere means redelivery from the watermark, never a gap.
//   - Effectively once (G3): the Handler (turn.Runner) dedups by request id; results carry the
//     request id in a header for readers that dedup; the producer is idempotent. With
//     Config.Transactional, results, dead letters and offsets commit in one Kafka transaction
//     (txn.go, Transactional), so a read_committed reader sees one result per request id.
//   - No stall (G5): a failing record is retried with backoff up to Config.MaxAttempts, counted
//     in the inbox across members and crashes, then dead-lettered with the reason in headers.
//     A crash counts only against a request that ran alone: every turn's context carries
//     turn.WithCrashIsolation, and a request whose last attempt ended with its member beside
//     other turns (turn.ErrRunAlone) runs again with no other turn of the member in a Handler
//     call. A request rate limited alone (others pass) waits by itself, without pausing the member, and
//     is dead-lettered after Config.MaxRateLimits. Records that do
//     not decode are dead-lettered at once, and every dead letter the topic refuses as too
//     large is sent again without the value, then the headers, then the key. By key, a slow conversation holds
//     up only itself: the others of its partition go on, within the window.
//   - Bounded (G6): turns in flight are capped per member (Config.MaxInFlight, which also
//     bounds the goroutines that run them) and per partition; a partition's window of records
//     is capped (Config.MaxBuffered: beyond it the partition is paused); a rate-limited model
//     pauses every partition and, when the pause ends, one turn probes the model before the
//     others go.
//
// # Concurrency
//
// Each claimed partition has a window (package consumer/internal/window, which knows nothing
// of Kafka and is table-tested without it): the records received whose offset is not yet
// committable, in offset order, each queued, running, sending (its outcome is with the
// producer, or staged in a transaction) or done, a queue per key, and the one watermark
// function. The partition (partition.go) makes every call on its window under its mutex and
// acts on the events the window returns: wake the dispatcher, pause or resume fetching, mark
// the watermark. What becomes of an outcome, and how offsets commit, is the commit mode's
// sink (sink.go: marks, the default; txn, the transactional mode in txn.go); nothing else
// in the engine asks which mode runs.
//
// A turn runs on one of Config.MaxInFlight workers, which live as long as Run. The goroutines
// of the package, one line per go statement (a test checks this list against the code), by
// the function that starts them:
//
//   - startWorkers: Consumer.worker, MaxInFlight of them from one statement, runs the turns
//     handed to it (the Handler with its retries) and hands each outcome to the sink; stops
//     when Run returns.
//   - consumeClaim: partition.dispatch, one per claimed partition, waits for a key whose next
//     record may start, for the end of a rate-limit pause and for a slot under MaxInFlight (a
//     FIFO channel shared by the partitions), and hands the record to a worker; returns when
//     the partition stops, or is closed with nothing left to start, or its turns end.
//   - startSink: output.acks reads the producer's acknowledgements and failures and gives each
//     to the sink; returns when the producer has closed (AsyncClose, after every claim).
//   - newTxn: txn.loop commits the open transaction every Transactional.Interval or once it
//     holds MaxRecords outcomes (or a window filled); returns at txn.close or when the
//     producer fails for good.
//   - Setup: the committer commits the session's marks every Config.CommitInterval and checks
//     progress (Health); returns at Cleanup or when the session ends.
//   - serveGroup: drains the group's Errors channel into warnings; returns when the group
//     closes.
//   - replayUntilEnd: Consumer.stopAtEnd ends a replay at the end of its range; returns then
//     or when Run's context ends.
//   - failed (2): one sends the replacement of a record the topic refused; one sends a failed
//     publish again after its backoff, or gives it up when the partition closes. Each returns
//     once its send does (the default mode only; in the transactional mode a transaction sends
//     again).
//   - alone (2): one takes the solo gate's write lock for a turn that must run alone; one
//     releases it at once for a wait that was given up (a revoke).
//   - connect (2): one runs a sarama constructor, which takes no context; one closes what it
//     made when Run's context ended first.
//   - within: runs a call that takes no context (Commit, the group's Close, AbortTxn) so that
//     the caller waits for it at most its bound; the call itself ends when sarama returns.
//
// The throttle's resume (throttle.go) runs on time.AfterFunc timers, and sarama runs its own
// goroutines; neither is listed.
//
// A worker holds the member's solo gate (alone.go) shared for the length of a Handler call,
// or exclusively for a request that must run alone; it takes no other lock while it waits
// for the gate, and holds none of the locks below across the call.
//
// Lock order, outer first (a lock is only taken while holding locks above it):
//
//	partition.out  ->  partition.stage  ->  txn.mu  ->  txn.bmu
//	partition.out  ->  txn.mu (abandon)  ->  partition.mu  ->  pauses.mu
//	partition.out  ->  output.mu
//	throttle.mu  ->  pauses.mu
//
// partition.stage takes partition.mu and lets it go before txn.mu; txn.mu takes partition.mu
// (offsets, committed, fail). pauses.mu, output.mu and the health and stats locks are leaves.
//
// What is held across a call that may wait on the network, said plainly: in the default mode
// nothing but a partition's out lock (read) and the output's lock (read) across the channel
// send to the async producer's input, which blocks only while the producer's buffer is full;
// MarkOffset only records the offset in memory, and commits run outside every lock of the
// package. In the transactional mode txn.mu is held, written, across
// AddOffsetsToTxnWithGroupMetadata, CommitTxn, AbortTxn and the BeginTxn of a resend, and
// read across the BeginTxn of a send and the channel send to the producer: a commit and the
// sends of the partitions exclude each other, so a transaction never commits half a batch,
// and abandon (which takes txn.mu) waits for a commit in flight. Only the pause owner
// (pauses.go) calls sarama's Pause and Resume, for the two reasons that pause fetching: a full
// window and a rate limit.
//
// # Files
//
//	consumer.go    Consumer, New, Run and its steps, the workers
//	claim.go       the group handler: a session's Setup and Cleanup, a claim's feed and drain
//	partition.go   a claimed partition: its window, dispatcher, handoff, close, drain, abandon
//	internal/window  the window itself: records, key queues, states, the watermark (no Kafka)
//	serve.go       one turn: decode, attempts, the outcome to publish
//	batch.go       a key's waiting records handed to a BatchHandler in one call
//	retry.go       the retry decision, a pure function of an attempt's outcome and the counts
//	sink.go        the commit-mode interface and the default mode (marks)
//	txn.go         the transactional mode's sink
//	publish.go     the async producer, acknowledgements, failed and refused publishes
//	format.go      the record format's names for users (internal/record owns the format)
//	commit.go      offset commits: the session's marks, the committed offsets per partition
//	throttle.go, ratelimits.go, pauses.go  rate limits and the pauses of fetching
//	alone.go       the solo gate for requests that run alone
//	replay.go      Config.Replay: a sandboxed re-run of a range of records
//	health.go, stats.go, metrics.go, telemetry.go, events.go  what the member reports
//	handler.go, notify.go, config.go  what the host plugs in and sets
//
// # Rebalances and shutdown
//
// The group uses the cooperative-sticky strategy (KIP-429): a rebalance moves only the
// partitions that must move, and sarama tells a revoked claim by closing its Messages channel.
// The partition then starts no new record and drops the queued ones; its running turns get
// Config.RevokeGrace (Config.ShutdownTimeout on shutdown) to finish and have their outcomes
// acknowledged; then the rest are cancelled, the partition is abandoned (from then on nothing
// of it is published or marked) and the watermark is committed before ConsumeClaim returns,
// because sarama does not commit marks of a revoked partition when auto-commit is off. A turn
// that finishes after that is neither published nor committed: the partition's new owner
// redoes it, and the session's expected version fences the late writer (docs/DESIGN.md,
// "zombie").
//
// # Telemetry, health and logs
//
// Headers: a record's headers reach the Handler in turn.Request.Headers (so a model sees a
// producer's tenant or traceparent); Config.ForwardHeaders names those copied onto the result
// (traceparent and tracestate by default), and a dead letter keeps every header of the record
// as it came. Config.TurnContextFunc derives each turn's context from its request.
//
// Config.Telemetry takes the host's OpenTelemetry providers; the package uses the
// OpenTelemetry API only, and with the zero value does no span work and no measurement.
// Traces: a "process <requests topic>" span per record (kind consumer, messaging semantic
// conventions: messaging.system, messaging.destination.name, .partition.id,
// messaging.kafka.offset, messaging.consumer.group.name; and turnstile.request_id,
// turnstile.conversation_id, turnstile.attempt, turnstile.outcome), a child of the W3C
// traceparent in the record's headers; under it the Runner's spans (turn/turnotel: inbox.Begin,
// session.Get, model.Respond, session.Append, inbox.Complete) and a "send <topic>" span (kind
// producer) per result or dead letter, which ends when the broker acknowledges it and whose
// trace context is written on the record (traceparent, tracestate). Metrics: the Metric*
// names, with messaging.consumer.group.name on every point; the per-partition gauges add the
// topic and partition, and turnstile.consumer.lag is the partition's high-water mark (from the
// last fetch) minus the offset this member last committed.
//
// Consumer.Health reports whether the member is running, in its group, which partitions it
// owns and which are paused and why; Ready is false before the first assignment and while
// every owned partition is paused. ReadyHandler and LiveHandler serve it to Kubernetes probes.
//
// Logs: one line per event, from the layer that owns it: a failed attempt is one warning from
// the consumer (the Runner logs none) with request_id, conversation_id, topic, partition,
// offset, attempt and retry_in; a dead letter one error line once it is published; the
// assignment and revocation of partitions and the start and end of the shutdown drain one
// info line each. Durations are logged as text ("1.5s"). The texts of requests and replies
// are never logged.
package consumer
