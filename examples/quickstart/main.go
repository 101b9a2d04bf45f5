// Command quickstart shows turnstile's whole job with one command and nothing to install:
//
//	go run ./examples/quickstart
//
// It starts an embedded Kafka broker (kfake, in process, on 127.0.0.1), creates agent.requests
// (12 partitions), agent.results and agent.requests.dlq, keeps sessions and the dedup inbox in
// SQLite in a temporary directory, and runs two consumer members of one group, each with its
// own turn.Runner over the shared stores. A deterministic demo model answers each request by
// quoting the conversation's previous message, so a turn that lost its context would show it.
// The program then produces 2,000 requests over 200 conversations, interleaved and keyed by
// conversation (murmur2, as a Java producer places them), while a progress line counts the
// results; halfway through, one member leaves gracefully and a new one joins, which moves
// partitions between members mid-run (a rebalance).
//
// At the end it prints a summary (requests, turns, results, duplicates suppressed, dead
// letters, p50/p99 latency from produce to result) and checks that nothing was lost, no turn
// ran twice, every conversation's history is in order and every reply shows the earlier
// context. It exits 0 only if every check passes.
//
// Flags:
//
//	-requests N        requests to produce (default 2000)
//	-conversations N   conversations they belong to (default 200)
//	-rate R            requests produced per second (default 400; negative: unpaced)
//	-brokers LIST      a real Kafka cluster (host:port,...): no embedded broker; the topics are
//	                   created if missing and the run starts at their current end
//	-postgres DSN      PostgreSQL stores (pgx) instead of SQLite
//	-db PATH           the SQLite database file (default: in a temporary directory)
//	-v                 log the consumers' info lines too
//	-otel FILE         export traces and metrics with the OpenTelemetry SDK (stdout exporters,
//	                   JSON) to FILE ("-": standard error): a span per request from the producer,
//	                   through the member that ran it (process, inbox, session, model, append,
//	                   send), and the members' metrics (turns, lag, pauses, ...)
//	-transactional     run the members in the transactional mode (consumer.Transactional):
//	                   results and offsets commit together; the results are read as
//	                   read_committed and a repeated result record fails the run
//
// The logic lives in run and the flags in command (quickstart.go); quickstart_test.go runs it
// with a small workload.
package main

import "os"

func main() { os.Exit(command().Main(os.Args[1:], os.Stdout, os.Stderr)) }
