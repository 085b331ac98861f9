// spawn_bench: how fast a node starts actors in a burst, and what an idle worker costs.
//
// Two nodes in one cluster on this machine: one forks C++ workers from a fork server per
// program (the default), the other starts a process of the program for each worker
// (`--fork-server false`, the peer: exec, dynamic linking and static initialization each
// time). The same burst of creations goes to each in turn, rounds alternating, the clock
// running from the first creation until every actor answered a call. Each round also gives
// the share of the machine's cores busy meanwhile (/proc/stat): near 100%, the burst is bound
// by CPU; well under, by a wait. And where that CPU went, in ms per creation: the new
// workers' own, this driver's, the GCS's, the node manager's, its fork servers' and Redis's.
// What a forked creation costs outside its worker gives a ceiling on the rate these cores
// could reach even if a worker's start cost nothing. Then the PSS of idle workers of each
// kind and of the fork server (PSS counts a shared page once across the processes that share
// it, where RSS counts it in each).
//
//   build/bin/spawn_bench [burst, default 200] [rounds, default 2] [fork|exec|both, default both]
//
// (`fork` or `exec` alone: one kind's bursts only, to profile it.)
//
// Last line: RESULT fork_creations_per_s=… exec_creations_per_s=… ratio=… (fork ÷ exec,
// median of the rounds) fork_worker_pss_mib=… exec_worker_pss_mib=… fork_server_pss_mib=…
// fork_cpu_ms=… fork_cpu_ms_outside_workers=… ceiling_per_s=… (the cores ÷ the CPU outside
// the workers; medians of the fork bursts)
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "actors/api.h"
#include "base/files.h"
#include "base/process.h"
#include "base/worker_env.h"
#include "bench/bench_util.h"
#include "tests/testing/test_util.h"
#include "worker/worker_host.h"

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

// CPU time (user + system clock ticks) `pid` used so far, with that of the children it
// reaped if `reaped` (the fork server's middle processes); 0 if gone.
int64_t CpuTicks(pid_t pid, bool reaped = false) {
  auto stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  if (!stat.ok()) return 0;
  size_t close = stat->rfind(')');
  long long v[4] = {};
  if (close == std::string::npos ||
      std::sscanf(stat->c_str() + close + 1,
                  " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lld %lld %lld %lld", &v[0], &v[1],
                  &v[2], &v[3]) != 4) {
    return 0;
  }
  return v[0] + v[1] + (reaped ? v[2] + v[3] : 0);
}

