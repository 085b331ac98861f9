// gcs_bench: actor/node table writes and reads per second through the GCS (persisted in
// Redis, AOF everysec as `phalanx start --head` runs it) at 1 and 16 concurrent clients, with
// redis-benchmark SET/GET against the same Redis in the same run as the peer.
//
//   build/bin/gcs_bench [seconds per measurement, default 3] [--rounds N] [--sentinel]
//
// --sentinel: over a primary, one replica and 3 sentinels (the GCS with --redis-sentinel,
// each batch of writes waiting for the replica's acknowledgement), redis-benchmark against
// the primary.
//
// The RPC floor is a raw gRPC unary echo, over gRPC's sync and its callback API; the faster
// at 16 clients is the floor. Two more echoes bound what the GCS's writes can reach: one
// finishes each reply from a second thread (what a write acknowledged once another thread
// has it costs, with nothing written), and one has that thread write each call to the same
// Redis first (HSET, pipelined in batches: acknowledged after persisting, without the GCS;
// with --sentinel it writes to the primary and does not wait for the replica).
//
// At 16 clients the floor, the two bounding echoes and the GCS's writes are measured in
// turn, --rounds times (default 3), and each ratio is the median of the rounds' ratios.
//
// Last line: RESULT gcs_writes_per_s=<16 clients> grpc_echo_per_s=<the floor, 16 clients>
// callback_fastest=<rounds where the callback echo was the floor>/<rounds>
// echo_ratio=<writes / floor> handoff_ratio=<2nd-thread echo / floor>
// persist_ratio=<persisting echo / floor> redis_set_per_s=<16 clients> ratio=<writes / SET>
#include <atomic>
#include <cstdio>
#include <memory>
#include <regex>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "bench/bench_util.h"
#include "client/gcs_client.h"
#include "tests/testing/test_util.h"

namespace phalanx {
namespace {

using Op = std::function<bool(gcs::GcsClient&, int thread, int64_t i)>;

// Runs `op` from `clients` threads (one GcsClient, hence one connection, each) for
// `seconds`; returns operations per second.
double Measure(const std::string& address, const std::string& token, int clients, double seconds,
               const Op& op) {
  std::vector<std::unique_ptr<gcs::GcsClient>> conns;
  for (int c = 0; c < clients; ++c) conns.push_back(*gcs::GcsClient::Connect({address, token}));
  std::atomic<bool> stop{false};
  std::atomic<int64_t> done{0}, failed{0};
  std::vector<std::thread> threads;
  absl::Time start = absl::Now();
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      int64_t n = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        if (op(*conns[c], c, n)) {
          ++n;
        } else {
          ++failed;
        }
      }
      done += n;
    });
  }
  absl::SleepFor(absl::Seconds(seconds));
  stop = true;
  for (auto& t : threads) t.join();
  double elapsed = absl::ToDoubleSeconds(absl::Now() - start);
  if (failed > 0) std::printf("# warning: %ld failed operations\n", failed.load());
  return static_cast<double>(done) / elapsed;
}

// redis-benchmark's requests per second for `test` ("SET" or "GET").
double RedisBenchmark(int port, const std::string& password, int clients, int requests,
                      const std::string& test) {
  std::string out = bench::Shell(absl::StrCat(
      "redis-benchmark -h 127.0.0.1 -p ", port, " -a ", password, " -c ", clients, " -n ", requests,
      " -P 1 -q -t ", absl::AsciiStrToLower(test), " 2>/dev/null | tr '\\r' '\\n'"));
  std::smatch m;
  std::regex re(test + ": ([0-9.]+) requests per second");
  if (std::regex_search(out, m, re)) return std::stod(m[1]);
  std::fprintf(stderr, "could not parse redis-benchmark output: %s\n", out.c_str());
  return 0;
}

