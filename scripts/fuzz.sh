#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, clang-14 with ASan and UBSan, into build-fuzz/) and runs
# one of them, or each in turn, starting from its seed corpus in fuzz/corpus/TARGET/.
#
#   scripts/fuzz.sh TARGET SECONDS     run one target for SECONDS (job_spec, msgpack_args,
#                                      upload, gcs_requests)
#   scripts/fuzz.sh all SECONDS        run each target for SECONDS
#   scripts/fuzz.sh TARGET SECONDS -runs=1000000   extra arguments go to libFuzzer
#   scripts/fuzz.sh build             only build every target
#
# New corpus entries go to a scratch dir (FUZZ_WORK, default a fresh dir under /dev/shm or
# /tmp, removed after a run without crashes), never to the repo; a crash leaves its input there as crash-*
# (reproduce it with `build-fuzz/bin/fuzz_TARGET FILE`) and this script exits non-zero.
# Env: FUZZ_JOBS (build jobs, default: cores), FUZZ_WORK, FUZZ_BUILD (default build-fuzz).
set -euo pipefail
cd "$(dirname "$0")/.."
TARGETS=(job_spec msgpack_args upload gcs_requests)
BUILD="${FUZZ_BUILD:-build-fuzz}"

if [ "${1:-}" = build ]; then
  set -- all build
fi
if [ $# -lt 2 ]; then
  echo "usage: scripts/fuzz.sh TARGET|all SECONDS [libFuzzer args...]; targets: ${TARGETS[*]}" >&2
  exit 2
fi
target=$1
seconds=$2
shift 2
if [ "$target" = all ]; then
  selected=("${TARGETS[@]}")
elif [[ " ${TARGETS[*]} " == *" $target "* ]]; then
  selected=("$target")
else
  echo "fuzz: no target '$target'; use one of ${TARGETS[*]} or all" >&2
  exit 2
fi
if ! command -v clang++-14 >/dev/null; then
  echo "fuzz: clang++-14 not found; scripts/setup.sh installs it (clang-14, libclang-rt-14-dev)" >&2
  exit 1
fi

# The build: only the fuzz targets and the libraries they link (no tests, no Python module).
start=$SECONDS
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache
  -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
if [ ! -f "$BUILD/build.ninja" ]; then
  # -O1 and line tables only (as OSS-Fuzz builds): quicker to compile than -O2 -g, and the
  # sanitizers' reports still name file and line. Asserts stay on.
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Fuzz \
    -DCMAKE_C_FLAGS_FUZZ="-O1 -gline-tables-only" -DCMAKE_CXX_FLAGS_FUZZ="-O1 -gline-tables-only" \
    -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 "${launcher[@]}" \
    -DPHALANX_FUZZ=ON -DPHALANX_BUILD_TESTS=OFF -DPHALANX_WERROR=ON >/dev/null
fi
ninja -C "$BUILD" -j "${FUZZ_JOBS:-$(nproc)}" --quiet "${selected[@]/#/fuzz_}"
echo "fuzz: built ${selected[*]} ($((SECONDS - start)) s)"
[ "$seconds" = build ] && exit 0

# On tmpfs where there is one: the upload target writes and removes files at every input.
scratch_root=/tmp
[ -w /dev/shm ] && scratch_root=/dev/shm
work="${FUZZ_WORK:-$(mktemp -d "$scratch_root/phalanx-fuzz-XXXXXX")}"
failed=()
for t in "${selected[@]}"; do
  mkdir -p "$work/$t/corpus" "$work/$t/artifacts" "$work/$t/tmp"
  echo "fuzz: $t for $seconds s (corpus and crashes in $work/$t)"
  # The first corpus dir is where libFuzzer writes new entries; the repo's seeds are read only.
  # -timeout: one input running this long is a hang (a crash); -rss_limit_mb: memory.
  rc=0
  TMPDIR="$work/$t/tmp" "$BUILD/bin/fuzz_$t" "$work/$t/corpus" "fuzz/corpus/$t" -max_total_time="$seconds" \
    -timeout=30 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$work/$t/artifacts/" "$@" >"$work/$t/log" 2>&1 || rc=$?
  grep -aE '^(stat::|Done [0-9]+ runs)' "$work/$t/log" | sed "s/^/fuzz: $t: /" || true
  if [ "$rc" != 0 ]; then
    tail -n 40 "$work/$t/log" >&2
    echo "fuzz: $t FAILED (exit $rc); the input is in $work/$t/artifacts/" >&2
    failed+=("$t")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: ${selected[*]}: no crash"
# A scratch dir of our own goes once nothing in it is needed; one named by FUZZ_WORK stays.
[ -z "${FUZZ_WORK:-}" ] && rm -rf "$work"
exit 0
