# Sourced by cluster-up.sh and cluster-down.sh: the compose file, the
# project name, and `compose`, which runs `docker compose` or, where that
# plugin is missing, docker-compose (Debian's package: apt-get install
# docker-compose).
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
COMPOSE_FILE="$ROOT/examples/payment/deploy/docker-compose.yml"
PROJECT="${SHOAL_CLUSTER_PROJECT:-shoal-payment}"
PAYMENT_IMAGE=shoal-payment:dev
# The CA, the node certificates and the gossip key (scripts/cluster-certs.sh).
export SHOAL_CLUSTER_TLS="${SHOAL_CLUSTER_TLS:-$ROOT/examples/payment/deploy/tls}"
if [ -z "${SHOAL_GOSSIP_KEY:-}" ] && [ -s "$SHOAL_CLUSTER_TLS/gossip.key" ]; then
	SHOAL_GOSSIP_KEY="$(cat "$SHOAL_CLUSTER_TLS/gossip.key")"
	export SHOAL_GOSSIP_KEY
fi

compose() {
	if docker compose version >/dev/null 2>&1; then
		docker compose -p "$PROJECT" -f "$COMPOSE_FILE" "$@"
	elif command -v docker-compose >/dev/null 2>&1; then
		docker-compose -p "$PROJECT" -f "$COMPOSE_FILE" "$@"
	else
		echo "cluster: needs 'docker compose' or docker-compose (apt-get install docker-compose)" >&2
		return 1
	fi
}
