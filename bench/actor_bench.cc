// actor_bench: actor call latency and throughput, creations per second and idle worker RSS,
// with a raw gRPC unary echo between two processes on the same machine as the floor.
//
//   build/bin/actor_bench [seconds per throughput measurement, default 3]
//
// Also remote functions (tasks) from one client, sync and async, on pooled task workers (at most
// 4: each task asks for 16 of the node's 64 CPUs), beside the same calls made to one actor.
//
// Last line: RESULT sync_calls_per_s=... async_calls_per_s=... grpc_echo_per_s=... ratio=...
// task_sync_per_s=... task_async_per_s=... task_ratio_sync=... task_ratio_async=...
// (ratio = sync actor calls/s ÷ raw echo calls/s, 1 caller → 1 actor, the echo the faster of
// gRPC's sync and callback servers; task_ratio_* = tasks/s
// ÷ the same calls to one actor).
#include <atomic>
#include <cstdio>
#include <thread>

#include "absl/strings/str_cat.h"
#include "actors/api.h"
#include "base/process.h"
#include "bench/bench_util.h"
#include "client/gcs_client.h"
#include "tests/testing/test_util.h"
#include "worker/worker_host.h"

namespace {

class Echo {
 public:
  explicit Echo(int) {}
  std::string Ping(std::string s) { return s; }
  int Pid() { return ::getpid(); }
};

}  // namespace

PHALANX_ACTOR(Echo, int);
PHALANX_METHODS(Echo, Ping, Pid);

