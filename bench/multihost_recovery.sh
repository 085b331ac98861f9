#!/usr/bin/env bash
# A host's link goes down under an elastic job on 3 hosts (network namespaces): time to the
# survivors' next step and back to full strength, Phalanx and torchrun in the same run. Needs
# root and a build (scripts/setup.sh). See bench/multihost_recovery.py; last line: RESULT ...
set -euo pipefail
cd "$(dirname "$0")/.."
exec /usr/bin/python3 bench/multihost_recovery.py "$@"
