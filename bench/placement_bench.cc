// placement_bench: placement groups created and removed per second, and actors scheduled
// (assigned a node by the GCS) per second, on a local cluster of 3 node managers.
//
//   build/bin/placement_bench [seconds, default 3]
//
// Last line: RESULT pg_per_s=... ray_published=780 ratio=...
// (Ray's figure: 780 placement groups created and removed per second, from its published
// scalability numbers; no Ray runs here, so that peer is the published number.)
#include <atomic>
#include <cstdio>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "bench/bench_util.h"
#include "client/gcs_client.h"
#include "tests/testing/test_util.h"

namespace phalanx {
namespace {

// Create → wait until placed → remove, in a loop per client; returns groups per second.
double PgThroughput(const testing::GcsProcess& gcs, int clients, double seconds) {
  std::atomic<bool> stop{false};
  std::atomic<int64_t> done{0}, failed{0};
  std::vector<std::thread> threads;
  absl::Time start = absl::Now();
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&] {
      auto client = *gcs::GcsClient::Connect({gcs.address(), gcs.token()});
      rpc::PlacementGroupInfo spec;
      spec.set_strategy("SPREAD");
      for (int b = 0; b < 2; ++b) {
        (*spec.add_bundles()->mutable_resources()->mutable_amounts())["CPU"] = 0.01;
      }
      int64_t n = 0;
      while (!stop) {
        auto pg = client->CreatePlacementGroup(spec, /*wait_ready=*/absl::Seconds(10));
        if (!pg.ok()) {
          ++failed;
          continue;
        }
        if (pg->state() != rpc::PG_CREATED) ++failed;
        if (client->RemovePlacementGroup(pg->placement_group_id()).ok()) ++n;
      }
      done += n;
    });
  }
  absl::SleepFor(absl::Seconds(seconds));
  stop = true;
  for (auto& t : threads) t.join();
  if (failed > 0) std::printf("# %ld placement groups failed\n", failed.load());
  return static_cast<double>(done) / absl::ToDoubleSeconds(absl::Now() - start);
}

// Creates `n` actors and measures how fast the GCS assigns each a node (state CREATING),
// watched on the ACTOR channel. The actors' program is /bin/true: the benchmark is about
// scheduling decisions, not process start-up.
double ActorsScheduledPerSecond(const testing::GcsProcess& gcs, int n) {
  auto client = *gcs::GcsClient::Connect({gcs.address(), gcs.token()});
  absl::Mutex mu;
  std::set<std::string> scheduled;
  absl::Time last;
  auto sub = client->Subscribe({rpc::ACTOR}, [&](const rpc::PubMessage& m) {
    if (!m.has_actor() || m.actor().state() != rpc::ACTOR_CREATING) return;
    absl::MutexLock lock(&mu);
    if (scheduled.insert(m.actor().actor_id()).second) last = absl::Now();
  });
  absl::SleepFor(absl::Milliseconds(200));
  absl::Time start = absl::Now();
  for (int i = 0; i < n; ++i) {
    rpc::ActorInfo spec;
    spec.set_class_name("Bench");
    spec.set_code_path("/bin/true");
    (*spec.mutable_resources()->mutable_amounts())["CPU"] = 0.01;
    client->CreateActor(spec).IgnoreError();
  }
  testing::WaitFor(
      [&] {
        absl::MutexLock lock(&mu);
        return static_cast<int>(scheduled.size()) >= n;
      },
      absl::Seconds(60));
  absl::MutexLock lock(&mu);
  return static_cast<double>(scheduled.size()) / absl::ToDoubleSeconds(last - start);
}

int Main(int argc, char** argv) {
  double seconds = argc > 1 ? std::atof(argv[1]) : 3.0;
  testing::RedisServer redis;
  testing::GcsProcess gcs(redis);
  std::vector<testing::ChildProcess> nodes;
  for (int i = 0; i < 3; ++i) {
    testing::NodeOptions options;
    options.num_cpus = 16;
    nodes.push_back(testing::StartNode(gcs, absl::StrCat("node-", i), options));
  }
  std::printf("# placement_bench: %.0f s per measurement, 3 node managers, 2 cores\n", seconds);
  double best = 0;
  for (int clients : {1, 8}) {
    double rate = PgThroughput(gcs, clients, seconds);
    std::printf("placement groups created+removed/s, %d client(s): %.0f\n", clients, rate);
    best = std::max(best, rate);
  }
  double actors = ActorsScheduledPerSecond(gcs, 500);
  std::printf("actors scheduled/s (GCS assigns a node): %.0f\n", actors);
  std::printf("RESULT pg_per_s=%.0f ray_published=780 ratio=%.3f\n", best, best / 780.0);
  return 0;
}

}  // namespace
}  // namespace phalanx

int main(int argc, char** argv) { return phalanx::Main(argc, argv); }
