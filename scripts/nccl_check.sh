#!/bin/bash
# The NCCL checks on a machine with a GPU: the NCCL tests of
# collective_test and bench/nccl_bench.
#
#   scripts/nccl_check.sh                  # on a machine where this checkout was built
#   scripts/nccl_check.sh --bundle DIR     # here: put the stripped binaries, redis-server and
#                                          # their shared libraries (not glibc, libstdc++,
#                                          # NCCL or CUDA) in DIR, to carry to a GPU machine
#   scripts/nccl_check.sh --from DIR       # there: run the checks from such a bundle
#
# A bundle runs on a machine whose glibc and libstdc++ are at least as new as this Debian 12
# build's, with NCCL and the CUDA runtime of its own (found under /usr, /opt and /lib). The
# programs look for each other in the build directory compiled into them (PHALANX_BIN_DIR,
# recorded in DIR/compiled_bin_dir): --from links that path to the bundle where it is missing.
# Logs go to $OUT when it is set, else to a temporary directory.
set -u
repo="$(cd "$(dirname "$0")/.." && pwd)"
programs=(collective_test collective_rank phalanx-gcs nccl_bench)
# Bounds of the two checks, seconds.
readonly TEST_TIMEOUT_S=180 BENCH_TIMEOUT_S=120

if [ "${1:-}" = "--bundle" ]; then
  dir="${2:?--bundle needs a directory}"
  rm -rf "$dir" && mkdir -p "$dir/bin" "$dir/lib" || exit 1
  for p in "${programs[@]}"; do
    strip -o "$dir/bin/$p" "$repo/build/bin/$p" || exit 1
  done
  cp "$(command -v redis-server)" "$dir/bin/" || exit 1
  for b in "$dir"/bin/*; do ldd "$b"; done | awk '/=>/ {print $3}' | sort -u |
    grep -v -E '/(libc|libm|libpthread|libdl|librt|ld-linux|libstdc\+\+|libgcc_s|libnccl|libcudart)[.-]' |
    xargs -r cp -L -t "$dir/lib/"
  echo "$repo/build/bin" >"$dir/compiled_bin_dir"
  du -sh "$dir"
  exit 0
fi

bin="$repo/build/bin"
if [ "${1:-}" = "--from" ]; then
  dir="$(cd "${2:?--from needs a directory}" && pwd)"
  compiled="$(cat "$dir/compiled_bin_dir")"
  if [ -n "$compiled" ] && [ ! -e "$compiled/collective_rank" ]; then
    mkdir -p "$(dirname "$compiled")" && rm -rf "$compiled" && ln -s "$dir/bin" "$compiled"
  fi
  bin="$dir/bin"
  export PATH="$dir/bin:$PATH"
  export LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
out="${OUT:-$(mktemp -d)}"

echo "## $(uname -r); $(ldd --version | head -1)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader ||
  echo "## nvidia-smi failed: no GPU driver here"
for lib in libnccl.so.2 libcudart.so.13 libcudart.so.12; do
  found="$(find /usr /opt /lib -name "$lib" 2>/dev/null | head -1)"
  [ -n "$found" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$(dirname "$found")"
done
echo "## LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
missing="$(ldd "$bin/collective_test" | grep 'not found')"
[ -n "$missing" ] && { echo "## missing libraries: $missing"; exit 1; }

rc=0
echo "## collective_test --gtest_filter='*Nccl*'"
NCCL_DEBUG=VERSION timeout "$TEST_TIMEOUT_S" "$bin/collective_test" --gtest_filter='*Nccl*' 2>&1 |
  tee "$out/collective_test.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
for iters in 50 200; do
  echo "## nccl_bench --iters $iters"
  timeout "$BENCH_TIMEOUT_S" "$bin/nccl_bench" --iters "$iters" 2>&1 | tee "$out/nccl_bench_$iters.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
done
echo "## logs in $out; rc=$rc"
exit "$rc"
