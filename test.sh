#!/usr/bin/env bash
# The project's test command: every test with the race detector, in three passes, each under a
# heading, and at the end the tests that skipped with their reasons (tools/testsummary). Tests
# find PostgreSQL at TURNSTILE_POSTGRES_DSN (default
# postgres://postgres@127.0.0.1:5432/test?sslmode=disable) and skip what they cannot reach,
# with the reason; under CI=true they fail instead. Kafka is an in-process kfake broker unless
# TURNSTILE_KAFKA_BROKERS names a real cluster. Temporal is a dev server of the temporal CLI,
# which this script installs (through the Go module proxy) when TURNSTILE_TEMPORAL_CLI names
# none and its install directory ($(go env GOBIN), else $(go env GOPATH)/bin) has none; the
# passes run under gotestsum (pinned, installed there the same way), which prints go test's
# usual lines and, after a pass with a failure, the failed tests' output again.
#
# Arguments are go test flags, given to every pass (./test.sh -run Rebalance).
# TURNSTILE_TEST_PACKAGES (go list patterns, default ./...) limits the packages: a pass whose
# packages are not among them is left out. The exit code is non-zero when a test fails.
set -euo pipefail
cd "$(dirname "$0")"
bin="$(go env GOBIN)"
[ -n "$bin" ] || bin="$(go env GOPATH | cut -d: -f1)/bin"
if [ -z "${TURNSTILE_TEMPORAL_CLI:-}" ]; then
	TURNSTILE_TEMPORAL_CLI="$bin/temporal"
	if [ ! -x "$TURNSTILE_TEMPORAL_CLI" ]; then
		echo "installing the temporal CLI (about 3 minutes the first time)" >&2
		go install github.com/temporalio/cli/cmd/temporal@v1.5.1
	fi
fi
export TURNSTILE_TEMPORAL_CLI
gotestsum_version=v1.13.0
if ! "$bin/gotestsum" --version 2>/dev/null | grep -qF "${gotestsum_version#v}"; then
	echo "installing gotestsum $gotestsum_version" >&2
	go install "gotest.tools/gotestsum@$gotestsum_version"
fi

module="$(go list -m)"
# shellcheck disable=SC2086 # the patterns are words
listed="$(go list ${TURNSTILE_TEST_PACKAGES:-./...})"
mapfile -t packages <<<"$listed"
out="$(mktemp -d)"
labels=()
# On every exit, after a failed pass too: the skipped tests of the passes that ran.
trap 'status=$?; [ "${#labels[@]}" -eq 0 ] || go run ./tools/testsummary "${labels[@]}" || true; rm -rf "$out"; exit $status' EXIT

# pass N LABEL PACKAGE... runs go test -race over the packages under gotestsum, its events
# recorded for the summary; a pass with no package is left out.
pass() {
	local n="$1" label="$2"
	shift 2
	[ "$#" -gt 0 ] || return 0
	labels+=("pass $n ($label)" "$out/pass$n.json")
	printf '\n== pass %s of 3: %s\n' "$n" "$label"
	"$bin/gotestsum" --format standard-quiet --hide-summary=skipped --jsonfile "$out/pass$n.json" -- \
		-race -count=1 -timeout 20m "${args[@]}" "$@"
}
args=("$@")
only() { # the packages among $packages equal to (=) or other than (!) $2
	local p
	for p in "${packages[@]}"; do
		if { [ "$1" = = ] && [ "$p" = "$2" ]; } || { [ "$1" = '!' ] && [ "$p" != "$2" ]; }; then
			echo "$p"
		fi
	done
}
# Every package but the chaos matrix, then the matrix alone: its broker, member, worker and
# Temporal server processes would otherwise load the two cores under the other packages' tests.
# shellcheck disable=SC2046 # one word per package
pass 1 "every package but the chaos matrix" $(only ! "$module/tools/chaos")
# shellcheck disable=SC2046
pass 2 "the chaos matrix, alone" $(only = "$module/tools/chaos")
# The consumer's suite again with the other ordering (it runs by key above).
# shellcheck disable=SC2046
TURNSTILE_TEST_ORDERING=by-partition pass 3 "the consumer by partition (TURNSTILE_TEST_ORDERING=by-partition)" $(only = "$module/consumer")
