#!/usr/bin/env bash
# Sets up (only the Debian packages and targets it needs: scripts/setup.sh --demo) and runs
# the demo on a local two-node cluster:
#   1. a head node and a second node on this machine, and `phalanx status`;
#   2. elastic training (examples/cpp/elastic_regression: 3 ranks, min 1, max 4) with one rank
#      SIGKILLed midway: the job heals, and its conditions and world size print as they change;
#   3. `phalanx job status` of that job, a driver job submitted with `phalanx job submit`;
#   4. everything stopped again.
# The demo keeps its sessions in a directory of its own, so it does not touch a cluster you
# already run.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --demo
PHALANX=build/bin/phalanx
export PHALANX_TMPDIR=$(mktemp -d /tmp/phalanx-demo.XXXXXX)
trap '"$PHALANX" stop --grace 3 >/dev/null 2>&1 || true; rm -rf "$PHALANX_TMPDIR"' EXIT
PORT=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

echo "== phalanx start --head"
"$PHALANX" start --head --port "$PORT" --node-ip-address 127.0.0.1 --num-cpus 2
echo
echo "== phalanx start --address 127.0.0.1:$PORT (a second node on the same machine)"
"$PHALANX" start --address "127.0.0.1:$PORT" --node-ip-address 127.0.0.1 --num-cpus 2 \
  --resources '{"accel": 1}'
echo
echo "== phalanx status"
"$PHALANX" status
echo
echo "== elastic training: 3 ranks (min 1, max 4); rank 1 is killed with SIGKILL at step 150"
build/bin/elastic_regression --replicas 3 --min 1 --max 4 --steps 400 --kill-at-step 150
echo
JOB=$("$PHALANX" job list | awk '$2 == "elastic" {id=$1} END {print id}')
echo "== phalanx job status $JOB"
"$PHALANX" job status "$JOB"
echo
echo "== phalanx job submit -- python3 -c ... (a driver job on the head)"
"$PHALANX" job submit -- /usr/bin/python3 -c \
  'import os; print("hello from job", os.environ["PHALANX_JOB_ID"], "on", os.environ["PHALANX_ADDRESS"])'
echo
echo "== phalanx job list"
"$PHALANX" job list
echo
echo "== phalanx stop"
"$PHALANX" stop --grace 3
