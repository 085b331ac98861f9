#!/usr/bin/env bash
# Installs the Debian packages Phalanx needs (idempotent, apt-get, as root), then configures
# and builds the project with CMake, Ninja and ccache into build/.
#
#   scripts/setup.sh             everything: the tests, benchmarks and their tools too
#   scripts/setup.sh --demo      only what building and running needs, and only the targets
#                                scripts/demo.sh runs (and `import phalanx`): a first run in
#                                minutes (no torch, Chromium, Prometheus, Slurm or clang)
#   SKIP_APT=1 scripts/setup.sh  build only
set -euo pipefail
cd "$(dirname "$0")/.."
DEMO=0
[ "${1:-}" = --demo ] && DEMO=1

# What building and running Phalanx needs: the demo's set.
RUN_PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  libhiredis-dev redis-server libspdlog-dev libboost-fiber-dev libboost-context-dev
  pybind11-dev python3-dev python3-numpy python3-msgpack python3-cloudpickle
  libgloo-dev libyaml-cpp-dev libcli11-dev nlohmann-json3-dev libmsgpack-cxx-dev
  libssl-dev libcpp-httplib-dev libjs-chart.js procps iproute2 psmisc
)
# Everything else: the tests, the benchmarks, the checks and the integrations they exercise.
PACKAGES=(
  "${RUN_PACKAGES[@]}"
  git clang-format
  clang-14  # scripts/thread_safety.sh (clang's -Wthread-safety over the project)
  # scripts/fuzz.sh: libFuzzer, ASan and UBSan runtimes (libclang-rt-14-dev is only a
  # Recommends of clang-14, and apt-get runs with --no-install-recommends below)
  libclang-rt-14-dev libfuzzer-14-dev
  libgtest-dev libgmock-dev python3-torch
  libtorch-dev  # torch's C++ headers (c10d): the torch.distributed backend (python/src)
  python3-pytest libbenchmark-dev python3-sklearn
  iptables  # tests/multihost: a node manager's port firewalled from one host
  redis-sentinel  # Redis HA (--redis-sentinel); the tests run redis-server --sentinel
  # The real Prometheus and headless Chromium the observability tests use
  prometheus chromium chromium-driver python3-selenium
  slurm-wlm munge  # scripts/slurm/phalanx.sbatch; tests/slurm starts its own munged and Slurm
  # The Debian package (cpack -G DEB computes its Depends with dpkg-shlibdeps; tests/sdk)
  dpkg-dev
  # `pip install .` (pyproject.toml, setup.py) and its test: a wheel built offline with
  # Debian's setuptools and wheel, installed into a virtual environment
  python3-pip python3-setuptools python3-wheel python3-venv binutils
)

[ "$DEMO" = 1 ] && PACKAGES=("${RUN_PACKAGES[@]}")
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${SKIP_APT:-0}" != 1 ] && [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${#missing[@]} Debian packages: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" != 0 ] && SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# redis-server's and redis-sentinel's packages may start system instances; Phalanx and its
# tests start their own.
for unit in redis-server redis-sentinel; do
  if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet "$unit" 2>/dev/null; then
    systemctl stop "$unit" || true
  fi
done

export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}"
if [ "$DEMO" = 1 ]; then
  # Configured as a full build is when it runs (tests and benchmarks on, when their packages
  # are here), so that a later scripts/setup.sh reuses build/; only the demo's targets built.
  TESTS=OFF
  dpkg-query -W -f='${Status}' libgtest-dev 2>/dev/null | grep -q "install ok installed" &&
    dpkg-query -W -f='${Status}' libbenchmark-dev 2>/dev/null | grep -q "install ok installed" &&
    TESTS=ON
  TARGETS=(--target phalanx phalanx-gcs phalanx-node phalanx-job-runner elastic_regression
           phalanx_native)
else
  TESTS=ON
  TARGETS=()
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" \
  -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
  -DPHALANX_WERROR=ON -DPHALANX_BUILD_TESTS="$TESTS" -DPHALANX_BUILD_BENCH="$TESTS" >/dev/null
cmake --build build -j "${JOBS:-$(nproc)}" "${TARGETS[@]}"


# Put `phalanx` on PATH (a link into build/bin, so a rebuild is picked up at once).
if [ -w /usr/local/bin ]; then
  ln -sf "$(pwd)/build/bin/phalanx" /usr/local/bin/phalanx
fi
# `import phalanx` from Debian's python3 with nothing to set: a .pth file in its site dir puts
# the package (python/) and its native module (build/python/) on the path.
SITE=$(/usr/bin/python3 -c 'import site; print(site.getsitepackages()[0])')
if mkdir -p "$SITE" 2>/dev/null && [ -w "$SITE" ]; then
  printf '%s\n%s\n' "$(pwd)/python" "$(pwd)/build/python" > "$SITE/phalanx.pth"
fi
echo "setup: built into $(pwd)/build; phalanx is $(command -v phalanx || echo "$(pwd)/build/bin/phalanx")"
