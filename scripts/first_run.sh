#!/usr/bin/env bash
# A newcomer's first run, timed on a fresh Debian 12: debootstraps a minimal bookworm in a
# temporary chroot, copies this checkout's committed tree (git archive HEAD) into it, and times
# `scripts/demo.sh` there (its packages, its build, the demo itself); with --tests, then times
# `scripts/setup.sh` (what scripts/test.sh adds before its tests run: every other package and
# target). Removes the chroot at the end, also on failure. As root; downloads from
# deb.debian.org (~400 MB for the demo, ~2 GB more with --tests).
#
#   scripts/first_run.sh [--tests] [mirror]
#
# Last line: RESULT demo_s=... [setup_tests_s=...]
set -euo pipefail
cd "$(dirname "$0")/.."
TESTS=0
[ "${1:-}" = --tests ] && TESTS=1 && shift
MIRROR=${1:-http://deb.debian.org/debian}
# Bounds: the chroot's creation, and each timed step (apt, the build and the demo together).
DEBOOTSTRAP_TIMEOUT_S=900
STEP_TIMEOUT_S=3600

command -v debootstrap >/dev/null || apt-get install -y -qq debootstrap >/dev/null
WORK=$(mktemp -d /tmp/phalanx-first-run-XXXXXX)
R=$WORK/root
cleanup() {
  for p in $(pgrep -f . || true); do
    [ "$(readlink "/proc/$p/root" 2>/dev/null)" = "$R" ] && kill -9 "$p" 2>/dev/null || true
  done
  for m in dev/shm dev/pts dev sys proc; do umount -l "$R/$m" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

echo "== debootstrap bookworm (minbase) into $R"
timeout "$DEBOOTSTRAP_TIMEOUT_S" debootstrap --variant=minbase bookworm "$R" "$MIRROR" >/dev/null
mount --bind /proc "$R/proc"
mount --bind /sys "$R/sys"
mount --bind /dev "$R/dev"
mount --bind /dev/pts "$R/dev/pts"
mount --bind /dev/shm "$R/dev/shm"
cp /etc/resolv.conf "$R/etc/resolv.conf"
mkdir -p "$R/root/phalanx"
git archive HEAD | tar -x -C "$R/root/phalanx"
in_root() { chroot "$R" env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  bash -c "cd /root/phalanx && $1"; }

echo "== scripts/demo.sh in the fresh chroot ($(nproc) cores)"
start=$(date +%s)
timeout "$STEP_TIMEOUT_S" chroot "$R" true  # the chroot works
in_root "timeout $STEP_TIMEOUT_S scripts/demo.sh" > "$WORK/demo.log" 2>&1 || {
  tail -40 "$WORK/demo.log"; echo "first_run: scripts/demo.sh failed" >&2; exit 1; }
demo_s=$(( $(date +%s) - start ))
grep -E "^== |Succeeded|SUCCEEDED" "$WORK/demo.log" | head -20
echo "scripts/demo.sh: ${demo_s} s from a fresh Debian 12 (packages, build, demo)"
result="demo_s=$demo_s"
if [ "$TESTS" = 1 ]; then
  echo "== scripts/setup.sh (what scripts/test.sh adds before its tests)"
  start=$(date +%s)
  in_root "timeout $STEP_TIMEOUT_S scripts/setup.sh" > "$WORK/setup.log" 2>&1 || {
    tail -40 "$WORK/setup.log"; echo "first_run: scripts/setup.sh failed" >&2; exit 1; }
  setup_s=$(( $(date +%s) - start ))
  echo "scripts/setup.sh after the demo: ${setup_s} s"
  result="$result setup_tests_s=$setup_s"
fi
echo "RESULT $result"