double TicksToMs(int64_t ticks) {
  return 1000.0 * static_cast<double>(ticks) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// The run time so far of `pid`'s live threads, in ms, from each one's schedstat (in ns).
// /proc/PID/stat rounds a process's time down to whole ticks (10 ms), more than a forked
// worker's whole start; threads that already ended are not counted.
double ThreadsMs(pid_t pid) {
  std::string dir = absl::StrCat("/proc/", pid, "/task");
  int64_t ns = 0;
  for (const std::string& thread : ListDir(dir)) {
    auto schedstat = ReadFile(absl::StrCat(dir, "/", thread, "/schedstat"));
    if (schedstat.ok()) ns += std::atoll(schedstat->c_str());
  }
  return static_cast<double>(ns) / 1e6;
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

// The cluster's long-lived processes, whose CPU a burst shares out by part.
struct Parts {
  pid_t gcs = 0;
  pid_t redis = 0;
};

// Where a burst's CPU went, in ms per creation.
struct CpuShare {
  double machine = 0;      // every process's, the kernel's threads included (/proc/stat)
  double workers = 0;      // the new workers' own, until each answered its call
  double driver = 0;       // this process: the creations and the calls
  double gcs = 0;          // the GCS
  double node = 0;         // the target node's manager
  double fork_server = 0;  // its fork servers, with the middle processes they reaped
  double redis = 0;

  double OutsideWorkers() const { return driver + gcs + node + fork_server + redis; }
};

struct Burst {
  double per_s = 0;
  double busy = 0;  // the fraction of the machine's cores busy while it ran
  CpuShare cpu;
  std::vector<int> pids;
};

// Creates `n` actors needing `resource` (so they land on the node whose manager is `node`)
// and waits until each answered a call; then kills them and waits until their processes are
// gone.
Burst RunBurst(const std::string& resource, int n, bool keep, pid_t node, const Parts& parts) {
  std::vector<pid_t> fork_servers = testing::ChildrenNamed(node, kForkServerName);
  auto fork_server_ticks = [&] {
    int64_t ticks = 0;
    for (pid_t pid : fork_servers) ticks += CpuTicks(pid, /*reaped=*/true);
    return ticks;
  };
  struct Snapshot {
    int64_t driver, gcs, node, fork_server, redis;
  };
  auto snapshot = [&] {
    return Snapshot{CpuTicks(::getpid()), CpuTicks(parts.gcs), CpuTicks(node), fork_server_ticks(),
                    CpuTicks(parts.redis)};
  };
  absl::Time start = absl::Now();
  auto [busy_before, total_before] = MachineTicks();
  Snapshot before = snapshot();
  std::vector<ActorHandle<Idle>> actors;
  absl::Status failed;
  for (int i = 0; i < n; ++i) {
    auto a = Actor<Idle>().SetResources({{resource, 1}}).Remote(i);
    if (a.ok()) {
      actors.push_back(*a);
    } else if (failed.ok()) {
      failed = a.status();
    }
  }
  std::vector<ObjectRef<int>> refs;
  for (const auto& a : actors) refs.push_back(a.Task(&Idle::Pid).Remote());
  auto pids = Get(refs, absl::Seconds(120));
  if (failed.ok() && !pids.ok()) failed = pids.status();
  Burst burst;
  burst.per_s = failed.ok() ? n / absl::ToDoubleSeconds(absl::Now() - start) : 0;
  auto [busy_after, total_after] = MachineTicks();
  Snapshot after = snapshot();
  if (total_after > total_before) {
    burst.busy = static_cast<double>(busy_after - busy_before) /
                 static_cast<double>(total_after - total_before);
  }
  if (!failed.ok()) {
    // Counted as 0 creations/s in the medians, and said here.
    std::fprintf(stderr, "a burst on the %s node failed (%zu of %d created): %s\n",
                 resource.c_str(), actors.size(), n, failed.ToString().c_str());
  }
  if (pids.ok()) burst.pids = *pids;
  double per = 1.0 / n;
  burst.cpu.machine = per * TicksToMs(busy_after - busy_before);
  for (int pid : burst.pids) burst.cpu.workers += per * ThreadsMs(pid);
  burst.cpu.driver = per * TicksToMs(after.driver - before.driver);
  burst.cpu.gcs = per * TicksToMs(after.gcs - before.gcs);
  burst.cpu.node = per * TicksToMs(after.node - before.node);
  burst.cpu.fork_server = per * TicksToMs(after.fork_server - before.fork_server);
  burst.cpu.redis = per * TicksToMs(after.redis - before.redis);
  if (keep) return burst;
  for (const auto& a : actors) Kill(a).IgnoreError();
  for (int pid : burst.pids) WaitProcessGone(pid, absl::Seconds(10));
  return burst;
}

// Each part's median over the bursts.
CpuShare MedianCpu(const std::vector<CpuShare>& bursts) {
  auto median = [&](double CpuShare::*part) {
    std::vector<double> v;
    for (const CpuShare& c : bursts) v.push_back(c.*part);
    return v.empty() ? 0 : bench::Percentile(v, 0.5);
  };
  CpuShare m;
  for (double CpuShare::*part :
       {&CpuShare::machine, &CpuShare::workers, &CpuShare::driver, &CpuShare::gcs, &CpuShare::node,
        &CpuShare::fork_server, &CpuShare::redis}) {
    m.*part = median(part);
  }
  return m;
}

std::string DescribeCpu(const CpuShare& c) {
  return absl::StrFormat(
      "workers %.2f, driver %.2f, GCS %.2f, node manager %.2f, fork server %.2f, Redis %.2f "
      "(machine %.2f)",
      c.workers, c.driver, c.gcs, c.node, c.fork_server, c.redis, c.machine);
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
  Parts parts;
  parts.gcs = gcs.pid();
  if (auto found = testing::ChildrenNamed(::getpid(), "redis-server"); !found.empty()) {
    parts.redis = found[0];
  }
  RunBurst("fork", 4, false, forking.pid(), parts);
  RunBurst("exec", 4, false, execing.pid(), parts);
  absl::SleepFor(absl::Seconds(1));

  std::vector<double> fork_rates, exec_rates;
  std::vector<CpuShare> fork_cpu;
  for (int r = 0; r < rounds; ++r) {
    Burst f = only != "exec" ? RunBurst("fork", burst, false, forking.pid(), parts) : Burst{};
    absl::SleepFor(absl::Seconds(1));
    Burst e = only != "fork" ? RunBurst("exec", burst, false, execing.pid(), parts) : Burst{};
    absl::SleepFor(absl::Seconds(1));
    fork_rates.push_back(f.per_s);
    exec_rates.push_back(e.per_s);
    std::printf(
        "round %d: fork server %.0f creations/s (cores %.0f%% busy), a process each %.0f "
        "creations/s (%.0f%% busy)\n",
        r + 1, f.per_s, 100 * f.busy, e.per_s, 100 * e.busy);
    if (f.per_s > 0) {
      fork_cpu.push_back(f.cpu);
      std::printf("  CPU ms per forked creation: %s\n", DescribeCpu(f.cpu).c_str());
    }
    if (e.per_s > 0) std::printf("  CPU ms per exec'd creation: %s\n", DescribeCpu(e.cpu).c_str());
  }
  // What a forked creation costs outside the worker bounds the rate even if a worker cost
  // nothing: the cores over that time.
  CpuShare cpu = MedianCpu(fork_cpu);
  long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
  double ceiling = cpu.OutsideWorkers() > 0 ? 1000.0 * cores / cpu.OutsideWorkers() : 0;
  if (!fork_cpu.empty()) {
    std::printf(
        "CPU ms per forked creation, median of the rounds: %s; outside the workers %.2f, so at "
        "most %.0f creations/s on these %ld cores even if a worker cost nothing\n",
        DescribeCpu(cpu).c_str(), cpu.OutsideWorkers(), ceiling, cores);
  }

  // Idle workers: a burst of each kind kept, and the fork server.
  Burst f = RunBurst("fork", burst, true, forking.pid(), parts);
  Burst e = RunBurst("exec", burst, true, execing.pid(), parts);
  absl::SleepFor(absl::Seconds(1));
  std::vector<int> idle = f.pids;
  idle.insert(idle.end(), e.pids.begin(), e.pids.end());
  int64_t cpu_before = 0, cpu_after = 0;
  for (int pid : idle) cpu_before += CpuTicks(pid);
  absl::Time idle_start = absl::Now();
  absl::SleepFor(absl::Seconds(3));
  for (int pid : idle) cpu_after += CpuTicks(pid);
  double idle_ms_per_s = TicksToMs(cpu_after - cpu_before) /
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
      "fork_worker_pss_mib=%.1f exec_worker_pss_mib=%.1f fork_server_pss_mib=%.1f "
      "fork_cpu_ms=%.2f fork_cpu_ms_outside_workers=%.2f ceiling_per_s=%.0f\n",
      fork_rate, exec_rate, fork_rate / exec_rate, fork_mib, exec_mib, server_mib, cpu.machine,
      cpu.OutsideWorkers(), ceiling);
  return 0;
}

}  // namespace
}  // namespace phalanx

int main(int argc, char** argv) {
  if (phalanx::worker::InWorkerMode()) return phalanx::worker::RunWorker();
  return phalanx::Main(argc, argv);
}