int Main(int argc, char** argv) {
  double seconds = 3.0;
  bool sentinel = false;
  int rounds = 3;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--sentinel") {
      sentinel = true;
    } else if (std::string(argv[i]) == "--rounds") {
      if (i + 1 == argc || std::atoi(argv[i + 1]) < 1) {
        std::fprintf(stderr, "gcs_bench: --rounds takes a number of rounds, 1 or more\n");
        return 2;
      }
      rounds = std::atoi(argv[++i]);
    } else {
      seconds = std::atof(argv[i]);
    }
  }
  // Plain: one Redis. --sentinel: a primary, a replica and 3 sentinels, the GCS finding the
  // primary through them and waiting for the replica's acknowledgement (WAIT 1) per batch.
  std::unique_ptr<testing::RedisServer> plain;
  std::unique_ptr<testing::SentinelRedis> ha;
  std::unique_ptr<testing::GcsProcess> gcs;
  int redis_port = 0;
  std::string redis_password = "benchpw";
  if (sentinel) {
    ha = std::make_unique<testing::SentinelRedis>(redis_password);
    gcs = std::make_unique<testing::GcsProcess>(*ha, testing::GcsProcess::Options());
    redis_port = ha->PrimaryPort();
  } else {
    plain = std::make_unique<testing::RedisServer>(redis_password, /*aof=*/true);
    gcs = std::make_unique<testing::GcsProcess>(*plain);
    redis_port = plain->port();
  }
  std::string address = gcs->address();

  Op actor_write = [](gcs::GcsClient& c, int t, int64_t i) {
    rpc::ActorInfo a;
    a.set_actor_id(absl::StrCat("actor-", t, "-", i % 1000));
    a.set_class_name("Trainer");
    a.set_state(rpc::ACTOR_ALIVE);
    a.set_num_restarts(static_cast<int>(i));
    (*a.mutable_resources()->mutable_amounts())["CPU"] = 1;
    return c.UpdateActor(a).ok();
  };
  Op actor_read = [](gcs::GcsClient& c, int t, int64_t i) {
    return c.GetActor(absl::StrCat("actor-", t, "-", i % 1000)).ok();
  };
  // A node-table write: a heartbeat that reports changed available resources (the GCS
  // writes the node record and publishes a RESOURCES_CHANGED event). Registered first.
  // Node ids are unique per measurement: the nodes of an earlier one stop heartbeating, are
  // declared dead, and a dead node id cannot register again.
  std::atomic<int> measurement{0};
  // Their address is the GCS's own: a port that accepts, as a live node manager's does (the
  // GCS knocks on the port of a node that is silent for a while, and one that refuses is
  // declared dead).
  Op node_write = [&measurement, address](gcs::GcsClient& c, int t, int64_t i) {
    std::string id = absl::StrCat("bench-node-", measurement.load(), "-", t, "-", i % 100);
    if (i < 100) {
      rpc::NodeInfo n;
      n.set_node_id(id);
      n.set_address(address);
      (*n.mutable_total()->mutable_amounts())["CPU"] = 8;
      if (!c.RegisterNode(n, {}).ok()) return false;
    }
    rpc::HeartbeatRequest hb;
    hb.set_node_id(id);
    (*hb.mutable_available()->mutable_amounts())["CPU"] = static_cast<double>(i % 8);
    auto reply = c.Heartbeat(hb);
    return reply.ok() && !reply->declared_dead();
  };

  std::printf("# gcs_bench: %.0f s per measurement; GCS at %s over Redis %d (AOF everysec%s)\n",
              seconds, address.c_str(), redis_port,
              sentinel ? "; Sentinel: a replica, WAIT 1 per batch of writes" : "");
  std::printf("%-8s %-24s %14s\n", "clients", "operation", "ops/s");
  // Fill every key the readers ask for (each client's 1000 actors), so that no read
  // measured is a NotFound.
  auto fill = [&](int clients) {
    auto fill_client = *gcs::GcsClient::Connect({address, gcs->token()});
    for (int t = 0; t < clients; ++t) {
      for (int64_t i = 0; i < 1000; ++i) {
        if (!actor_write(*fill_client, t, i)) return false;
      }
    }
    return true;
  };
  // The floor: a raw gRPC unary echo between two processes, same client threads, over
  // gRPC's sync and callback APIs; the faster is the floor. The bounds of an acknowledgement
  // after persist: the callback echo, each reply finished from a second thread (as a GCS
  // write is, by its store's writer), with nothing written; and with that thread writing
  // each call to the same Redis first.
  bench::EchoFloor floor;
  bench::EchoServer handoff(bench::EchoApi::kHandoff);
  bench::EchoServer persist(bench::EchoApi::kPersist, redis_port, redis_password);
  for (int clients : {1, 16}) {
    if (!fill(clients)) {
      std::fprintf(stderr, "gcs_bench: filling the actor table failed\n");
      return 1;
    }
    // At 16 clients the echoes and the actor writes are measured in the rounds below.
    if (clients == 1) {
      bench::EchoRates rates = bench::MeasureEchoFloor(floor, clients, seconds);
      std::printf("%-8d %-24s %14.0f\n", clients, "raw gRPC echo, sync", rates.sync);
      std::printf("%-8d %-24s %14.0f\n", clients, "raw gRPC echo, callback", rates.callback);
      double aw = Measure(address, gcs->token(), clients, seconds, actor_write);
      std::printf("%-8d %-24s %14.0f\n", clients, "GCS actor write", aw);
    }
    double ar = Measure(address, gcs->token(), clients, seconds, actor_read);
    ++measurement;
    double nw = Measure(address, gcs->token(), clients, seconds, node_write);
    std::printf("%-8d %-24s %14.0f\n", clients, "GCS actor read", ar);
    std::printf("%-8d %-24s %14.0f\n", clients, "GCS node write", nw);
  }
  // The ratios: single measurements here move by ±20% from one to the next, so the floor,
  // the two bounds and the GCS's writes are measured in turn, `rounds` times, and each
  // ratio is the median of its rounds' ratios.
  std::printf(
      "# 16 clients, %d rounds in turn: echo sync, echo callback, 2nd-thread reply, "
      "persisted reply, GCS actor write\n",
      rounds);
  std::vector<double> echo_ratios, handoff_ratios, persist_ratios, writes, floors;
  int callback_best = 0;
  for (int r = 0; r < rounds; ++r) {
    bench::EchoRates rates = bench::MeasureEchoFloor(floor, 16, seconds);
    double h = bench::MeasureEcho(handoff.address(), 16, seconds);
    double p = bench::MeasureEcho(persist.address(), 16, seconds);
    double w = Measure(address, gcs->token(), 16, seconds, actor_write);
    double best = rates.best();
    callback_best += rates.callback > rates.sync;
    std::printf(
        "round %d: %.0f %.0f %.0f %.0f %.0f  echo_ratio %.3f handoff_ratio %.3f "
        "persist_ratio %.3f\n",
        r + 1, rates.sync, rates.callback, h, p, w, w / best, h / best, p / best);
    floors.push_back(best);
    writes.push_back(w);
    echo_ratios.push_back(w / best);
    handoff_ratios.push_back(h / best);
    persist_ratios.push_back(p / best);
  }
  double gcs_writes_16 = bench::Percentile(writes, 0.5);
  double echo_best = bench::Percentile(floors, 0.5);
  double redis_set_16 = 0;
  for (int clients : {1, 16}) {
    int requests = clients == 1 ? 50000 : 200000;
    double set = RedisBenchmark(redis_port, redis_password, clients, requests, "SET");
    double get = RedisBenchmark(redis_port, redis_password, clients, requests, "GET");
    std::printf("%-8d %-24s %14.0f\n", clients, "redis-benchmark SET", set);
    std::printf("%-8d %-24s %14.0f\n", clients, "redis-benchmark GET", get);
    if (clients == 16) redis_set_16 = set;
  }
  std::printf(
      "RESULT gcs_writes_per_s=%.0f grpc_echo_per_s=%.0f callback_fastest=%d/%d echo_ratio=%.3f "
      "handoff_ratio=%.3f persist_ratio=%.3f redis_set_per_s=%.0f ratio=%.3f\n",
      gcs_writes_16, echo_best, callback_best, rounds, bench::Percentile(echo_ratios, 0.5),
      bench::Percentile(handoff_ratios, 0.5), bench::Percentile(persist_ratios, 0.5), redis_set_16,
      redis_set_16 > 0 ? gcs_writes_16 / redis_set_16 : 0);
  return 0;
}

}  // namespace
}  // namespace phalanx

int main(int argc, char** argv) { return phalanx::Main(argc, argv); }
