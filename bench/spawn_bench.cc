// spawn_bench: how fast a node starts actors in a burst, and what an idle worker costs.
//
// Two nodes in one cluster on this machine: one forks C++ workers from a fork server per
// program (the default), the other starts a process of the program for each worker
// (`--fork-server false`, the peer: exec, dynamic linking and static initialization each
// time). The same burst of creations goes to each in turn, rounds alternating, the clock
// running from the first creation until every actor answered a call. Each round also gives
// the share of the machine's cores busy meanwhile (/proc/stat): near 100%, the burst is bound
// by CPU; well under, by a wait. Then the PSS of idle workers of each kind and of the fork
// server (PSS counts a shared page once across the processes that share it, where RSS counts
// it in each).
//
//   build/bin/spawn_bench [burst, default 200] [rounds, default 2] [fork|exec|both, default both]
//
// (`fork` or `exec` alone: one kind's bursts only, to profile it.)
//
// Last line: RESULT fork_creations_per_s=… exec_creations_per_s=… ratio=… (fork ÷ exec,
// median of the rounds) fork_worker_pss_mib=… exec_worker_pss_mib=… fork_server_pss_mib=…
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "actors/api.h"
#include "bench/bench_util.h"
#include "runtime/common/files.h"
#include "runtime/common/process.h"
#include "runtime/common/worker_env.h"
#include "runtime/worker/worker_host.h"
#include "tests/testing/test_util.h"

namespace {

class Idle {
 public:
  explicit Idle(int) {}
  int Pid() { return ::getpid(); }
};

}  // namespace

PHALANX_ACTOR(Idle, int);
PHALANX_METHODS(Idle, Pid);

