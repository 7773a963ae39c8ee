#!/usr/bin/env bash
# Runs Prometheus's promtool with the given arguments, installing it from
# Debian's prometheus package first when it is not on PATH. make test uses
# it to check the alert rules of docs/operations:
#
#   scripts/promtool.sh check rules docs/operations/prometheus-alerts.yml
#   scripts/promtool.sh test rules docs/operations/prometheus-alerts.test.yml
#
# Without arguments it only installs. Uses sudo only when not root. Fails
# when promtool is missing and cannot be installed (no apt-get, not root and
# no sudo, or the install failed): the rules would go unchecked otherwise.
# On a host that runs systemd the package also enables a Prometheus server
# (systemctl disable --now prometheus stops it); in a container nothing
# starts.
set -Eeuo pipefail

install_promtool() {
	if ! command -v apt-get >/dev/null 2>&1; then
		echo "promtool: not on PATH and no apt-get here; install Prometheus's promtool by hand (https://prometheus.io/download/)" >&2
		exit 1
	fi
	local sudo=()
	if [ "$(id -u)" != 0 ]; then
		if ! command -v sudo >/dev/null 2>&1; then
			echo "promtool: not on PATH, not root and no sudo; cannot install Debian's prometheus package" >&2
			exit 1
		fi
		sudo=(sudo)
	fi

	# Two runs may start at once: one installs, the other waits and finds it.
	if command -v flock >/dev/null 2>&1; then
		exec 9>"${TMPDIR:-/tmp}/shoal-promtool.lock"
		flock 9
		if command -v promtool >/dev/null 2>&1; then
			return
		fi
	fi

	echo "promtool: installing Debian's prometheus package (it ships /usr/bin/promtool)" >&2
	export DEBIAN_FRONTEND=noninteractive
	# The package lists may be missing or stale (fresh containers ship none).
	"${sudo[@]}" apt-get install -y --no-install-recommends prometheus >/dev/null 2>&1 || {
		"${sudo[@]}" apt-get update >/dev/null
		"${sudo[@]}" apt-get install -y --no-install-recommends prometheus >/dev/null
	}
	command -v promtool >/dev/null 2>&1 || {
		echo "promtool: apt-get finished but no promtool on PATH" >&2
		exit 1
	}
	echo "promtool: installed $(promtool --version 2>&1 | head -n1)" >&2
}

if ! command -v promtool >/dev/null 2>&1; then
	install_promtool
fi
if [ $# -gt 0 ]; then
	exec promtool "$@"
fi
