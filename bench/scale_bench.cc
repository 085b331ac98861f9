// scale_bench: the control plane with many nodes, simulated here. A real GCS and Redis serve
// lightweight node-manager stand-ins (many per thread of this process) that speak the real
// RPCs: RegisterNode, then Heartbeat at the node managers' default period (500 ms), against
// the GCS's default node timeout (3 s). Then a failure storm: a share of the nodes stops
// heartbeating at once.
//
//   build/bin/scale_bench [--nodes 1000] [--threads 8] [--steady-s 10] [--storm 0.1]
//
// The stand-ins also host actors: one gRPC server plays every stand-in's node manager
// (StartActor answers at once and reports the actor ALIVE to the GCS, as a node manager does
// once the worker is ready; KillActor answers found). A silent stand-in answers nothing.
//
// Reports: registrations/s; actors created (CreateActor from 8 driver threads, restartable
// forever) and the time until all are ALIVE; in the steady phase, heartbeats/s handled, their
// latency as the stand-ins see it (p50, p99), heartbeats sent late (the stand-ins themselves
// falling behind, which would make the figures optimistic), and the GCS's CPU (cores) and
// RSS; in the storm, the time from the stand-ins going silent until the GCS declared every
// one of them DEAD, and until every actor they hosted is ALIVE again on a survivor, and false
// deaths (live stand-ins declared dead) during the storm and 5 s after.
//
// Not simulated: calls to the actors (a stand-in's actors have no worker to answer them).
//
// Peer: Ray's published envelope (250+ nodes, 10k+ actors per cluster), printed for scale.
// Last line: RESULT nodes=... heartbeats_per_s=... heartbeat_p50_ms=... heartbeat_p99_ms=...
//            gcs_cpu_cores=... gcs_rss_mib=... storm_nodes=... storm_declared_s=...
//            actors=... actors_alive_s=... storm_actors=... storm_healed_s=... false_deaths=...
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/ids.h"
#include "base/proto/node.grpc.pb.h"
#include "base/rpc.h"
#include "bench/bench_util.h"
#include "client/gcs_client.h"
#include "tests/testing/test_util.h"

namespace phalanx {
namespace {

constexpr absl::Duration kHeartbeatPeriod = absl::Milliseconds(500);  // node_manager.h's default
constexpr absl::Duration kLate = absl::Milliseconds(100);    // a beat sent this late counts
constexpr absl::Duration kStormBound = absl::Seconds(30);    // the storm's wait, at most
constexpr absl::Duration kAfterStorm = absl::Seconds(5);     // watched for false deaths after
constexpr absl::Duration kActorsBound = absl::Seconds(300);  // creating every actor, at most
constexpr int kReporters = 4;                                // threads that report ALIVE to the GCS

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
  // `address`: where every stand-in's node manager answers (the ActorHost).
  Nodes(const testing::GcsProcess& gcs, int count, int threads, std::string address)
      : address_(std::move(address)) {
    for (int i = 0; i < count; ++i) {
      nodes_.push_back(std::make_unique<StandIn>());
      nodes_.back()->id = NewId();
      by_id_[nodes_.back()->id] = nodes_.back().get();
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
      info.set_address(address_);
      info.set_hostname(absl::StrCat("sim-", i));
      (*info.mutable_total()->mutable_amounts())["CPU"] = 64;
      (*info.mutable_total()->mutable_amounts())["memory"] = 32.0 * (1ll << 30);
      auto r = clients_[t]->RegisterNode(info, {});
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

  // Silences `count` stand-ins drawn at random (seeded); returns their ids.
  std::set<std::string> Silence(size_t count) {
    std::vector<size_t> order(nodes_.size());
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937(17));
    std::set<std::string> ids;
    for (size_t k = 0; k < count && k < order.size(); ++k) {
      nodes_[order[k]]->silent = true;
      ids.insert(nodes_[order[k]]->id);
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
  bool IsSilent(const std::string& id) const {
    auto it = by_id_.find(id);
    return it != by_id_.end() && it->second->silent;
  }
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

  const std::string address_;
  std::vector<std::unique_ptr<StandIn>> nodes_;
  std::map<std::string, StandIn*> by_id_;  // fixed after construction
  std::vector<std::unique_ptr<gcs::GcsClient>> clients_;
  std::vector<std::thread> beaters_;
  std::atomic<bool> stop_{false};
  std::atomic<int> failures_{0};
  std::mutex mu_;
  Sample sample_;
};

// Every stand-in's node manager, for actors: StartActor queues an ALIVE report (sent by
// kReporters threads, in order, as the node manager's report loop does) and records where
// each actor lives; a silent stand-in's calls fail as a dead host's would.
class ActorHost final : public rpc::NodeManagerService::Service {
 public:
  ActorHost(const testing::GcsProcess& gcs, std::function<bool(const std::string&)> silent)
      : silent_(std::move(silent)) {
    for (int i = 0; i < kReporters; ++i) {
      auto client = gcs::GcsClient::Connect({gcs.address(), gcs.token(), absl::Seconds(5)});
      if (!client.ok()) std::exit(1);
      reporters_.emplace_back(
          [this, c = std::shared_ptr<gcs::GcsClient>(std::move(*client))] { Report(*c); });
    }
  }
  ~ActorHost() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : reporters_) t.join();
  }

  grpc::Status StartActor(grpc::ServerContext*, const rpc::StartActorRequest* request,
                          rpc::StartActorReply* reply) override {
    const std::string& node = request->actor().node_id();
    if (silent_(node)) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the host is gone");
    rpc::ReportActorStateRequest report;
    report.set_actor_id(request->actor().actor_id());
    report.set_attempt(request->attempt());
    report.set_node_id(node);
    report.set_state(rpc::ACTOR_ALIVE);
    report.set_worker_address("127.0.0.1:1");
    reply->set_pid(0);
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(report));
    }
    cv_.notify_one();
    return grpc::Status::OK;
  }

