#!/usr/bin/env bash
# Sets up (Debian packages + build) and runs the demo: a head node and a second node on this
# machine, `phalanx status`, then everything stopped again. The demo keeps its sessions in a
# directory of its own, so it does not touch a cluster you already run.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
PHALANX=build/bin/phalanx
export PHALANX_TMPDIR=$(mktemp -d /tmp/phalanx-demo.XXXXXX)
trap '"$PHALANX" stop >/dev/null 2>&1 || true; rm -rf "$PHALANX_TMPDIR"' EXIT
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
echo "== phalanx stop"
"$PHALANX" stop
