#!/usr/bin/env bash
# Sets up (Debian packages + build, skipped when already done) and runs the whole test suite:
# the layering check (scripts/check_layers.py), clang's thread-safety analysis
# (scripts/thread_safety.sh), the C++ tests through ctest, then through pytest the Python
# tests (python/tests), the multi-host tests (tests/multihost), Slurm (tests/slurm), the
# installed SDK and the Debian package (tests/sdk) and the Kubernetes manifests
# (tests/deploy), then the chaos suite once (scripts/chaos.sh --runs 1), then each fuzz target
# for 30 s (scripts/fuzz.sh).
#
#   scripts/test.sh              everything
#   scripts/test.sh -R Gcs       only ctest tests matching a regex (passed to ctest)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# Abseil's run-time lock-order check in every process the tests start (Phalanx's processes
# leave it off otherwise; base/mutex_check.h): a lock-order cycle aborts the process.
export PHALANX_MUTEX_DEADLOCK_CHECK="${PHALANX_MUTEX_DEADLOCK_CHECK:-abort}"
# The layers (under a second: it reads the sources): no folder includes one it may not. The
# self-test first shows the check still catches a planted bad include.
/usr/bin/python3 scripts/check_layers.py --self-test
/usr/bin/python3 scripts/check_layers.py
if [ $# -eq 0 ]; then
  # Every ABSL_GUARDED_BY checked by clang (syntax only: ~5 CPU-minutes from cold, seconds
  # when build-tsa/ is there from a previous run).
  scripts/thread_safety.sh
fi
# Tests start their own redis-server processes on free loopback ports and stop them by pid;
# two at a time fit two cores.
(cd build && ctest --output-on-failure -j "${TEST_JOBS:-2}" --timeout 300 "$@")
if [ $# -eq 0 ] && [ -d python/tests ]; then
    # This checkout's package, whichever checkout the .pth file points at.
  PYTHONPATH="$(pwd)/python:$(pwd)/build/python${PYTHONPATH:+:$PYTHONPATH}" \
    /usr/bin/python3 -m pytest -q -p no:cacheprovider python/tests
  # Multi-host tests: 3 hosts as network namespaces on this machine (root; they skip with
  # one line where namespaces cannot be made), each test bounded to 3 minutes (the
  # DDP host-cut one, whose ranks import torch, to 8: @pytest.mark.bound).
  PYTHONPATH="$(pwd)/python:$(pwd)/build/python${PYTHONPATH:+:$PYTHONPATH}" \
    /usr/bin/python3 -m pytest -q -p no:cacheprovider -rs tests/multihost
  # Under load (4-7 min): one test of each fault family, multi-host and elastic, again while 16
  # busy processes keep the load at 16 or more (a shared cluster's busy machine must not see a
  # live rank lost, a call to a live actor failed, or a healthy rank killed as frozen).
  # python/tests/test_load.py ran its bursts of jobs under such a hog above.
  PYTHONPATH="$(pwd)/python:$(pwd)/build/python${PYTHONPATH:+:$PYTHONPATH}" \
    scripts/with_cpu_hog.sh 16 -- /usr/bin/python3 -m pytest -q -p no:cacheprovider -rs \
    tests/multihost -k "link_down_job or controller_host_down or sigstop_heals and rank or \
      flapping or cut_host_under_ddp"
  scripts/with_cpu_hog.sh 16 -- build/bin/elastic_test --gtest_brief=1 --gtest_filter=\
'*SigkilledRankSurvivors*:*AMemberFrozenAsTheEpochFormsIsFound*:*AStoppedRankIsFoundByItsSilence*:'\
'*ARankStuck*:*NodeManagerDeath*:*AKilledController*'
  # Slurm (~30 s): scripts/slurm/phalanx.sbatch under a real munged, slurmctld and two slurmd,
  # one per network-namespace host (root; skips with one line where it cannot run).
  PYTHONPATH="$(pwd)/python:$(pwd)/build/python${PYTHONPATH:+:$PYTHONPATH}" \
    /usr/bin/python3 -m pytest -q -p no:cacheprovider -rs tests/slurm
  # The C++ SDK as a user outside this tree has it (~1 min): cmake --install, the out-of-tree
  # project examples/cpp/standalone built with find_package(Phalanx) and pkg-config and run on
  # a cluster of the installed binaries; the .deb's Depends and contents. Then the Kubernetes
  # manifests, parsed and checked against `phalanx start --help` (no cluster runs here).
  /usr/bin/python3 -m pytest -q -p no:cacheprovider -rs tests/sdk tests/deploy
  # The chaos suite once (~6 min): every scenario heals, 0 steps lost, 0 strays, or this fails.
  scripts/chaos.sh --runs 1
fi
if [ $# -eq 0 ]; then
  # Each fuzz target for 30 s from its corpus in fuzz/corpus/ (2 min, plus the clang build of
  # the targets into build-fuzz/ when it is not there); a crash fails the run.
  scripts/fuzz.sh all 30
fi