  grpc::Status KillActor(grpc::ServerContext*, const rpc::KillActorRequest*,
                         rpc::KillActorReply* reply) override {
    reply->set_found(true);
    return grpc::Status::OK;
  }

  // Actors whose ALIVE report the GCS took, and on which node; and when the last one was.
  std::map<std::string, std::string> Alive() {
    std::lock_guard<std::mutex> lock(mu_);
    return alive_;
  }
  size_t AliveCount() {
    std::lock_guard<std::mutex> lock(mu_);
    return alive_.size();
  }
  // How many of `actors` are ALIVE now on a node outside `gone`.
  size_t AliveOutside(const std::set<std::string>& actors, const std::set<std::string>& gone) {
    std::lock_guard<std::mutex> lock(mu_);
    size_t n = 0;
    for (const auto& a : actors) {
      auto it = alive_.find(a);
      if (it != alive_.end() && !gone.count(it->second)) ++n;
    }
    return n;
  }

 private:
  void Report(gcs::GcsClient& client) {
    while (true) {
      rpc::ReportActorStateRequest report;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (stop_) return;
        report = std::move(queue_.front());
        queue_.pop_front();
      }
      auto reply = client.ReportActorState(report);
      if (reply.ok() && !reply->stale()) {
        std::lock_guard<std::mutex> lock(mu_);
        alive_[report.actor_id()] = report.node_id();
      }
    }
  }

  std::function<bool(const std::string&)> silent_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<rpc::ReportActorStateRequest> queue_;
  std::map<std::string, std::string> alive_;  // actor → node
  bool stop_ = false;
  std::vector<std::thread> reporters_;
};

