// mutex_bench: what Abseil's run-time lock-order check costs an absl::Mutex here. Debian's
// libabsl is built without NDEBUG, so the check is on unless a process turns it off: every
// Lock then records itself in one process-wide graph under one spin lock. Phalanx's processes
// turn it off (base/mutex_check.h); the test suite turns it on. Measured in turn,
// --rounds times, with the check on (the peer: Debian's default) and off (Phalanx's):
//   - a nested pair of locks (lock a, lock b, unlock both) from one thread;
//   - the same from two threads at once, each with mutexes of its own (nothing shared but
//     the check's graph);
//   - a mutex made, locked, unlocked and destroyed (a destroyed mutex leaves the graph).
//
//   build/bin/mutex_bench [--rounds 5]
//
// Last line: RESULT nested_ns_on=… nested_ns_off=… nested_ratio=… (on ÷ off)
// two_threads_ns_on=… two_threads_ns_off=… two_threads_ratio=… create_ns_on=… create_ns_off=…
// create_ratio=… (nanoseconds per iteration, medians of the rounds)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "bench/bench_util.h"

namespace phalanx {
namespace {

constexpr int kIterations = 1'000'000;

// Nanoseconds per iteration of `body`, run kIterations times.
template <typename Body>
double NsPerIteration(Body body) {
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kIterations; ++i) body();
  std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - start;
  return took.count() / kIterations;
}

double Nested() {
  absl::Mutex a, b;
  return NsPerIteration([&] {
    absl::MutexLock first(&a);
    absl::MutexLock second(&b);
  });
}

// Two threads, each running Nested on mutexes of its own; the slower thread's time.
double NestedFromTwoThreads() {
  double took[2] = {0, 0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) threads.emplace_back([&took, t] { took[t] = Nested(); });
  for (auto& t : threads) t.join();
  return std::max(took[0], took[1]);
}

double Create() {
  return NsPerIteration([] {
    auto mu = std::make_unique<absl::Mutex>();
    mu->Lock();
    mu->Unlock();
  });
}

int Main(int argc, char** argv) {
  int rounds = 5;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: mutex_bench [--rounds N]\n");
      return 2;
    }
  }
  if (rounds < 1) {
    std::fprintf(stderr, "mutex_bench: --rounds takes a number of rounds, 1 or more\n");
    return 2;
  }
  std::printf(
      "# mutex_bench: ns per iteration, check on (Debian's libabsl default) and off "
      "(Phalanx's), %d rounds in turn\n",
      rounds);
  std::vector<double> nested[2], two[2], create[2];  // [0]: on, [1]: off
  for (int r = 0; r < rounds; ++r) {
    // Switched only here, with no lock held: a lock taken under one setting and released
    // under the other would confuse the check's record of held locks.
    for (int off = 0; off < 2; ++off) {
      absl::SetMutexDeadlockDetectionMode(off ? absl::OnDeadlockCycle::kIgnore
                                              : absl::OnDeadlockCycle::kAbort);
      nested[off].push_back(Nested());
      two[off].push_back(NestedFromTwoThreads());
      create[off].push_back(Create());
      std::printf("round %d, check %-3s: nested pair %.1f, from two threads %.1f, create %.1f\n",
                  r + 1, off ? "off" : "on", nested[off].back(), two[off].back(),
                  create[off].back());
    }
  }
  auto median = [](const std::vector<double>& v) { return bench::Percentile(v, 0.5); };
  std::printf(
      "RESULT nested_ns_on=%.1f nested_ns_off=%.1f nested_ratio=%.2f two_threads_ns_on=%.1f "
      "two_threads_ns_off=%.1f two_threads_ratio=%.2f create_ns_on=%.1f create_ns_off=%.1f "
      "create_ratio=%.2f\n",
      median(nested[0]), median(nested[1]), median(nested[0]) / median(nested[1]), median(two[0]),
      median(two[1]), median(two[0]) / median(two[1]), median(create[0]), median(create[1]),
      median(create[0]) / median(create[1]));
  return 0;
}

}  // namespace
}  // namespace phalanx

int main(int argc, char** argv) { return phalanx::Main(argc, argv); }
