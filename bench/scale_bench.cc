// scale_bench: the control plane with many nodes, simulated here. A real GCS and Redis serve
// lightweight node-manager stand-ins (many per thread of this process) that speak the real
// RPCs: RegisterNode, then Heartbeat at the node managers' default period (500 ms), against
// the GCS's default node timeout (3 s). Then a failure storm: a share of the nodes stops
// heartbeating at once.
//
//   build/bin/scale_bench [--nodes 1000] [--threads 8] [--steady-s 10] [--storm 0.1]
//
// Reports: registrations/s; in the steady phase, heartbeats/s handled, their latency as the
// stand-ins see it (p50, p99), heartbeats sent late (the stand-ins themselves falling behind,
// which would make the figures optimistic), and the GCS's CPU (cores) and RSS; in the storm,
// the time from the stand-ins going silent until the GCS has declared every one of them DEAD
// (and published it), and false deaths (live stand-ins declared dead) during the storm and 5 s
// after.
//
// Not simulated yet: actors on the stand-ins (the 40,000 actors and their re-placement
// after the storm), so "healed" here is "every silent node declared dead".
//
// Peer: Ray's published envelope (250+ nodes, 10k+ actors per cluster), printed for scale.
// Last line: RESULT nodes=... heartbeats_per_s=... heartbeat_p50_ms=... heartbeat_p99_ms=...
//            gcs_cpu_cores=... gcs_rss_mib=... storm_nodes=... storm_declared_s=...
//            false_deaths=...
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "gcs/gcs_client.h"
#include "runtime/common/ids.h"
#include "tests/testing/test_util.h"

namespace phalanx {
namespace {

constexpr absl::Duration kHeartbeatPeriod = absl::Milliseconds(500);  // node_manager.h's default
constexpr absl::Duration kLate = absl::Milliseconds(100);  // a beat sent this late counts
constexpr absl::Duration kStormBound = absl::Seconds(30);  // the storm's wait, at most
constexpr absl::Duration kAfterStorm = absl::Seconds(5);   // watched for false deaths after

// CPU seconds (user + system) and RSS bytes of `pid`, from /proc.
std::pair<double, int64_t> CpuAndRss(pid_t pid) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  std::getline(stat, line);
  std::vector<std::string> f = absl::StrSplit(line.substr(line.rfind(')') + 2), ' ');
  double ticks = sysconf(_SC_CLK_TCK);
  double cpu = f.size() > 22 ? (std::stod(f[11]) + std::stod(f[12])) / ticks : 0;
  int64_t rss = f.size() > 22 ? std::stoll(f[21]) * sysconf(_SC_PAGESIZE) : 0;
  return {cpu, rss};
}

struct StandIn {
  std::string id;
  absl::Time next_beat;
  std::atomic<bool> silent{false};
};

class Nodes {
 public:
  Nodes(const testing::GcsProcess& gcs, int count, int threads) {
    for (int i = 0; i < count; ++i) {
      nodes_.push_back(std::make_unique<StandIn>());
      nodes_.back()->id = NewId();
    }
    for (int t = 0; t < threads; ++t) {
      auto client = gcs::GcsClient::Connect({gcs.address(), gcs.token(), absl::Seconds(5)});
      if (!client.ok()) {
        std::fprintf(stderr, "connect: %s\n", client.status().ToString().c_str());
        std::exit(1);
      }
      clients_.push_back(std::move(*client));
    }
  }

  // Registers every stand-in (the threads share the work); returns the seconds it took.
  double Register() {
    absl::Time t0 = absl::Now();
    Parallel([&](int t, size_t i) {
      rpc::NodeInfo info;
      info.set_node_id(nodes_[i]->id);
      info.set_address(absl::StrCat("127.0.0.1:", 20000 + i));  // never called: no actors
      info.set_hostname(absl::StrCat("sim-", i));
      (*info.mutable_total()->mutable_amounts())["CPU"] = 8;
      (*info.mutable_total()->mutable_amounts())["memory"] = 32.0 * (1ll << 30);
      auto r = clients_[t]->RegisterNode(info);
      if (!r.ok()) failures_++;
      // Spread the first beats over a period, as real nodes start at different times.
      nodes_[i]->next_beat =
          absl::Now() + kHeartbeatPeriod * (static_cast<double>(i) / nodes_.size());
    });
    return absl::ToDoubleSeconds(absl::Now() - t0);
  }

