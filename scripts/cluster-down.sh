#!/usr/bin/env bash
# Stops the payment cluster of scripts/cluster-up.sh and removes its
# containers, network and Postgres data (the images stay, for a fast next up).
set -Eeuo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/cluster-env.sh"
compose down -v --remove-orphans
