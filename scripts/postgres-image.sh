#!/usr/bin/env bash
# Builds the local Postgres image the integration tests use when no image can
# be pulled (a machine without access to a registry). Idempotent: exits at
# once when the image of the current version exists.
#
#   scripts/postgres-image.sh            build $SHOAL_POSTGRES_IMAGE if missing
#   SHOAL_POSTGRES_IMAGE=name:tag ...    choose another image name
#   scripts/postgres-image.sh --force    rebuild even if present
#
# Steps: debootstrap a minimal Debian bookworm with postgresql-15 (mirror read
# from the machine's apt sources), `docker import` it as a base, then build
# postgres-image/Dockerfile on top, which adds an entrypoint that honours
# POSTGRES_USER / POSTGRES_PASSWORD / POSTGRES_DB like the official image.
# Without a reachable Docker daemon it prints a note and exits 0: the
# integration tests then skip and say why.
set -Eeuo pipefail

IMAGE="${SHOAL_POSTGRES_IMAGE:-shoal-postgres:15}"
# Bump when the Dockerfile or entrypoint changes, so stale images are rebuilt.
VERSION=2
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

if ! command -v docker >/dev/null 2>&1 || ! docker info >/dev/null 2>&1; then
	echo "postgres-image: no reachable Docker daemon; Postgres integration tests will skip" >&2
	exit 0
fi

# Test packages may run this at once: one builds, the others wait and find it.
if command -v flock >/dev/null 2>&1; then
	exec 9>"${TMPDIR:-/tmp}/shoal-postgres-image.lock"
	flock 9
fi

if [ "${1:-}" != "--force" ] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
	have="$(docker image inspect -f '{{index .Config.Labels "dev.shoal.postgres-image.version"}}' "$IMAGE")"
	# Current, or an image of that name this script did not build (say the
	# official one, tagged by hand): use it as it is.
	if [ "$have" = "$VERSION" ] || [ "$have" = "<no value>" ] || [ -z "$have" ]; then
		exit 0
	fi
fi

# Without root or apt (a laptop, say) leave it to the tests: they fall back
# to the official postgres:15 image, which such a machine can pull.
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
	echo "postgres-image: cannot build $IMAGE here (needs root and apt); tests will use the official postgres:15 image" >&2
	exit 0
fi

# find_mirror prints the Debian mirror of this machine's apt sources.
find_mirror() {
	if [ -n "${SHOAL_DEBIAN_MIRROR:-}" ]; then
		echo "$SHOAL_DEBIAN_MIRROR"
		return
	fi
	local f m
	for f in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list.d/*.sources; do
		[ -r "$f" ] || continue
		m="$(awk '/^URIs:/ { for (i = 2; i <= NF; i++) if ($i !~ /security/) { print $i; exit } }' "$f")"
		if [ -n "$m" ]; then
			echo "$m"
			return
		fi
	done
	if [ -r /etc/apt/sources.list ]; then
		awk '$1 == "deb" && $0 !~ /security/ { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; exit } }' /etc/apt/sources.list
	fi
}

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# The debootstrapped base is kept, so a change of the Dockerfile or the
# entrypoint rebuilds in seconds.
base="${IMAGE%%:*}-base:${IMAGE##*:}"
if ! docker image inspect "$base" >/dev/null 2>&1 || [ "${1:-}" = "--force" ]; then
	if ! command -v debootstrap >/dev/null 2>&1; then
		echo "postgres-image: installing debootstrap" >&2
		apt-get install -y debootstrap >/dev/null 2>&1 || {
			apt-get update >/dev/null
			apt-get install -y debootstrap >/dev/null
		}
	fi
	mirror="$(find_mirror)"
	if [ -z "$mirror" ]; then
		echo "postgres-image: no Debian mirror found in the apt sources; set SHOAL_DEBIAN_MIRROR" >&2
		exit 1
	fi
	rootfs="$work/rootfs"
	echo "postgres-image: building $base (debootstrap bookworm with postgresql-15, about a minute)" >&2
	debootstrap --variant=minbase --include=postgresql-15 bookworm "$rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 || {
		tail -n 30 "$work/debootstrap.log" >&2
		exit 1
	}
	# The package's own cluster and the apt caches are not needed.
	rm -rf "$rootfs"/var/lib/postgresql/15 "$rootfs"/etc/postgresql/15/main \
		"$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
	old_base="$(docker image inspect -f '{{.Id}}' "$base" 2>/dev/null || true)"
	tar -C "$rootfs" -c . | docker import - "$base" >/dev/null
	if [ -n "$old_base" ]; then
		docker rmi "$old_base" >/dev/null 2>&1 || true
	fi
fi

old="$(docker image inspect -f '{{.Id}}' "$IMAGE" 2>/dev/null || true)"
DOCKER_BUILDKIT=0 docker build -q \
	--build-arg BASE="$base" --build-arg VERSION="$VERSION" \
	-t "$IMAGE" "$HERE/postgres-image" >/dev/null 2>"$work/build.log" || {
	cat "$work/build.log" >&2
	exit 1
}
if [ -n "$old" ] && [ "$old" != "$(docker image inspect -f '{{.Id}}' "$IMAGE")" ]; then
	docker rmi "$old" >/dev/null 2>&1 || true
fi
echo "postgres-image: built $IMAGE" >&2