  void StartBeating() {
    for (size_t t = 0; t < clients_.size(); ++t) {
      beaters_.emplace_back([this, t] { Beat(static_cast<int>(t)); });
    }
  }

  void Stop() {
    stop_ = true;
    for (auto& b : beaters_) b.join();
    beaters_.clear();
  }

  // Silences the first `count` stand-ins; returns their ids.
  std::set<std::string> Silence(size_t count) {
    std::set<std::string> ids;
    for (size_t i = 0; i < count && i < nodes_.size(); ++i) {
      nodes_[i]->silent = true;
      ids.insert(nodes_[i]->id);
    }
    return ids;
  }

  // Latencies (ms) and counts since the last call.
  struct Sample {
    std::vector<double> latencies_ms;
    int64_t sent = 0, late = 0, failed = 0;
  };
  Sample Take() {
    std::lock_guard<std::mutex> lock(mu_);
    Sample s;
    std::swap(s, sample_);
    return s;
  }
  int failures() const { return failures_; }
  gcs::GcsClient& client() { return *clients_[0]; }

 private:
  template <typename F>
  void Parallel(F each) {
    std::vector<std::thread> threads;
    for (size_t t = 0; t < clients_.size(); ++t) {
      threads.emplace_back([&, t] {
        for (size_t i = t; i < nodes_.size(); i += clients_.size()) each(static_cast<int>(t), i);
      });
    }
    for (auto& th : threads) th.join();
  }

  // Thread t's stand-ins: i ≡ t (mod threads), each beating every period.
  void Beat(int t) {
    Sample local;
    while (!stop_) {
      absl::Time now = absl::Now(), soonest = now + kHeartbeatPeriod;
      for (size_t i = t; i < nodes_.size() && !stop_; i += clients_.size()) {
        StandIn& n = *nodes_[i];
        if (n.silent) continue;
        if (n.next_beat > now) {
          soonest = std::min(soonest, n.next_beat);
          continue;
        }
        if (now - n.next_beat > kLate) local.late++;
        rpc::HeartbeatRequest request;
        request.set_node_id(n.id);
        absl::Time sent = absl::Now();
        auto reply = clients_[t]->Heartbeat(request);
        local.latencies_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - sent));
        local.sent++;
        if (!reply.ok() || reply->declared_dead() || reply->unknown_node()) local.failed++;
        n.next_beat += kHeartbeatPeriod;
        if (n.next_beat < now) n.next_beat = now + kHeartbeatPeriod;  // never burst to catch up
        soonest = std::min(soonest, n.next_beat);
        now = absl::Now();
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        sample_.latencies_ms.insert(sample_.latencies_ms.end(), local.latencies_ms.begin(),
                                    local.latencies_ms.end());
        sample_.sent += local.sent;
        sample_.late += local.late;
        sample_.failed += local.failed;
      }
      local = Sample();
      absl::Duration wait = soonest - absl::Now();
      if (wait > absl::ZeroDuration()) absl::SleepFor(std::min(wait, absl::Milliseconds(20)));
    }
  }

  std::vector<std::unique_ptr<StandIn>> nodes_;
  std::vector<std::unique_ptr<gcs::GcsClient>> clients_;
  std::vector<std::thread> beaters_;
  std::atomic<bool> stop_{false};
  std::atomic<int> failures_{0};
  std::mutex mu_;
  Sample sample_;
};

