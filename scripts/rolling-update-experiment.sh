#!/usr/bin/env bash
# Runs the rolling-update experiment of the coordinator-avoidance proposal
# (lerna-stack's, see package sharding/allocation) end to end:
# 4 nodes in one process over real loopback sockets, Postgres in a
# container (the local image from scripts/postgres-image.sh), 300 shards,
# a steady load of asks, then a rolling update (start new-i, stop old-i,
# the oldest last), once with the least-shard strategy and once with
# coordinator-avoidance. Prints the table of every stop window and the
# directory holding the plots (<strategy>-latency.png), the raw samples
# and events (CSV) and the nodes' logs.
#
#   scripts/rolling-update-experiment.sh [OUT_DIR]
#
# Knobs (environment), defaults in internal/experiments/rollingupdate/experiment_test.go:
#   SHOAL_EXPERIMENT_STEP=10s        time between events (the proposal: 60s)
#   SHOAL_EXPERIMENT_WARMUP=20s      steady load before the first event
#   SHOAL_EXPERIMENT_REBALANCE=2s    rebalance interval (the proposal: 10s)
#   SHOAL_EXPERIMENT_RATE=200        asks per second
#   SHOAL_EXPERIMENT_STRATEGIES=least-shard,coordinator-avoidance
set -Eeuo pipefail

repo="$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)"
out="${1:-$(mktemp -d "${TMPDIR:-/tmp}/shoal-rolling-update.XXXXXX")}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

"$repo/scripts/postgres-image.sh"
echo "rolling-update experiment: output in $out (load before: $(uptime | sed 's/.*load average/load average/'))"
# internal/experiments is a module of its own (gonum stays out of Shoal's).
(cd "$repo/internal/experiments" && SHOAL_EXPERIMENT=1 SHOAL_EXPERIMENT_OUT="$out" GOWORK=off \
	go test -count=1 -timeout 60m -run '^TestRollingUpdateExperiment$' -v ./rollingupdate) >"$out/test.log" 2>&1 || {
	tail -50 "$out/test.log" >&2
	echo "rolling-update experiment: failed; full log in $out/test.log" >&2
	exit 1
}
echo "load after: $(uptime | sed 's/.*load average/load average/')"
echo
cat "$out/results.md"
echo
echo "plots: $out/*-latency.png; samples, events and node logs beside them"
