#!/usr/bin/env bash
# Runs the README's test command (`make test`) N times on a fresh clone and
# reports every failure: a test that passes alone but fails on a busy
# machine shows up here before it reaches CI.
#
#   scripts/stress-tests.sh                 5 runs of the committed HEAD
#   scripts/stress-tests.sh -n 10 --hog     10 runs beside a CPU hog on every core
#   scripts/stress-tests.sh --ref main~3    runs another commit
#
# Each run uses -count=1 (through GOFLAGS), so no result comes from the test
# cache. Logs stay in the work directory it prints (kept with --keep, or when
# a run failed). Exits 1 when any run failed.
set -Eeuo pipefail

runs=5 hog=0 ref=HEAD keep=0
while [ $# -gt 0 ]; do
	case "$1" in
	-n) runs="$2"; shift 2 ;;
	--hog) hog=1; shift ;;
	--ref) ref="$2"; shift 2 ;;
	--keep) keep=1; shift ;;
	-h | --help) sed -n '2,12p' "$0"; exit 0 ;;
	*) echo "stress-tests: unknown argument $1" >&2; exit 2 ;;
	esac
done

repo="$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)"
commit="$(git -C "$repo" rev-parse --verify "$ref^{commit}")"
work="$(mktemp -d "${TMPDIR:-/tmp}/shoal-stress.XXXXXX")"
git clone --quiet --no-hardlinks "$repo" "$work/src"
git -C "$work/src" checkout --quiet --detach "$commit"

hogs=()
stop_hogs() {
	for p in "${hogs[@]}"; do kill "$p" 2>/dev/null || true; done
	hogs=()
}
trap stop_hogs EXIT
if [ "$hog" = 1 ]; then
	for _ in $(seq "$(nproc)"); do
		(while :; do :; done) &
		hogs+=("$!")
	done
fi

echo "stress-tests: $runs runs of $(git -C "$repo" log -1 --format='%h %s' "$commit" | cut -c1-70)"
echo "stress-tests: hog=$hog on $(nproc) cores; logs in $work"
failed=0
for i in $(seq "$runs"); do
	log="$work/run-$i.log"
	start=$(date +%s)
	if (cd "$work/src" && GOFLAGS=-count=1 make test) >"$log" 2>&1; then
		result=pass
	else
		result=FAIL
		failed=$((failed + 1))
	fi
	echo "run $i: $result in $(($(date +%s) - start)) s, load $(cut -d' ' -f1-3 /proc/loadavg)"
	if [ "$result" = FAIL ]; then
		grep -E -e '^(--- FAIL|FAIL|panic:)' -e 'DATA RACE' -e '_test\.go:[0-9]+:' "$log" | head -40 | sed 's/^/    /'
	fi
done
stop_hogs

echo "stress-tests: $((runs - failed)) of $runs runs passed (hog=$hog)"
if [ "$failed" -gt 0 ] || [ "$keep" = 1 ]; then
	echo "stress-tests: logs kept in $work"
else
	rm -rf "$work"
fi
[ "$failed" -eq 0 ]
