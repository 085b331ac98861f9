#!/usr/bin/env bash
# Runs a command while N busy-looping processes keep the CPUs busy (a shared cluster's
# machine: on 2 cores, 16 of them keep the load at 16 or more), then kills them by pid,
# whatever the command did. Exits with the command's status.
#   scripts/with_cpu_hog.sh 16 -- build/bin/elastic_test --gtest_filter='*Sigkilled*'
set -uo pipefail
if [ $# -lt 3 ] || [ "$2" != "--" ] || ! [[ "$1" =~ ^[0-9]+$ ]]; then
  echo "usage: $0 N -- command [args...]   (N busy processes while the command runs)" >&2
  exit 2
fi
n=$1
shift 2
pids=()
cleanup() {
  [ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2>/dev/null
  [ ${#pids[@]} -gt 0 ] && wait "${pids[@]}" 2>/dev/null
  return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM
for _ in $(seq 1 "$n"); do
  /bin/sh -c 'while :; do :; done' &
  pids+=($!)
done
sleep 2  # let the load rise
echo "with_cpu_hog: $n busy processes, load $(cut -d' ' -f1 /proc/loadavg)" >&2
"$@"
status=$?
echo "with_cpu_hog: load $(cut -d' ' -f1 /proc/loadavg) at the end" >&2
exit $status
