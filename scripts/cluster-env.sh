# Sourced by cluster-up.sh and cluster-down.sh: the compose file, the
# project name, and `compose`, which runs `docker compose` or, where that
# plugin is missing, docker-compose (Debian's package: apt-get install
# docker-compose).
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
COMPOSE_FILE="$ROOT/examples/payment/deploy/docker-compose.yml"
PROJECT="${SHOAL_CLUSTER_PROJECT:-shoal-payment}"
PAYMENT_IMAGE=shoal-payment:dev

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