namespace phalanx {
namespace {

using Handle = ActorHandle<Echo>;

std::string PingFn(std::string x) { return x; }
PHALANX_FUNCTION(PingFn);

// Task calls/s from one client: sync (one at a time) or async (a window in flight).
double TaskThroughput(bool async, double seconds) {
  std::string payload(32, 'x');
  int64_t n = 0;
  absl::Time start = absl::Now();
  while (absl::Now() - start < absl::Seconds(seconds)) {
    if (!async) {
      if (Get(phalanx::Task(&PingFn).SetResources({{"CPU", 16}}).Remote(payload)).ok()) ++n;
      continue;
    }
    constexpr int kWindow = 2000;
    std::vector<ObjectRef<std::string>> refs;
    refs.reserve(kWindow);
    for (int i = 0; i < kWindow; ++i) {
      refs.push_back(phalanx::Task(&PingFn).SetResources({{"CPU", 16}}).Remote(payload));
    }
    if (Get(refs).ok()) n += kWindow;
  }
  return static_cast<double>(n) / absl::ToDoubleSeconds(absl::Now() - start);
}

std::vector<double> SyncLatenciesUs(const Handle& actor, int n) {
  std::vector<double> out;
  std::string payload(32, 'x');
  for (int i = 0; i < n; ++i) {
    absl::Time t0 = absl::Now();
    auto r = Get(actor.Task(&Echo::Ping).Remote(payload));
    if (r.ok()) out.push_back(absl::ToDoubleMicroseconds(absl::Now() - t0));
  }
  return out;
}

// Sync calls/s from one thread per actor, for `seconds`.
double SyncThroughput(const std::vector<Handle>& actors, double seconds) {
  std::atomic<bool> stop{false};
  std::atomic<int64_t> done{0};
  std::vector<std::thread> threads;
  absl::Time start = absl::Now();
  for (const auto& a : actors) {
    threads.emplace_back([&, a] {
      std::string payload(32, 'x');
      int64_t n = 0;
      while (!stop) {
        if (Get(a.Task(&Echo::Ping).Remote(payload)).ok()) ++n;
      }
      done += n;
    });
  }
  absl::SleepFor(absl::Seconds(seconds));
  stop = true;
  for (auto& t : threads) t.join();
  return static_cast<double>(done) / absl::ToDoubleSeconds(absl::Now() - start);
}

// Async calls/s: each thread keeps a window of calls in flight on its actor.
double AsyncThroughput(const std::vector<Handle>& actors, double seconds) {
  std::atomic<bool> stop{false};
  std::atomic<int64_t> done{0};
  std::vector<std::thread> threads;
  absl::Time start = absl::Now();
  for (const auto& a : actors) {
    threads.emplace_back([&, a] {
      std::string payload(32, 'x');
      int64_t n = 0;
      constexpr int kWindow = 2000;
      while (!stop) {
        std::vector<ObjectRef<std::string>> refs;
        refs.reserve(kWindow);
        for (int i = 0; i < kWindow; ++i) refs.push_back(a.Task(&Echo::Ping).Remote(payload));
        auto r = Get(refs);
        if (r.ok()) n += kWindow;
      }
      done += n;
    });
  }
  absl::SleepFor(absl::Seconds(seconds));
  stop = true;
  for (auto& t : threads) t.join();
  return static_cast<double>(done) / absl::ToDoubleSeconds(absl::Now() - start);
}

int Main(int argc, char** argv) {
  double seconds = argc > 1 ? std::atof(argv[1]) : 3.0;
  // The floor first, before this process starts gRPC threads of its own.
  bench::EchoFloor echo;
  bench::OneNodeCluster cluster(64);
  const testing::GcsProcess& gcs = cluster.gcs;
  InitOptions init;
  init.address = gcs.address();
  init.token = gcs.token();
  if (auto s = Init(init); !s.ok()) {
    std::fprintf(stderr, "init: %s\n", s.ToString().c_str());
    return 1;
  }
  std::vector<Handle> actors;
  for (int i = 0; i < 4; ++i) {
    auto a = Actor<Echo>().Remote(0);
    if (!a.ok()) return 1;
    actors.push_back(*a);
    Get(a->Task(&Echo::Ping).Remote(std::string("warm"))).IgnoreError();
  }
  std::printf(
      "# actor_bench: %.0f s per throughput measurement, 2 cores shared by all parts, cluster "
      "transport %s ($PHALANX_BENCH_TLS)\n",
      seconds, bench::TransportName().c_str());

  // The echo floor at its best: of gRPC's sync and callback servers, the one with the lower
  // median latency, and the higher rate.
  std::vector<double> echo_lat = bench::EchoLatenciesUs(echo.sync.address(), 5000);
  std::vector<double> callback_lat = bench::EchoLatenciesUs(echo.callback.address(), 5000);
  const char* echo_api = "sync";
  if (bench::Percentile(callback_lat, 0.5) < bench::Percentile(echo_lat, 0.5)) {
    echo_lat = callback_lat;
    echo_api = "callback";
  }
  std::vector<double> actor_lat = SyncLatenciesUs(actors[0], 5000);
  double echo_p50 = bench::Percentile(echo_lat, 0.5), echo_p99 = bench::Percentile(echo_lat, 0.99);
  double p50 = bench::Percentile(actor_lat, 0.5), p99 = bench::Percentile(actor_lat, 0.99);
  std::printf("latency  raw gRPC echo   p50 %7.1f us  p99 %7.1f us  (%s API)\n", echo_p50, echo_p99,
              echo_api);
  std::printf("latency  actor sync call p50 %7.1f us  p99 %7.1f us  (p50 = %.2fx echo)\n", p50, p99,
              p50 / echo_p50);

  bench::EchoRates echo_1 = bench::MeasureEchoFloor(echo, 1, seconds);
  bench::EchoRates echo_4 = bench::MeasureEchoFloor(echo, 4, seconds);
  double sync_1 = SyncThroughput({actors[0]}, seconds);
  double sync_4 = SyncThroughput(actors, seconds);
  double async_1 = AsyncThroughput({actors[0]}, seconds);
  double async_4 = AsyncThroughput(actors, seconds);
  std::printf("calls/s  raw gRPC echo   1 caller %9.0f   4 callers %9.0f  (sync API)\n",
              echo_1.sync, echo_4.sync);
  std::printf("calls/s  raw gRPC echo   1 caller %9.0f   4 callers %9.0f  (callback API)\n",
              echo_1.callback, echo_4.callback);
  std::printf("calls/s  actor sync      1:1      %9.0f   4:4       %9.0f\n", sync_1, sync_4);
  std::printf("calls/s  actor async     1:1      %9.0f   4:4       %9.0f\n", async_1, async_4);
  TaskThroughput(false, 0.5);  // lease the workers
  double task_sync = TaskThroughput(false, seconds);
  double task_async = TaskThroughput(true, seconds);
  std::printf(
      "calls/s  tasks, 1 client   sync   %9.0f   async     %9.0f   (%.2fx, %.2fx the "
      "same calls to one actor)\n",
      task_sync, task_async, task_sync / sync_1, task_async / async_1);

  // Creations: start K actors and wait until each answered once.
  constexpr int kCreate = 40;
  absl::Time t0 = absl::Now();
  std::vector<Handle> created;
  for (int i = 0; i < kCreate; ++i) created.push_back(*Actor<Echo>().Remote(0));
  std::vector<ObjectRef<int>> pids;
  for (const auto& a : created) pids.push_back(a.Task(&Echo::Pid).Remote());
  auto pid_values = Get(pids, absl::Seconds(120));
  double create_s = absl::ToDoubleSeconds(absl::Now() - t0);
  std::printf("creation %d actors until each answered: %.2f s = %.0f creations/s\n", kCreate,
              create_s, kCreate / create_s);

  // One at a time, as an elastic job replaces a rank: the node has prestarted workers of this
  // program waiting, so a creation skips process start-up.
  std::vector<double> one_ms, alive_ms;
  auto gcs_client = *gcs::GcsClient::Connect({gcs.address(), gcs.token()});
  for (int i = 0; i < 20; ++i) {
    absl::SleepFor(absl::Milliseconds(100));  // let the node top up its prestarted workers
    absl::Time t1 = absl::Now();
    auto a = Actor<Echo>().Remote(0);
    if (!a.ok() || !Get(a->Task(&Echo::Pid).Remote()).ok()) continue;
    one_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t1));
    auto info = gcs_client->GetActor(a->id().Hex());
    if (info.ok()) {
      alive_ms.push_back(static_cast<double>(info->alive_time_ms() - info->create_time_ms()));
    }
    created.push_back(*a);
  }
  std::printf(
      "creation one at a time (prestarted worker): until it answered p50 %.1f ms "
      "p99 %.1f ms; GCS create→ALIVE p50 %.0f ms\n",
      bench::Percentile(one_ms, 0.5), bench::Percentile(one_ms, 0.99),
      bench::Percentile(alive_ms, 0.5));

