#!/usr/bin/env bash
# Installs Chromium from Debian's packages for the shard-map browser test
# (node/admin/shardmap). Idempotent: exits at once when a Chromium binary is
# on PATH.
#
#   scripts/chromium.sh
#
# Uses sudo only when not root. Without apt (a laptop, say) it prints a note
# and exits 0: install Chromium or Chrome by hand; the browser test skips
# without one unless SHOAL_REQUIRE_BROWSER is set (make test sets it).
set -Eeuo pipefail

for bin in chromium chromium-browser google-chrome google-chrome-stable headless-shell; do
	if command -v "$bin" >/dev/null 2>&1; then
		exit 0
	fi
done

if ! command -v apt-get >/dev/null 2>&1; then
	echo "chromium: no apt-get here; install Chromium or Chrome by hand for the shard-map browser test" >&2
	exit 0
fi

sudo=()
if [ "$(id -u)" != 0 ]; then
	if ! command -v sudo >/dev/null 2>&1; then
		echo "chromium: not root and no sudo; cannot install Chromium" >&2
		exit 1
	fi
	sudo=(sudo)
fi

# Test packages may run this at once: one installs, the others wait and find it.
if command -v flock >/dev/null 2>&1; then
	exec 9>"${TMPDIR:-/tmp}/shoal-chromium.lock"
	flock 9
	if command -v chromium >/dev/null 2>&1; then
		exit 0
	fi
fi

echo "chromium: installing Debian's chromium package (a minute or two)" >&2
export DEBIAN_FRONTEND=noninteractive
# The package lists may be missing or stale (fresh containers ship none).
"${sudo[@]}" apt-get install -y --no-install-recommends chromium >/dev/null 2>&1 || {
	"${sudo[@]}" apt-get update >/dev/null
	"${sudo[@]}" apt-get install -y --no-install-recommends chromium >/dev/null
}
command -v chromium >/dev/null 2>&1 || {
	echo "chromium: apt-get finished but no chromium on PATH" >&2
	exit 1
}
echo "chromium: installed $(chromium --version 2>/dev/null || echo chromium)" >&2
