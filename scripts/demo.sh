#!/usr/bin/env bash
# The main job on the local stack: installs what it needs, starts Kafka and two KWOK clusters,
# and runs the kubetape demo. The stack keeps running afterwards; `.venv/bin/kubetape stack down` stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
exec .venv/bin/kubetape demo "$@"
