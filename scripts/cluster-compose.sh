#!/usr/bin/env bash
# Runs docker compose (or docker-compose) on the payment cluster of
# scripts/cluster-up.sh, with its project name and compose file:
#
#   scripts/cluster-compose.sh ps
#   scripts/cluster-compose.sh stop payment2
#   scripts/cluster-compose.sh logs payment1
set -Eeuo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/cluster-env.sh"
compose "$@"