int Main(int argc, char** argv) {
  int nodes = 1000, threads = 8, actors = 40000;
  double actors_alive_s = -1;
  double steady_s = 10, storm = 0.1;
  CLI::App app{"scale_bench"};
  app.add_option("--nodes", nodes, "simulated node managers")->check(CLI::Range(1, 100000));
  app.add_option("--threads", threads, "threads that run them")->check(CLI::Range(1, 256));
  app.add_option("--steady-s", steady_s, "seconds measured before the storm")
      ->check(CLI::Range(1.0, 3600.0));
  app.add_option("--actors", actors, "actors created on the stand-ins")
      ->check(CLI::Range(0, 1000000));
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
  std::unique_ptr<Nodes> nodes_sim;
  ActorHost host(gcs, [&](const std::string& id) { return nodes_sim && nodes_sim->IsSilent(id); });
  auto server = rpc::StartServer("127.0.0.1:0", {&host}, {gcs.token(), rpc::kMaxCallMessageBytes});
  if (!server.ok()) {
    std::fprintf(stderr, "the stand-ins' server: %s\n", server.status().ToString().c_str());
    return 1;
  }
  nodes_sim =
      std::make_unique<Nodes>(gcs, nodes, threads, absl::StrCat("127.0.0.1:", server->port));
  Nodes& sim = *nodes_sim;
  double reg_s = sim.Register();
  std::printf("registered %d nodes in %.2f s (%.0f/s), %d failed\n", nodes, reg_s, nodes / reg_s,
              sim.failures());
  std::fflush(stdout);
  sim.StartBeating();

  // Actors, created by 8 driver threads, restartable forever; placed by the GCS.
  absl::Time create_at = absl::Now();
  {
    std::vector<std::thread> drivers;
    std::atomic<int> failed{0};
    for (int t = 0; t < 8; ++t) {
      drivers.emplace_back([&, t] {
        auto client = gcs::GcsClient::Connect({gcs.address(), gcs.token(), absl::Seconds(30)});
        if (!client.ok()) {
          failed += actors / 8;
          return;
        }
        for (int i = t; i < actors; i += 8) {
          rpc::ActorInfo spec;
          spec.set_class_name("SimActor");
          spec.set_language("cpp");
          spec.set_code_path("/bin/true");
          spec.set_max_restarts(-1);
          spec.set_scheduling_strategy("SPREAD");  // every stand-in hosts some
          (*spec.mutable_resources()->mutable_amounts())["CPU"] = 0.1;
          if (!(*client)->CreateActor(spec).ok()) failed++;
        }
      });
    }
    for (auto& d : drivers) d.join();
    double calls_s = absl::ToDoubleSeconds(absl::Now() - create_at);
    absl::Time bound = absl::Now() + kActorsBound;
    while (host.AliveCount() < static_cast<size_t>(actors - failed) && absl::Now() < bound) {
      absl::SleepFor(absl::Milliseconds(50));
    }
    actors_alive_s = absl::ToDoubleSeconds(absl::Now() - create_at);
    std::printf(
        "actors: %d CreateActor calls in %.2f s (%.0f/s, %d failed); %zu ALIVE after %.2f s "
        "(%.0f/s)\n",
        actors, calls_s, actors / calls_s, failed.load(), host.AliveCount(), actors_alive_s,
        host.AliveCount() / actors_alive_s);
    std::fflush(stdout);
  }
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
  std::set<std::string> affected;  // the actors the silent stand-ins hosted
  for (const auto& [actor, node] : host.Alive()) {
    if (silent.count(node)) affected.insert(actor);
  }
  double declared_s = -1, healed_s = affected.empty() ? 0 : -1;
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
      }
    }
    if (healed_s < 0 && host.AliveOutside(affected, silent) == affected.size()) {
      healed_s = absl::ToDoubleSeconds(absl::Now() - storm_at);
    }
    if (declared_s >= 0 && healed_s >= 0 && watch_until - absl::Now() > kAfterStorm) {
      watch_until = absl::Now() + kAfterStorm;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  Nodes::Sample during = sim.Take();
  sim.Stop();
  std::printf(
      "storm: %zu nodes silent at once; all declared DEAD after %.2f s (node timeout 3 s); "
      "their %zu actors ALIVE on survivors after %.2f s; false deaths %zu; heartbeats meanwhile "
      "p99 %.2f ms, %ld late\n",
      silenced, declared_s, affected.size(), healed_s, false_deaths.size(),
      bench::Percentile(during.latencies_ms, 0.99), during.late);
  std::printf(
      "goals: GCS under 1 core: %s (%.2f); storm healed (every affected actor ALIVE on a "
      "survivor) within 5 s: %s (%.2f s); no false deaths: %s. Ray publishes 250+ nodes and "
      "10k+ actors per cluster\n",
      cores < 1 ? "met" : "missed", cores, healed_s >= 0 && healed_s <= 5 ? "met" : "missed",
      healed_s, false_deaths.empty() ? "met" : "missed");
  std::printf(
      "RESULT nodes=%d heartbeats_per_s=%.0f heartbeat_p50_ms=%.2f heartbeat_p99_ms=%.2f "
      "gcs_cpu_cores=%.3f gcs_rss_mib=%.0f actors=%zu actors_alive_s=%.2f storm_nodes=%zu "
      "storm_declared_s=%.2f storm_actors=%zu storm_healed_s=%.2f false_deaths=%zu\n",
      nodes, per_s, p50, p99, cores, rss1 / 1048576.0, host.AliveCount(), actors_alive_s, silenced,
      declared_s, affected.size(), healed_s, false_deaths.size());
  return 0;
}

}  // namespace
}  // namespace phalanx

int main(int argc, char** argv) { return phalanx::Main(argc, argv); }
