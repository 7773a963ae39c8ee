#!/usr/bin/env bash
# Fails when the main module's module graph holds a test-, experiment- or
# browser-only dependency again: testcontainers, Docker/moby, chromedp,
# gonum or porcupine. Every module in that graph lands in the go.sum of
# each program that imports a Shoal package, so those belong in the nested
# modules: internal/testdeps (testcontainers and chromedp, run as helper
# programs by internal/pgtest and internal/browsertest),
# examples/payment/clustertest and internal/experiments. make test runs it.
set -Eeuo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
forbidden='testcontainers|docker|moby|chromedp|gonum|porcupine|containerd|opencontainers'
graph="$(cd "$repo" && GOWORK=off go list -m all)"
if bad="$(grep -E "$forbidden" <<<"$graph")"; then
	echo "module hygiene: the main module (go.mod at the root) depends on" >&2
	sed 's/^/  /' <<<"$bad" >&2
	echo "Move the code that needs them into a nested module (see scripts/check-module-hygiene.sh)." >&2
	exit 1
fi
echo "module hygiene: the main module's graph ($(wc -l <<<"$graph") modules) holds no test-only dependency"
