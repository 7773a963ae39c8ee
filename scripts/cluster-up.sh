#!/usr/bin/env bash
# Builds the images and starts the 3-node payment cluster of
# examples/payment/deploy/docker-compose.yml: Postgres, the issuer
# simulator, payment1..3 (API on 127.0.0.1:18081..18083, admin API on
# 127.0.0.1:19081..19083) and one run of the load generator through all
# three, whose report it prints.
#
#   scripts/cluster-up.sh                 build, start, wait for the load run
#   LOAD_DURATION=60s scripts/cluster-up.sh
#   PAYMENT1_PORT=28081 ... scripts/cluster-up.sh   other host ports
#   PAYMENT1_ADMIN_PORT=29081 ... scripts/cluster-up.sh
#   SHOAL_ADMIN_TOKEN=... scripts/cluster-up.sh      the admin API's token
#                                                    (default dev-token)
#
# Nothing is pulled: the payment image is two static binaries built here
# (CGO_ENABLED=0) on `FROM scratch`, the Postgres image comes from
# scripts/postgres-image.sh. The nodes run mutual TLS and encrypted gossip
# with a CA, certificates and a key that scripts/cluster-certs.sh makes
# into examples/payment/deploy/tls (kept between runs; delete it to make
# new ones). scripts/cluster-down.sh removes the rest.
set -Eeuo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/cluster-env.sh"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

echo "cluster: building the payment binaries" >&2
(cd "$ROOT" &&
	CGO_ENABLED=0 go build -trimpath -o "$work/payment" ./examples/payment &&
	CGO_ENABLED=0 go build -trimpath -o "$work/loadgen" ./examples/payment/loadgen)
DOCKER_BUILDKIT=0 docker build -q -t "$PAYMENT_IMAGE" -f "$ROOT/examples/payment/deploy/Dockerfile" "$work" >/dev/null
echo "cluster: built $PAYMENT_IMAGE" >&2
"$ROOT/scripts/postgres-image.sh"
if ! docker image inspect shoal-postgres:15 >/dev/null 2>&1; then
	echo "cluster: no shoal-postgres:15 image (scripts/postgres-image.sh could not build it)" >&2
	exit 1
fi

# Mutual TLS between the nodes and encrypted gossip: made once, kept.
"$ROOT/scripts/cluster-certs.sh" "$SHOAL_CLUSTER_TLS"
SHOAL_GOSSIP_KEY="$(cat "$SHOAL_CLUSTER_TLS/gossip.key")"
export SHOAL_GOSSIP_KEY

# up waits for each node's health check (GET /ready through `payment -probe`)
# before it starts the nodes and the load generator that depend on it.
compose up -d --remove-orphans
compose ps
echo "cluster: the load generator runs for ${LOAD_DURATION:-20s}; its report:" >&2
loadgen="$(compose ps -q loadgen)"
code="$(docker wait "$loadgen")"
compose logs --no-color loadgen
if [ "$code" != 0 ]; then
	echo "cluster: the load generator exited $code" >&2
	exit 1
fi
cat >&2 <<MSG
cluster: up. The nodes' APIs:
  http://127.0.0.1:${PAYMENT1_PORT:-18081}  http://127.0.0.1:${PAYMENT2_PORT:-18082}  http://127.0.0.1:${PAYMENT3_PORT:-18083}
Their admin APIs (token \$SHOAL_ADMIN_TOKEN, default dev-token):
  http://127.0.0.1:${PAYMENT1_ADMIN_PORT:-19081}  http://127.0.0.1:${PAYMENT2_ADMIN_PORT:-19082}  http://127.0.0.1:${PAYMENT3_ADMIN_PORT:-19083}
MSG
