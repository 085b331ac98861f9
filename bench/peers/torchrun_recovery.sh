#!/bin/bash
# Peer baseline: torchrun (torch.distributed.run) elastic recovery after kill -9 of one worker,
# training train_elastic.py from this directory. build/bin/recovery_bench runs it beside
# Phalanx's recovery (STEPS=80 ./torchrun_recovery.sh c10d RUNS); it also runs on its own.
#
# Usage: ./torchrun_recovery.sh [c10d|standalone] [reps] [extra torchrun args...]
#   e.g. ./torchrun_recovery.sh c10d 3
#        ./torchrun_recovery.sh standalone 3
#        ./torchrun_recovery.sh c10d 3 --monitor_interval=1
#        CKPT_EVERY=0 ./torchrun_recovery.sh c10d 1        # no checkpoint: restarts at step 0
# Env: NPROC (workers, default 2), KILL_AT (default 55), KILL_JITTER (0: extra uniform random delay in s before the kill, to
#      sample the agent's monitor phase), STEPS (160), CKPT_EVERY (10), STEP_TIME (0.066 s/step),
#      KEEP=1 keeps the logs.
#
# Each rep: start a 1-node x NPROC-worker job (gloo DDP, train_elastic.py), wait until rank 0 prints
# step KILL_AT, kill -9 the rank-1 worker (by its pid, checked to be a child of the agent), and
# read from rank 0's log: time from kill to the first step printed by the restarted workers, and
# the step they resumed from. Everything is time-bounded; all started processes are killed by pid.
set -u
MODE=${1:-c10d}; REPS=${2:-3}; shift $(($# < 2 ? $# : 2)); EXTRA=("$@")
NPROC=${NPROC:-2}; KILL_AT=${KILL_AT:-55}; KILL_JITTER=${KILL_JITTER:-0}; STEPS=${STEPS:-160}; CKPT_EVERY=${CKPT_EVERY:-10}; STEP_TIME=${STEP_TIME:-0.066}
PY=/usr/bin/python3
HERE=$(cd "$(dirname "$0")" && pwd)
export GLOO_SOCKET_IFNAME=lo OMP_NUM_THREADS=1
# torch 1.13 + Python 3.11: the default --redirects/--tee value "0" parses to None and torchrun
# crashes in to_map() (see github.com/meta-llama/llama/issues/86). "2" (stderr only) is the
# least intrusive valid value: worker stdout stays on the console; stderr is teed to a log dir.
COMPAT=(--redirects=2 --tee=2)
RESULTS=$(mktemp /tmp/trrec.results.XXXX)
AGENT=""; DIR=""

cleanup() {  # kill the agent and any worker we know of, by pid
  [ -n "$DIR" ] && for f in "$DIR"/pid.*; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done
  [ -n "$AGENT" ] && kill -9 "$AGENT" 2>/dev/null
  AGENT=""
}
trap 'cleanup; exit 130' INT TERM
trap cleanup EXIT

free_port() { $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# wait_for FILE REGEX TIMEOUT_S: print the first line of FILE matching REGEX; fail on timeout or
# if the agent has exited
wait_for() {
  local end=$((SECONDS + $3)) l
  while ((SECONDS < end)); do
    l=$(grep -m1 -E "$2" "$1" 2>/dev/null) && { echo "$l"; return 0; }
    kill -0 "$AGENT" 2>/dev/null || return 1
    sleep 0.01
  done
  return 1
}
tval() { sed -E 's/.* t=([0-9.]+).*/\1/' <<<"$1"; }   # the t=<unix time> field of a log line

for rep in $(seq 1 "$REPS"); do
  DIR=$(mktemp -d /tmp/trrec.XXXX); port=$(free_port)
  if [ "$MODE" = standalone ]; then rdzv=(--standalone)
  else rdzv=(--rdzv_backend=c10d "--rdzv_endpoint=127.0.0.1:$port"); fi
  $PY -m torch.distributed.run --nnodes=1 --nproc_per_node="$NPROC" --max_restarts=3 "${rdzv[@]}" "${COMPAT[@]}" \
    --log_dir="$DIR/torchrun_logs" "${EXTRA[@]}" \
    "$HERE/train_elastic.py" --run-dir "$DIR" --steps "$STEPS" --ckpt-every "$CKPT_EVERY" \
    --step-time "$STEP_TIME" >"$DIR/log" 2>&1 &
  AGENT=$!

  if ! wait_for "$DIR/log" "^step $KILL_AT " 120 >/dev/null; then echo "rep $rep: never reached step $KILL_AT (log $DIR/log)"; cleanup; continue; fi
  victim=$(cat "$DIR/pid.r1.c0")
  if [ "$(ps -o ppid= -p "$victim" | tr -d ' ')" != "$AGENT" ]; then echo "rep $rep: pid $victim is not a child of agent $AGENT"; cleanup; continue; fi
  sleep "$(awk -v r=$RANDOM -v j="$KILL_JITTER" 'BEGIN { print r / 32768 * j }')"
  t_kill=$(date +%s.%N); kill -9 "$victim"

  if ! first=$(wait_for "$DIR/log" "^step [0-9]+ restart=1 " 120); then echo "rep $rep: no step after restart (log $DIR/log)"; cleanup; continue; fi
  last0=$(grep -E "^step [0-9]+ restart=0 " "$DIR/log" | tail -1 | awk '{print $2}')
  start1=$(grep -m1 -E "^start rank=0 restart=1 " "$DIR/log")
  imp1=$(grep -m1 -E "^imported restart=1 " "$DIR/log")
  pg1=$(grep -m1 -E "^pg_ready restart=1 " "$DIR/log")
  resume=$(grep -m1 -E "^resume step=[0-9]+ restart=1 " "$DIR/log")
  resumed_from=$(sed -E 's/^resume step=([0-9]+).*/\1/' <<<"$resume")

  end=$((SECONDS + 120)); while kill -0 "$AGENT" 2>/dev/null && ((SECONDS < end)); do sleep 0.2; done
  if kill -0 "$AGENT" 2>/dev/null; then rc=timeout; cleanup; else wait "$AGENT"; rc=$?; AGENT=""; fi
  final=$(grep -E "^step [0-9]+ " "$DIR/log" | tail -1 | awk '{print $2}')

  $PY - "$rep" "$MODE" "$t_kill" "$(tval "$start1")" "$(tval "$imp1")" "$(tval "$pg1")" \
      "$(tval "$resume")" "$(tval "$first")" "$last0" "$resumed_from" "$rc" "$final" <<'EOF' | tee -a "$RESULTS"
import sys
rep, mode, tk, ts, ti, tp, tr, tf, last0, res, rc, final = sys.argv[1:]
tk, ts, ti, tp, tr, tf = map(float, (tk, ts, ti, tp, tr, tf))
print(f"rep={rep} mode={mode} kill_to_first_step_s={tf - tk:.2f} (kill->new_worker_start {ts - tk:.2f}, "
      f"import_torch {ti - ts:.2f}, init_pg {tp - ti:.2f}, ddp+ckpt_load {tr - tp:.2f}, first_step {tf - tr:.2f}) "
      f"last_step_before_kill={last0} resumed_from={res} lost_steps={int(last0) - int(res)} "
      f"agent_rc={rc} final_step={final}")
EOF
  if [ -n "${KEEP:-}" ]; then echo "  log kept: $DIR/log"; else rm -rf "$DIR"; fi; DIR=""
done

$PY - "$RESULTS" "$MODE ${EXTRA[*]}" <<'EOF'
import re, statistics, sys
rows = [l for l in open(sys.argv[1]) if l.startswith("rep=")]
def col(key):
    return [float(re.search(key + r"=([0-9.]+)", l).group(1)) for l in rows]
if rows:
    for key in ("kill_to_first_step_s", "lost_steps"):
        v = col(key)
        print(f"summary [{sys.argv[2].strip()}] {key}: n={len(v)} min={min(v):.2f} "
              f"median={statistics.median(v):.2f} max={max(v):.2f}")
EOF
rm -f "$RESULTS"