namespace phalanx {
namespace {

// Proportional set size of `pid` in MiB (/proc/PID/smaps_rollup); -1 if gone.
double PssMiB(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/smaps_rollup"));
  std::string key, unit;
  int64_t kb;
  while (in >> key) {
    if (key == "Pss:") {
      in >> kb >> unit;
      return static_cast<double>(kb) / 1024;
    }
    std::getline(in, unit);
  }
  return -1;
}

// CPU time (user + system clock ticks) `pid` used so far; 0 if gone.
int64_t CpuTicks(pid_t pid) {
  auto stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  if (!stat.ok()) return 0;
  size_t close = stat->rfind(')');
  long long user = 0, system = 0;
  if (close == std::string::npos ||
      std::sscanf(stat->c_str() + close + 1,
                  " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lld %lld", &user, &system) != 2) {
    return 0;
  }
  return user + system;
}

// The machine's CPU time so far, from the first line of /proc/stat: {busy, total} in clock
// ticks over all cores (idle and iowait are not busy); {0, 0} if unreadable.
std::pair<int64_t, int64_t> MachineTicks() {
  auto stat = ReadFile("/proc/stat");
  long long v[8] = {};
  if (!stat.ok() || std::sscanf(stat->c_str(), "cpu %lld %lld %lld %lld %lld %lld %lld %lld", &v[0],
                                &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) != 8) {
    return {0, 0};
  }
  int64_t total = 0;
  for (long long x : v) total += x;
  return {total - v[3] - v[4], total};
}

struct Burst {
  double per_s = 0;
  double busy = 0;  // the fraction of the machine's cores busy while it ran
  std::vector<int> pids;
};

// Creates `n` actors needing `resource` (so they land on its node) and waits until each
// answered a call; then kills them and waits until their processes are gone.
Burst RunBurst(const std::string& resource, int n, bool keep) {
  absl::Time start = absl::Now();
  auto [busy_before, total_before] = MachineTicks();
  std::vector<ActorHandle<Idle>> actors;
  for (int i = 0; i < n; ++i) {
    auto a = Actor<Idle>().SetResources({{resource, 1}}).Remote(i);
    if (a.ok()) actors.push_back(*a);
  }
  std::vector<ObjectRef<int>> refs;
  for (const auto& a : actors) refs.push_back(a.Task(&Idle::Pid).Remote());
  auto pids = Get(refs, absl::Seconds(120));
  Burst burst;
  burst.per_s = pids.ok() ? n / absl::ToDoubleSeconds(absl::Now() - start) : 0;
  auto [busy_after, total_after] = MachineTicks();
  if (total_after > total_before) {
    burst.busy = static_cast<double>(busy_after - busy_before) /
                 static_cast<double>(total_after - total_before);
  }
  if (pids.ok()) burst.pids = *pids;
  if (keep) return burst;
  for (const auto& a : actors) Kill(a).IgnoreError();
  for (int pid : burst.pids) WaitProcessGone(pid, absl::Seconds(10));
  return burst;
}

int Main(int argc, char** argv) {
  int burst = argc > 1 ? std::atoi(argv[1]) : 200;
  int rounds = argc > 2 ? std::atoi(argv[2]) : 2;
  std::string only = argc > 3 ? argv[3] : "both";
  testing::RedisServer redis;
  testing::GcsProcess gcs(redis, bench::GcsOptions());
  bench::UseGcsTls(gcs);
  testing::NodeOptions fork_node;
  fork_node.num_cpus = 4 * burst;
  fork_node.resources_json = absl::StrCat("{\"fork\": ", 4 * burst, "}");
  testing::NodeOptions exec_node = fork_node;
  exec_node.resources_json = absl::StrCat("{\"exec\": ", 4 * burst, "}");
  exec_node.fork_server = false;
  testing::ChildProcess forking = testing::StartNode(gcs, "fork-node", fork_node);
  testing::ChildProcess execing = testing::StartNode(gcs, "exec-node", exec_node);
  InitOptions init;
  init.address = gcs.address();
  init.token = gcs.token();
  if (auto s = Init(init); !s.ok()) {
    std::fprintf(stderr, "init: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf(
      "# spawn_bench: bursts of %d actor creations, %d rounds, 2 cores shared by all parts, "
      "cluster transport %s\n",
      burst, rounds, bench::TransportName().c_str());
  // Warm both nodes alike: the program in the page cache, the fork server started, the
  // prestarted workers waiting.
  RunBurst("fork", 4, false);
  RunBurst("exec", 4, false);
  absl::SleepFor(absl::Seconds(1));

  std::vector<double> fork_rates, exec_rates;
  for (int r = 0; r < rounds; ++r) {
    Burst f = only != "exec" ? RunBurst("fork", burst, false) : Burst{};
    absl::SleepFor(absl::Seconds(1));
    Burst e = only != "fork" ? RunBurst("exec", burst, false) : Burst{};
    absl::SleepFor(absl::Seconds(1));
    fork_rates.push_back(f.per_s);
    exec_rates.push_back(e.per_s);
    std::printf(
        "round %d: fork server %.0f creations/s (cores %.0f%% busy), a process each %.0f "
        "creations/s (%.0f%% busy)\n",
        r + 1, f.per_s, 100 * f.busy, e.per_s, 100 * e.busy);
  }

  // Idle workers: a burst of each kind kept, and the fork server.
  Burst f = RunBurst("fork", burst, true);
  Burst e = RunBurst("exec", burst, true);
  absl::SleepFor(absl::Seconds(1));
  std::vector<int> idle = f.pids;
  idle.insert(idle.end(), e.pids.begin(), e.pids.end());
  int64_t cpu_before = 0, cpu_after = 0;
  for (int pid : idle) cpu_before += CpuTicks(pid);
  absl::Time idle_start = absl::Now();
  absl::SleepFor(absl::Seconds(3));
  for (int pid : idle) cpu_after += CpuTicks(pid);
  double idle_ms_per_s = 1000.0 * static_cast<double>(cpu_after - cpu_before) /
                         static_cast<double>(::sysconf(_SC_CLK_TCK)) /
                         absl::ToDoubleSeconds(absl::Now() - idle_start) /
                         static_cast<double>(std::max<size_t>(idle.size(), 1));
  std::printf("idle workers (%zu): %.3f ms of CPU per second each\n", idle.size(), idle_ms_per_s);
  std::vector<double> fork_pss, exec_pss, server_pss;
  for (int pid : f.pids) fork_pss.push_back(PssMiB(pid));
  for (int pid : e.pids) exec_pss.push_back(PssMiB(pid));
  for (pid_t pid : testing::ChildrenNamed(forking.pid(), kForkServerName))
    server_pss.push_back(PssMiB(pid));
  double fork_rate = bench::Percentile(fork_rates, 0.5);
  double exec_rate = bench::Percentile(exec_rates, 0.5);
  double fork_mib = bench::Percentile(fork_pss, 0.5), exec_mib = bench::Percentile(exec_pss, 0.5);
  double server_mib = server_pss.empty() ? -1 : server_pss[0];
  std::printf(
      "idle worker PSS median: forked %.1f MiB, a process each %.1f MiB; fork server %.1f MiB\n",
      fork_mib, exec_mib, server_mib);
  Shutdown();
  std::printf(
      "RESULT fork_creations_per_s=%.0f exec_creations_per_s=%.0f ratio=%.2f "
      "fork_worker_pss_mib=%.1f exec_worker_pss_mib=%.1f fork_server_pss_mib=%.1f\n",
      fork_rate, exec_rate, fork_rate / exec_rate, fork_mib, exec_mib, server_mib);
  return 0;
}

}  // namespace
}  // namespace phalanx

int main(int argc, char** argv) {
  if (phalanx::worker::InWorkerMode()) return phalanx::worker::RunWorker();
  return phalanx::Main(argc, argv);
}
