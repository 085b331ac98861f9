#!/bin/bash
# Peer baseline: redis-benchmark against a local redis-server (floor/ceiling for a Redis-backed
# control store). Two server configs: no persistence, and AOF with appendfsync everysec.
# A standalone reference; build/bin/gcs_bench runs redis-benchmark itself, against its own Redis.
#
# Usage: ./redis_bench.sh [reps]      (default 1; each rep runs -P 1 and -P 16 for both configs,
#                                       50 clients (redis-benchmark default), plus one extra
#                                       single-client "-c 1 -P 1" run = synchronous round-trip floor)
# Env: N (requests per test, default 100000)
# The server is started on 127.0.0.1 on a free port in a temp dir and killed by pid afterwards.
set -u
REPS=${1:-1}; N=${N:-100000}
SERVER_PID=""; DIR=$(mktemp -d /tmp/redisbench.XXXX)
cleanup() { [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null; SERVER_PID=""; }
trap 'cleanup; rm -rf "$DIR"' EXIT
trap 'exit 130' INT TERM

free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

bench() {  # bench PORT LABEL redis-benchmark-args...
  local port=$1 label=$2; shift 2
  redis-cli -p "$port" flushall >/dev/null
  echo "# redis-benchmark -h 127.0.0.1 -p $port -q -t set,get,hset,lpush $*"
  timeout 300 redis-benchmark -h 127.0.0.1 -p "$port" -q -t set,get,hset,lpush "$@" \
    | tr '\r' '\n' | grep -E 'requests per second' | sed "s/^/$label /"
}

run_config() {  # run_config NAME redis-server-args...
  local name=$1; shift
  local port; port=$(free_port)
  rm -rf "${DIR:?}"/*
  redis-server --bind 127.0.0.1 --port "$port" --dir "$DIR" --daemonize no --logfile "$DIR/server.log" "$@" &
  SERVER_PID=$!
  for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  echo "## config=$name redis-server args: $(printf "%q " "$@")"
  for rep in $(seq 1 "$REPS"); do
    for P in 1 16; do
      bench "$port" "config=$name P=$P rep=$rep" -n "$N" -P "$P"
    done
    bench "$port" "config=$name c=1 P=1 rep=$rep" -n $((N / 5)) -c 1 -P 1
  done
  cleanup
  echo "# data dir after run: $(du -sh "$DIR" | cut -f1) ($(ls "$DIR" | tr '\n' ' '))"
}

echo "# $(redis-server --version)"
run_config no-persist --save "" --appendonly no
run_config aof-everysec --save "" --appendonly yes --appendfsync everysec
