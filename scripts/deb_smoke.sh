#!/usr/bin/env bash
# The Debian package on a machine with nothing built: makes build/'s package (cpack), a fresh
# Debian 12 (debootstrap minbase, no CUDA) in a temporary chroot, `apt install`s the package
# there, starts a head from /usr/bin/phalanx, runs Python tasks and an actor, builds
# examples/cpp/standalone against /usr and runs it, then stops everything and removes the
# chroot (also on failure). As root; downloads ~300 MB from deb.debian.org; ~3 minutes. Not
# part of scripts/test.sh (tests/sdk checks the package without a chroot).
#
#   scripts/deb_smoke.sh [mirror]
set -euo pipefail
cd "$(dirname "$0")/.."
MIRROR=${1:-http://deb.debian.org/debian}
# Bounds: the chroot's creation, each apt step, each run inside it.
DEBOOTSTRAP_TIMEOUT_S=900
APT_TIMEOUT_S=600
RUN_TIMEOUT_S=180

command -v debootstrap >/dev/null || apt-get install -y -qq debootstrap >/dev/null
WORK=$(mktemp -d /tmp/phalanx-deb-smoke-XXXXXX)
R=$WORK/root
cleanup() {
  chroot "$R" /usr/bin/phalanx stop --grace 3 >/dev/null 2>&1 || true
  for p in $(pgrep -f . || true); do
    [ "$(readlink "/proc/$p/root" 2>/dev/null)" = "$R" ] && kill -9 "$p" 2>/dev/null || true
  done
  for m in dev/pts dev sys proc; do umount -l "$R/$m" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

(cd build && cpack -G DEB -B "$WORK/deb" >/dev/null)
DEB=$(ls "$WORK"/deb/phalanx_*_amd64.deb)
echo "== $(basename "$DEB"): Depends $(dpkg-deb -f "$DEB" Depends | tr -d '\n' | cut -c1-120)..."
timeout "$DEBOOTSTRAP_TIMEOUT_S" debootstrap --variant=minbase bookworm "$R" "$MIRROR" >/dev/null
mount --bind /proc "$R/proc"; mount --bind /sys "$R/sys"
mount --bind /dev "$R/dev"; mount --bind /dev/pts "$R/dev/pts"
cp /etc/resolv.conf "$R/etc/resolv.conf"
cp "$DEB" "$R/root/"
cp -r examples/cpp/standalone "$R/root/standalone"
in_root() { chroot "$R" env PHALANX_TMPDIR=/root/sessions bash -c "$1"; }
mkdir -m 700 -p "$R/root/sessions"
echo "== a fresh Debian 12 without CUDA: /usr/local/cuda $( [ -e "$R/usr/local/cuda" ] && echo exists || echo absent)"
timeout "$APT_TIMEOUT_S" chroot "$R" bash -c \
  "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ./root/$(basename "$DEB")" \
  >"$WORK/apt.log" 2>&1 || { tail -20 "$WORK/apt.log"; exit 1; }
echo "== apt install: $(grep -c '^Setting up' "$WORK/apt.log") packages set up"
in_root "phalanx start --head --port 6520 --num-cpus 4 --dashboard-port 18300 | head -2"
in_root "phalanx status | sed -n 4,6p"
in_root "timeout $RUN_TIMEOUT_S python3 -c '
import phalanx
phalanx.init(\"auto\")
@phalanx.remote
def square(x): return x * x
@phalanx.remote
class C:
    def add(self, a, b): return a + b
print(\"python: tasks\", phalanx.get([square.remote(i) for i in range(5)]), \"actor\", phalanx.get(C.remote().add.remote(2, 3)))
'"
timeout "$APT_TIMEOUT_S" chroot "$R" bash -c \
  "DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends g++ cmake ninja-build" >/dev/null 2>&1
in_root "cd /root && cmake -S standalone -B sb -G Ninja >/dev/null && cmake --build sb | tail -1 && timeout $RUN_TIMEOUT_S ./sb/standalone"
in_root "phalanx stop"
echo "deb_smoke: the package installs, runs a cluster, Python and an SDK project on a fresh Debian 12"
