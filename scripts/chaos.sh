#!/usr/bin/env bash
# Chaos suite: host-level faults (link down/up, the controller's host cut, SIGSTOP and kill -9
# of each component, an OOM) on a 3-host cluster of network namespaces, each against an
# elastic job, repeated --runs times (default 20; --runs 1 for CI). Needs root and a build
# (scripts/setup.sh). See bench/chaos/chaos.py; last line: RESULT scenarios=.. runs=.. ...
set -euo pipefail
cd "$(dirname "$0")/.."
exec /usr/bin/python3 bench/chaos/chaos.py "$@"
