#!/usr/bin/env bash
# Measures the payment example's server under the load generator at two
# commits in one run, alternating, so both see the same machine load:
# server CPU per request and requests per second, each run and the medians.
#
#   scripts/payment-load-compare.sh BASE [NEW]     NEW defaults to HEAD
#   RUNS=3 CLIENTS=64 DURATION=8s scripts/payment-load-compare.sh 449f798
#
# Both servers run with the in-memory journal on loopback; the load
# generator is NEW's (examples/payment/loadgen). Linux only (-pid reads /proc).
set -Eeuo pipefail

base="${1:?usage: $0 BASE [NEW]}"
new="${2:-HEAD}"
runs="${RUNS:-3}" clients="${CLIENTS:-64}" duration="${DURATION:-8s}"
repo="$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)"
work="$(mktemp -d "${TMPDIR:-/tmp}/shoal-load.XXXXXX")"
trap 'rm -rf "$work"; git -C "$repo" worktree prune' EXIT

build() { # ref name
	git -C "$repo" worktree add --quiet --detach "$work/src-$2" "$1"
	(cd "$work/src-$2" && CGO_ENABLED=0 go build -o "$work/$2" ./examples/payment)
}
build "$base" base
build "$new" new
(cd "$work/src-new" && go build -o "$work/loadgen" ./examples/payment/loadgen)

measure() { # binary -> "cpu_ms_per_request req_per_s"
	local out="$work/server.out" pid url line
	"$1" >"$out" 2>/dev/null &
	pid=$!
	for _ in $(seq 100); do grep -q "listening on" "$out" && break; sleep 0.1; done
	url=$(grep -o 'listening on http://[^ ]*' "$out" | cut -d' ' -f3)
	line=$("$work/loadgen" -url "$url" -c "$clients" -d "$duration" -pid "$pid")
	kill -INT "$pid"
	wait "$pid" || true
	echo "$line" >"$work/last.txt"
	printf '%s %s\n' \
		"$(grep -o '[0-9.]* ms per request' <<<"$line" | cut -d' ' -f1)" \
		"$(grep -o '[0-9.]* req/s' <<<"$line" | head -1 | cut -d' ' -f1)"
}

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq "$runs"); do
	for which in base new; do
		read -r cpu rps < <(measure "$work/$which")
		echo "$which run $i: ${cpu} ms CPU per request, ${rps} req/s"
		echo "$cpu" >>"$work/$which.cpu"
		echo "$rps" >>"$work/$which.rps"
	done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
for which in base new; do
	echo "$which ($([ "$which" = base ] && echo "$base" || echo "$new")): median $(median <"$work/$which.cpu") ms CPU per request, $(median <"$work/$which.rps") req/s"
done
