#!/usr/bin/env bash
# The project's test command: every test with the race detector. Tests find PostgreSQL at
# TURNSTILE_POSTGRES_DSN (default postgres://postgres@127.0.0.1:5432/test?sslmode=disable) and
# skip what they cannot reach, with the reason; under CI=true they fail instead. Kafka is an
# in-process kfake broker unless TURNSTILE_KAFKA_BROKERS names a real cluster. Temporal is a
# dev server of the temporal CLI, which this script installs (through the Go module proxy)
# when TURNSTILE_TEMPORAL_CLI names none and its install directory ($(go env GOBIN), else $(go env GOPATH)/bin) has none.
set -euo pipefail
cd "$(dirname "$0")"
if [ -z "${TURNSTILE_TEMPORAL_CLI:-}" ]; then
	bin="$(go env GOBIN)"
	[ -n "$bin" ] || bin="$(go env GOPATH | cut -d: -f1)/bin"
	TURNSTILE_TEMPORAL_CLI="$bin/temporal"
	if [ ! -x "$TURNSTILE_TEMPORAL_CLI" ]; then
		echo "installing the temporal CLI (about 3 minutes the first time)" >&2
		go install github.com/temporalio/cli/cmd/temporal@v1.5.1
	fi
fi
export TURNSTILE_TEMPORAL_CLI
# Every package but the chaos matrix, then the matrix alone: its broker, member, worker and
# Temporal server processes would otherwise load the two cores under the other packages' tests.
go test -race -count=1 -timeout 20m "$@" $(go list ./... | grep -v '/tools/chaos$')
go test -race -count=1 -timeout 20m "$@" ./tools/chaos/
# The consumer's suite again with the other ordering (it runs by key above).
TURNSTILE_TEST_ORDERING=by-partition go test -race -count=1 -timeout 20m "$@" ./consumer/
