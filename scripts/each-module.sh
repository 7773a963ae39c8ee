#!/usr/bin/env bash
# Runs a command in the directory of every Go module of the repository (the
# main module first, then the nested ones: internal/testdeps with the
# test-only dependencies, examples/payment/clustertest, internal/experiments,
# cluster/tcp/grpccompare, ...), each on its own go.mod (GOWORK=off, so a
# go.work of yours changes nothing), and fails at the end when any failed.
#
#   scripts/each-module.sh go vet ./...
#   scripts/each-module.sh go test -race ./...
#
# There is no committed go.work on purpose: in workspace mode the modules
# share one build list, so code of the main module could import a package
# of a test-only dependency and still build here, while it fails for users.
set -Euo pipefail

if [ $# -eq 0 ]; then
	sed -n '2,13p' "$0"
	exit 2
fi
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mapfile -t modules < <(
	echo .
	cd "$repo" && find . -mindepth 2 -name go.mod -not -path '*/.*/*' -not -path '*/testdata/*' -printf '%h\n' | sed 's|^\./||' | sort
)
failed=()
for rel in "${modules[@]}"; do
	echo "== $rel: $*" >&2
	if ! (cd "$repo/$rel" && GOWORK=off "$@"); then
		failed+=("$rel")
	fi
done
if [ ${#failed[@]} -gt 0 ]; then
	echo "each-module: failed in ${failed[*]}" >&2
	exit 1
fi