  // Idle worker RSS (the Echo actors above are idle now).
  absl::SleepFor(absl::Milliseconds(500));
  std::vector<double> rss, uss;
  if (pid_values.ok()) {
    for (int pid : *pid_values) {
      rss.push_back(static_cast<double>(ProcessRssBytes(pid)) / (1 << 20));
      uss.push_back(static_cast<double>(bench::PrivateBytes(pid)) / (1 << 20));
    }
  }
  std::printf(
      "idle C++ worker: RSS median %.1f MiB (max %.1f), of which private (USS) %.1f MiB; "
      "the rest is shared pages of the binary and libraries\n",
      bench::Percentile(rss, 0.5), bench::Percentile(rss, 1.0), bench::Percentile(uss, 0.5));
  for (const auto& a : created) Kill(a).IgnoreError();
  Shutdown();
  std::printf(
      "RESULT sync_calls_per_s=%.0f async_calls_per_s=%.0f grpc_echo_per_s=%.0f ratio=%.3f "
      "task_sync_per_s=%.0f task_async_per_s=%.0f task_ratio_sync=%.2f task_ratio_async=%.2f\n",
      sync_1, async_1, echo_1.best(), sync_1 / echo_1.best(), task_sync, task_async,
      task_sync / sync_1, task_async / async_1);
  return 0;
}

}  // namespace
}  // namespace phalanx

int main(int argc, char** argv) {
  if (phalanx::worker::InWorkerMode()) return phalanx::worker::RunWorker();
  return phalanx::Main(argc, argv);
}