int Main(int argc, char** argv) {
  int nodes = 1000, threads = 8;
  double steady_s = 10, storm = 0.1;
  CLI::App app{"scale_bench"};
  app.add_option("--nodes", nodes, "simulated node managers")->check(CLI::Range(1, 100000));
  app.add_option("--threads", threads, "threads that run them")->check(CLI::Range(1, 256));
  app.add_option("--steady-s", steady_s, "seconds measured before the storm")
      ->check(CLI::Range(1.0, 3600.0));
  app.add_option("--storm", storm, "share of the nodes that go silent at once")
      ->check(CLI::Range(0.0, 1.0));
  CLI11_PARSE(app, argc, argv);

  testing::RedisServer redis;
  testing::GcsProcess gcs(redis, bench::GcsOptions());
  bench::UseGcsTls(gcs);
  std::printf(
      "# scale_bench: %d simulated node managers on %d threads, heartbeats every %s, the GCS's "
      "node timeout %ld ms, %ld cores, transport %s\n",
      nodes, threads, absl::FormatDuration(kHeartbeatPeriod).c_str(),
      static_cast<long>(testing::GcsProcess::Options().node_timeout_ms),
      sysconf(_SC_NPROCESSORS_ONLN), bench::TransportName().c_str());
  Nodes sim(gcs, nodes, threads);
  double reg_s = sim.Register();
  std::printf("registered %d nodes in %.2f s (%.0f/s), %d failed\n", nodes, reg_s, nodes / reg_s,
              sim.failures());
  std::fflush(stdout);
  sim.StartBeating();
  absl::SleepFor(absl::Seconds(2));  // settle
  sim.Take();
  double cpu0 = CpuAndRss(gcs.pid()).first;
  absl::Time t0 = absl::Now();
  absl::SleepFor(absl::Seconds(steady_s));
  auto [cpu1, rss1] = CpuAndRss(gcs.pid());
  double wall = absl::ToDoubleSeconds(absl::Now() - t0);
  Nodes::Sample steady = sim.Take();
  double cores = (cpu1 - cpu0) / wall;
  double per_s = steady.sent / wall;
  double p50 = bench::Percentile(steady.latencies_ms, 0.5),
         p99 = bench::Percentile(steady.latencies_ms, 0.99);
  std::printf(
      "steady %.1f s: %.0f heartbeats/s handled (expected %.0f), latency p50 %.2f ms p99 %.2f ms, "
      "%ld sent late, %ld failed; the GCS used %.2f cores, RSS %.0f MiB\n",
      wall, per_s, nodes / absl::ToDoubleSeconds(kHeartbeatPeriod), p50, p99, steady.late,
      steady.failed, cores, rss1 / 1048576.0);
  std::fflush(stdout);

  // The storm.
  size_t silenced = static_cast<size_t>(nodes * storm);
  std::set<std::string> silent = sim.Silence(silenced);
  absl::Time storm_at = absl::Now();
  double declared_s = -1;
  std::set<std::string> false_deaths;
  absl::Time watch_until = storm_at + kStormBound;
  while (absl::Now() < watch_until) {
    auto all = sim.client().GetAllNodes(false);
    if (all.ok()) {
      size_t dead = 0;
      for (const auto& n : *all) {
        if (n.state() != rpc::NODE_DEAD) continue;
        if (silent.count(n.node_id())) {
          ++dead;
        } else {
          false_deaths.insert(n.node_id());
        }
      }
      if (dead == silenced && declared_s < 0) {
        declared_s = absl::ToDoubleSeconds(absl::Now() - storm_at);
        watch_until = absl::Now() + kAfterStorm;
      }
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  Nodes::Sample during = sim.Take();
  sim.Stop();
  std::printf(
      "storm: %zu nodes silent at once; all declared DEAD after %.2f s (node timeout 3 s); "
      "false deaths %zu; heartbeats meanwhile p99 %.2f ms, %ld late\n",
      silenced, declared_s, false_deaths.size(), bench::Percentile(during.latencies_ms, 0.99),
      during.late);
  std::printf(
      "goals: GCS under 1 core: %s (%.2f); storm handled within 5 s: %s (%.2f s); no false "
      "deaths: %s. Ray publishes 250+ nodes and 10k+ actors per cluster\n",
      cores < 1 ? "met" : "missed", cores, declared_s >= 0 && declared_s <= 5 ? "met" : "missed",
      declared_s, false_deaths.empty() ? "met" : "missed");
  std::printf(
      "RESULT nodes=%d heartbeats_per_s=%.0f heartbeat_p50_ms=%.2f heartbeat_p99_ms=%.2f "
      "gcs_cpu_cores=%.3f gcs_rss_mib=%.0f storm_nodes=%zu storm_declared_s=%.2f "
      "false_deaths=%zu\n",
      nodes, per_s, p50, p99, cores, rss1 / 1048576.0, silenced, declared_s, false_deaths.size());
  return 0;
}

}  // namespace
}  // namespace phalanx

int main(int argc, char** argv) { return phalanx::Main(argc, argv); }
