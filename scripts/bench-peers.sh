#!/usr/bin/env bash
# Runs the cross-node benchmarks of benchmarks/peers (Shoal beside GoAkt
# and protoactor-go remoting, see benchmarks/peers/bench_test.go) N times
# and prints, per benchmark and metric, the median and the spread
# (min–max) of the runs, with the load average before and after.
#
#   scripts/bench-peers.sh [-n runs] [-b regexp] [-t benchtime] [SHOAL_ROOT...]
#
# With SHOAL_ROOTs (checkouts of this repository), the harness of this
# checkout runs against the Shoal code of each of them in turn, run after
# run (A B A B ...), so that load coming and going on a shared machine
# falls on all alike; the table then has one column per root and, for two
# roots, the ratio of the second's median to the first's. Default: this
# checkout alone. The harness must build against every root's API.
set -Eeuo pipefail

runs=3 bench='Peers' benchtime='1s'
while getopts 'n:b:t:' opt; do
	case $opt in
	n) runs=$OPTARG ;;
	b) bench=$OPTARG ;;
	t) benchtime=$OPTARG ;;
	*) sed -n '2,14p' "$0"; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
roots=("$@")
[ ${#roots[@]} -gt 0 ] || roots=("$repo")

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# One go.mod per root: the harness's, its replace pointing at that root.
for i in "${!roots[@]}"; do
	root="$(cd "${roots[$i]}" && pwd)"
	roots[$i]=$root
	sed "s|^replace github.com/shoal-dev/shoal => .*|replace github.com/shoal-dev/shoal => $root|" \
		"$repo/benchmarks/go.mod" >"$work/go$i.mod"
	cp "$repo/benchmarks/go.sum" "$work/go$i.sum"
done

echo "load before: $(uptime)"
for ((r = 1; r <= runs; r++)); do
	for i in "${!roots[@]}"; do
		echo "== run $r/$runs, ${roots[$i]}" >&2
		(cd "$repo/benchmarks" && GOWORK=off go test -mod=mod -modfile="$work/go$i.mod" -run '^$' \
			-bench "$bench" -benchtime "$benchtime" -count 1 ./peers) |
			tee -a "$work/raw$i.txt" | grep -E '^Benchmark' >&2 || true
	done
done
echo "load after:  $(uptime)"
echo "command: scripts/bench-peers.sh -n $runs -b '$bench' -t $benchtime ${roots[*]}"

for i in "${!roots[@]}"; do
	echo "column $i: ${roots[$i]} ($(git -C "${roots[$i]}" rev-parse --short HEAD 2>/dev/null || echo '?'))"
done
# Per root, per benchmark and unit: the values of every run.
for i in "${!roots[@]}"; do
	awk -v col="$i" '/^Benchmark/ {
		name = $1; sub(/-[0-9]+$/, "", name); sub(/^BenchmarkPeers\//, "", name)
		for (k = 3; k < NF; k += 2) print col "\t" name "\t" $(k + 1) "\t" $k
	}' "$work/raw$i.txt"
done | sort -t$'\t' -k2,2 -k3,3 -k1,1n -s | awk -F'\t' -v ncol="${#roots[@]}" '
	function median(s,   a, n, i, j, t) {
		n = split(s, a, " ")
		for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
		lo = a[1]; hi = a[n]
		return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
	}
	function fmt(v) { return v >= 1000 ? sprintf("%.0f", v) : v >= 10 ? sprintf("%.1f", v) : sprintf("%.3g", v) }
	{ key = $2 "\t" $3; if (!(key in seen)) { seen[key] = 1; order[++n] = key }; vals[key, $1] = vals[key, $1] " " $4 }
	END {
		printf "%-34s %-18s", "benchmark", "metric"
		for (c = 0; c < ncol; c++) printf " %28s", "median [min–max] (" c ")"
		if (ncol == 2) printf " %10s", "(1)/(0)"
		printf "\n"
		for (k = 1; k <= n; k++) {
			split(order[k], f, "\t")
			if (f[2] == "ns/op") continue
			printf "%-34s %-18s", f[1], f[2]
			for (c = 0; c < ncol; c++) {
				if ((order[k], c) in vals) { m[c] = median(vals[order[k], c]); printf " %28s", fmt(m[c]) " [" fmt(lo) "–" fmt(hi) "]" }
				else { m[c] = ""; printf " %28s", "-" }
			}
			if (ncol == 2 && m[0] != "" && m[1] != "" && m[0] + 0 != 0) printf " %10.3f", m[1] / m[0]
			printf "\n"
		}
	}'
