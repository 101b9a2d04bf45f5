#!/usr/bin/env bash
# The project's test command: every test with the race detector. Tests find PostgreSQL at
# TURNSTILE_POSTGRES_DSN (default postgres://postgres@127.0.0.1:5432/test?sslmode=disable) and
# skip what they cannot reach, with the reason; under CI=true they fail instead. Kafka is an
# in-process kfake broker unless TURNSTILE_KAFKA_BROKERS names a real cluster.
set -euo pipefail
cd "$(dirname "$0")"
go test -race -count=1 -timeout 20m "$@" ./...
# The consumer's suite again with the other ordering (it runs by key above).
TURNSTILE_TEST_ORDERING=by-partition go test -race -count=1 -timeout 20m "$@" ./consumer/
