// metrics_bench: how long a scrape of the head's /metrics takes on a cluster with 1,000
// actors (the goal: < 50 ms), against a peer scraped side by side in the same run:
// Prometheus's own /metrics (a Go server's page, the endpoint every Prometheus user's alerts
// already depend on).
//
// The cluster's state is real and loaded the way a restarted head loads it: 8 nodes, 1,000
// actors (ALIVE, a few classes), and 4 elastic jobs with 8 ranks' step times and 200
// recoveries each are written to Redis through the GCS's own store, then phalanx-gcs starts
// on it (TLS, as `phalanx start --head` runs it) and serves its HTTPS port. Each scrape is a
// full HTTPS GET with the bearer token over a kept-alive connection, timed by the client.
//
//   build/bin/metrics_bench [scrapes] [actors]
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/files.h"
#include "base/ids.h"
#include "base/proto/common.pb.h"
#include "base/tls.h"
#include "bench/bench_util.h"
#include "client/gcs_client.h"
#include "gcs/store.h"

namespace phalanx {
namespace {

constexpr char kCluster[] = "testcluster";  // testing::GcsProcess's cluster id

absl::Status Populate(const testing::RedisServer& redis, int nodes, int actors, int jobs) {
  gcs::RedisOptions options;
  options.port = redis.port();
  options.password = redis.password();
  options.cluster_id = kCluster;
  auto store = gcs::ConnectRedisStore(options);
  if (!store.ok()) return store.status();
  int64_t now = absl::ToUnixMillis(absl::Now());
  std::vector<std::string> node_ids;
  for (int i = 0; i < nodes; ++i) {
    rpc::NodeInfo n;
    n.set_node_id(NewId());
    n.set_address(absl::StrCat("10.0.0.", i + 1, ":7000"));
    n.set_hostname(absl::StrCat("host-", i));
    n.set_state(rpc::NODE_ALIVE);
    (*n.mutable_total()->mutable_amounts())["CPU"] = 64;
    (*n.mutable_available()->mutable_amounts())["CPU"] = 64 - actors / nodes / 8.0;
    (*n.mutable_total()->mutable_amounts())["memory"] = 256.0 * (1 << 30);
    (*n.mutable_available()->mutable_amounts())["memory"] = 128.0 * (1 << 30);
    n.set_metrics_address(absl::StrCat("10.0.0.", i + 1, ":7001"));
    n.set_start_time_ms(now);
    node_ids.push_back(n.node_id());
    if (auto s = (*store)->PutSync("nodes", n.node_id(), n.SerializeAsString()); !s.ok()) return s;
  }
  const char* classes[] = {"RegressionTrainer", "ElasticController", "ParameterServer",
                           "DataLoader", "Evaluator"};
  for (int i = 0; i < actors; ++i) {
    rpc::ActorInfo a;
    a.set_actor_id(NewId());
    a.set_class_name(classes[i % 5]);
    a.set_language("cpp");
    a.set_state(rpc::ACTOR_ALIVE);
    a.set_node_id(node_ids[i % nodes]);
    a.set_worker_address(absl::StrCat("10.0.0.", i % nodes + 1, ":", 20000 + i));
    a.set_pid(10000 + i);
    a.set_job_id(absl::StrCat("job", i % jobs));
    a.set_create_time_ms(now - i);
    (*a.mutable_resources()->mutable_amounts())["CPU"] = 0.125;
    if (auto s = (*store)->PutSync("actors", a.actor_id(), a.SerializeAsString()); !s.ok()) {
      return s;
    }
  }
  for (int j = 0; j < jobs; ++j) {
    rpc::JobInfo job;
    job.set_job_id(absl::StrCat("job", j));
    job.set_name(absl::StrCat("train-", j));
    job.set_kind("elastic");
    job.set_state(rpc::JOB_RUNNING);
    job.set_submit_time_ms(now);
    auto* el = job.mutable_elastic();
    el->set_world_size(8);
    el->set_target_replicas(8);
    el->set_epoch(40);
    el->set_step(12345);
    el->set_steps_per_second(9.5);
    el->set_step_skew(1.2);
    for (int r = 0; r < 8; ++r) {
      auto* t = el->add_step_times();
      t->set_rank(r);
      t->set_node_id(node_ids[r % nodes]);
      t->set_step_ms(105);
      t->set_compute_ms(80 + r);
    }
    const char* kinds[] = {"signal", "oom", "node_died", "hang", "straggler", "scale"};
    for (int k = 0; k < 200; ++k) {
      auto* rec = el->add_recoveries();
      rec->set_id(k + 1);
      rec->set_kind(kinds[k % 6]);
      rec->set_fault_ms(now - 100000 + k * 100);
      rec->set_detected_ms(rec->fault_ms() + 5 + k % 7);
      rec->set_resumed_ms(rec->detected_ms() + 140);
      rec->set_full_strength_ms(rec->resumed_ms() + 100);
      rec->set_world_before(8);
      rec->set_world_during(7);
      (*el->mutable_restarts_by_cause())[kinds[k % 6]] += 1;
    }
    if (auto s = (*store)->PutSync("jobs", job.job_id(), job.SerializeAsString()); !s.ok()) {
      return s;
    }
  }
  (*store)->Close(absl::Seconds(5));
  return absl::OkStatus();
}

struct Scrapes {
  std::vector<double> ms;
  size_t bytes = 0;
  int failures = 0;
};

template <typename HttpClient>
Scrapes Scrape(HttpClient& client, const httplib::Headers& headers, int n) {
  Scrapes out;
  for (int i = 0; i < n; ++i) {
    absl::Time start = absl::Now();
    auto r = client.Get("/metrics", headers);
    double ms = absl::ToDoubleMilliseconds(absl::Now() - start);
    if (!r || r->status != 200) {
      ++out.failures;
      continue;
    }
    out.bytes = r->body.size();
    out.ms.push_back(ms);
  }
  return out;
}

int Main(int argc, char** argv) {
  int scrapes = argc > 1 ? std::atoi(argv[1]) : 50;
  int actors = argc > 2 ? std::atoi(argv[2]) : 1000;
  const char* prometheus = "/usr/bin/prometheus";
  if (::access(prometheus, X_OK) != 0) {
    std::fprintf(stderr, "the peer %s is missing: install Debian's prometheus\n", prometheus);
    return 2;
  }
  testing::RedisServer redis("benchpass");
  if (auto s = Populate(redis, 8, actors, 4); !s.ok()) {
    std::fprintf(stderr, "populate: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  testing::GcsProcess::Options options;
  options.tls = true;
  options.dashboard_port = 0;
  // The loaded nodes never heartbeat: keep them (and their actors) alive for the run.
  options.restart_grace_ms = 600000;
  testing::GcsProcess gcs(redis, options);
  bench::UseGcsTls(gcs);
  auto client = gcs::GcsClient::Connect({gcs.address(), gcs.token()});
  auto info = client.ok() ? (*client)->GetClusterInfo() : client.status();
  if (!info.ok() || info->dashboard_port() == 0) {
    std::fprintf(stderr, "no dashboard port\n");
    return 1;
  }
  httplib::SSLClient head("127.0.0.1", info->dashboard_port());
  head.set_ca_cert_path(absl::StrCat(gcs.tls_dir(), "/", rpc::kCaCertFile).c_str());
  head.enable_server_certificate_verification(true);
  head.set_keep_alive(true);
  head.set_read_timeout(10);
  httplib::Headers bearer = {{"Authorization", absl::StrCat("Bearer ", gcs.token())}};

  // The peer: a real Prometheus on a free port, scraped the same way (plain HTTP: its
  // default; TLS is Phalanx's extra cost and stays in Phalanx's figure).
  testing::TempDir dir;
  int prom_port = 0;
  {
    int probe = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    ::bind(probe, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    ::getsockname(probe, reinterpret_cast<sockaddr*>(&addr), &len);
    prom_port = ntohs(addr.sin_port);
    ::close(probe);
  }
  WriteFile(dir.path() + "/prometheus.yml", "scrape_configs: []\n").IgnoreError();
  testing::ChildProcess prom({prometheus, "--config.file=" + dir.path() + "/prometheus.yml",
                              "--storage.tsdb.path=" + dir.path() + "/data",
                              absl::StrCat("--web.listen-address=127.0.0.1:", prom_port)},
                             dir.path() + "/prometheus.log");
  httplib::Client peer("127.0.0.1", prom_port);
  peer.set_keep_alive(true);
  peer.set_read_timeout(10);
  testing::WaitFor(
      [&] {
        auto r = peer.Get("/-/ready");
        return r && r->status == 200;
      },
      absl::Seconds(20));

  // Warm both up (connections, TLS session, page caches), then alternate rounds.
  Scrape(head, bearer, 3);
  Scrape(peer, {}, 3);
  Scrapes phalanx, prom_scrapes;
  for (int round = 0; round < 5; ++round) {
    Scrapes a = Scrape(head, bearer, scrapes / 5);
    Scrapes b = Scrape(peer, {}, scrapes / 5);
    phalanx.ms.insert(phalanx.ms.end(), a.ms.begin(), a.ms.end());
    prom_scrapes.ms.insert(prom_scrapes.ms.end(), b.ms.begin(), b.ms.end());
    phalanx.bytes = a.bytes;
    prom_scrapes.bytes = b.bytes;
    phalanx.failures += a.failures;
    prom_scrapes.failures += b.failures;
  }
  if (phalanx.ms.empty() || prom_scrapes.ms.empty()) {
    std::fprintf(stderr, "scrapes failed: phalanx %d, prometheus %d\n", phalanx.failures,
                 prom_scrapes.failures);
    return 1;
  }
  double p50 = bench::Percentile(phalanx.ms, 0.5), p99 = bench::Percentile(phalanx.ms, 0.99);
  double peer50 = bench::Percentile(prom_scrapes.ms, 0.5);
  double peer99 = bench::Percentile(prom_scrapes.ms, 0.99);
  double per_kb = p50 / (static_cast<double>(phalanx.bytes) / 1024);
  double peer_per_kb = peer50 / (static_cast<double>(prom_scrapes.bytes) / 1024);
  std::printf(
      "# metrics_bench: %zu scrapes each, alternating; the head with %d actors, 8 nodes, 4 "
      "elastic jobs (8 ranks, 200 recoveries each), HTTPS + bearer token\n",
      phalanx.ms.size(), actors);
  std::printf("phalanx head /metrics: p50 %.2f ms, p99 %.2f ms, %zu bytes (%.3f ms/KiB)\n", p50,
              p99, phalanx.bytes, per_kb);
  std::printf("prometheus /metrics:   p50 %.2f ms, p99 %.2f ms, %zu bytes (%.3f ms/KiB)\n", peer50,
              peer99, prom_scrapes.bytes, peer_per_kb);
  std::printf("goal: p99 < 50 ms with %d actors: %s\n", actors, p99 < 50 ? "met" : "MISSED");
  std::printf(
      "RESULT phalanx_p50_ms=%.2f phalanx_p99_ms=%.2f phalanx_bytes=%zu prometheus_p50_ms=%.2f "
      "ratio_p50=%.2f ratio_per_kib=%.2f\n",
      p50, p99, phalanx.bytes, peer50, p50 / peer50, per_kb / peer_per_kb);
  return 0;
}

}  // namespace
}  // namespace phalanx

int main(int argc, char** argv) { return phalanx::Main(argc, argv); }
