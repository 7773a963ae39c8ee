#!/usr/bin/env bash
# Counts false fences: runs node's TestNoFalseFence (one node, default
# leases, journal traffic) N times beside a busy loop on every core, and
# reports how many runs the healthy node fenced itself in.
#
#   scripts/false-fence.sh -n 10 [-s 20] [--no-hog]
set -euo pipefail
runs=10 secs=20 hog=1
while [ $# -gt 0 ]; do
	case "$1" in
	-n) runs="$2"; shift 2 ;;
	-s) secs="$2"; shift 2 ;;
	--no-hog) hog=0; shift ;;
	*) echo "usage: $0 [-n RUNS] [-s SECONDS] [--no-hog]" >&2; exit 2 ;;
	esac
done
cd "$(dirname "$0")/.."
export TESTCONTAINERS_RYUK_DISABLED=true TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1

hogs=()
stop_hogs() {
	for p in "${hogs[@]}"; do kill "$p" 2>/dev/null || true; done
	hogs=()
}
trap stop_hogs EXIT
go test -c -o /tmp/false-fence-node.test ./node
if [ "$hog" = 1 ]; then
	for _ in $(seq "$(nproc)"); do
		(while :; do :; done) &
		hogs+=("$!")
	done
fi
log=$(mktemp)
echo "false-fence: $runs runs of ${secs} s, hog=$hog on $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); log $log"
set +e
(cd node && SHOAL_FALSE_FENCE_SECONDS="$secs" /tmp/false-fence-node.test -test.run '^TestNoFalseFence$' -test.count "$runs" -test.v) >"$log" 2>&1
set -e
stop_hogs
grep -E 'fence_soak_test.go:[0-9]+: [0-9]+ s:' "$log" | sed 's/^ */  /'
fenced=$(grep -c 'FALSE FENCE' "$log" || true)
passed=$(grep -c -- '--- PASS: TestNoFalseFence' "$log" || true)
echo "false-fence: $fenced false fences in $runs runs ($passed passed), load $(cut -d' ' -f1-3 /proc/loadavg)"
[ "$fenced" = 0 ] && [ "$passed" = "$runs" ]
