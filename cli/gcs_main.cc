// phalanx-gcs: the control-plane daemon. Started by `phalanx start --head`; restart it with
// the same arguments (same Redis, cluster id and token file) and it carries on.
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "base/files.h"
#include "base/logging.h"
#include "base/mutex_check.h"
#include "base/rpc.h"
#include "base/session.h"
#include "base/signals.h"
#include "base/tls.h"
#include "elastic/job_kind.h"
#include "gcs/gcs_server.h"

int main(int argc, char** argv) {
  phalanx::ConfigureMutexDeadlockCheck();
  CLI::App app{"phalanx-gcs: the Phalanx control plane"};
  phalanx::gcs::GcsServerOptions options;
  std::string redis_address = "127.0.0.1:6379";
  std::string redis_password_file, token_file, log_file;
  int64_t node_timeout_ms = 3000, restart_grace_ms = 10000;
  app.add_option("--port", options.port, "gRPC port (0: any free one)");
  app.add_option("--listen-host", options.listen_host, "address to listen on");
  app.add_option("--redis-address", redis_address, "Redis HOST:PORT");
  app.add_option("--redis-password-file", redis_password_file, "file holding the Redis password");
  std::string redis_sentinel, sentinel_password_file;
  app.add_option("--redis-sentinel", redis_sentinel,
                 "find the Redis primary through these sentinels, HOST:PORT[,HOST:PORT...] "
                 "(instead of --redis-address), and follow its failovers");
  app.add_option("--redis-master-name", options.redis.master_name,
                 "with --redis-sentinel: the master's name the sentinels monitor");
  app.add_option("--redis-sentinel-password-file", sentinel_password_file,
                 "with --redis-sentinel: file holding the sentinels' password (if they need one)");
  double failover_timeout_s = absl::ToDoubleSeconds(options.redis.failover_timeout);
  app.add_option("--redis-failover-timeout-s", failover_timeout_s,
                 "with --redis-sentinel: how long writes wait while there is no primary before "
                 "they fail")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--cluster-id", options.redis.cluster_id, "cluster id (Redis key namespace)")
      ->required();
  app.add_option("--token-file", token_file, "file holding the cluster token")->required();
  app.add_option("--node-timeout-ms", node_timeout_ms,
                 "declare a node dead after this long without heartbeats");
  int64_t driver_lease_timeout_ms = 60000;
  app.add_option("--driver-lease-timeout-ms", driver_lease_timeout_ms,
                 "release a silent driver's actors after this long even if its process may live")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  int64_t partition_timeout_ms = 60000;
  app.add_option("--partition-timeout-ms", partition_timeout_ms,
                 "when most nodes fall silent at once, declare them dead only after this much "
                 "longer than the node timeout (this GCS may be the one cut off)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  int64_t node_call_timeout_ms = absl::ToInt64Milliseconds(options.node_call_timeout);
  app.add_option("--node-call-timeout-ms", node_call_timeout_ms,
                 "bound of each call to a node manager, at least 3000 (an actor's start that "
                 "runs out is sent again; the node starts it once)")
      ->capture_default_str();
  app.add_option("--restart-grace-ms", restart_grace_ms,
                 "after a restart, how long live nodes have to heartbeat again");
  app.add_option("--log-file", log_file, "log here instead of stderr");
  double shutdown_timeout_s = 5;
  app.add_option("--shutdown-timeout-s", shutdown_timeout_s,
                 "after SIGTERM, exit within this long even if Redis is gone (writes still "
                 "queued then are not persisted, and counted in the log)")
      ->check(CLI::PositiveNumber);
  app.add_option("--session-dir", options.session_dir,
                 "the head's session dir: jobs keep their working dirs and logs there");
  app.add_option("--tls-dir", options.tls_dir,
                 "the cluster's TLS dir (ca.pem, ca.key, node.pem, node.key; `phalanx start "
                 "--head` makes it): serve TLS and sign joining machines' certificates. "
                 "Without it: plaintext");
  app.add_option("--dashboard-port", options.dashboard_port,
                 "the head's HTTP(S) port: /metrics (Prometheus), /api (JSON), the dashboard "
                 "at / (-1: none, 0: any free one)")
      ->check(CLI::Range(-1, 65535));
  app.add_flag("--dashboard-port-fallback", options.dashboard_port_fallback,
               "if --dashboard-port is taken, serve on any free port instead of failing");
  app.add_option("--scrape-targets", options.scrape_targets_path,
                 "keep the cluster's Prometheus file_sd targets in this file (default: "
                 "<session-dir>/metrics/targets.json)");
  double max_working_dir_mb = 100;
  if (const char* env = std::getenv("PHALANX_MAX_WORKING_DIR_MB"); env && *env) {
    max_working_dir_mb = std::atof(env);
  }
  app.add_option("--max-working-dir-mb", max_working_dir_mb,
                 "the largest job working dir accepted (or $PHALANX_MAX_WORKING_DIR_MB)");
  CLI11_PARSE(app, argc, argv);

  phalanx::BlockTerminationSignals();
  phalanx::InitLogging("gcs", log_file);

  auto host_port = phalanx::rpc::SplitHostPort(redis_address, "--redis-address");
  if (!host_port.ok()) {
    spdlog::error("{}", host_port.status().message());
    return 2;
  }
  options.redis.host = host_port->first;
  options.redis.port = host_port->second;
  if (!redis_sentinel.empty()) {
    auto sentinels = phalanx::gcs::ParseSentinels(redis_sentinel, "--redis-sentinel");
    if (!sentinels.ok()) {
      spdlog::error("{}", sentinels.status().message());
      return 2;
    }
    options.redis.sentinels = *sentinels;
    if (options.redis.master_name.empty()) {
      spdlog::error(
          "--redis-sentinel needs --redis-master-name: the name the sentinels monitor (NAME in "
          "their `sentinel monitor NAME HOST PORT QUORUM`)");
      return 2;
    }
    options.redis.failover_timeout = absl::Seconds(failover_timeout_s);
  }
  // A secret from the file `flag` names (trimmed); false, logged, if it cannot be read.
  auto read_secret = [](const char* flag, const std::string& path, std::string* out) {
    auto text = phalanx::ReadFile(path);
    if (!text.ok()) {
      spdlog::error("{}: {}", flag, text.status().message());
      return false;
    }
    *out = std::string(absl::StripAsciiWhitespace(*text));
    return true;
  };
  if (!sentinel_password_file.empty() &&
      !read_secret("--redis-sentinel-password-file", sentinel_password_file,
                   &options.redis.sentinel_password)) {
    return 2;
  }
  if (!redis_password_file.empty() &&
      !read_secret("--redis-password-file", redis_password_file, &options.redis.password)) {
    return 2;
  }
  if (!read_secret("--token-file", token_file, &options.token)) return 2;
  if (auto s = phalanx::rpc::UseTls(options.tls_dir); !s.ok()) {
    spdlog::error("--tls-dir: {}", s.message());
    return 2;
  }
  options.node_timeout = absl::Milliseconds(node_timeout_ms);
  options.driver_lease_timeout = absl::Milliseconds(driver_lease_timeout_ms);
  options.partition_timeout = absl::Milliseconds(partition_timeout_ms);
  if (node_call_timeout_ms < 3000) {
    // A node refuses a bundle reservation with under 2 s of its call left (its margin for the
    // cancel that a GCS which gave up sends): a shorter bound would refuse every one.
    spdlog::error(
        "--node-call-timeout-ms {}: too short; give 3000 or more (a node refuses a bundle "
        "reservation with under 2 s of its call left)",
        node_call_timeout_ms);
    return 2;
  }
  options.node_call_timeout = absl::Milliseconds(node_call_timeout_ms);
  options.max_working_dir_bytes = static_cast<int64_t>(max_working_dir_mb * (1 << 20));
  options.restart_grace = absl::Milliseconds(restart_grace_ms);
  options.shutdown_timeout = absl::Seconds(shutdown_timeout_s);
  // Queued writes get most of the bound; the rest is for stopping the server.
  options.redis.shutdown_timeout = options.shutdown_timeout * 0.8;

  // The job kinds this cluster runs besides drivers: elastic training.
  options.job_kinds.push_back(std::make_shared<phalanx::elastic::ElasticJobKind>());

  auto server = phalanx::gcs::GcsServer::Start(options);
  if (!server.ok()) {
    spdlog::error("GCS failed to start: {}", server.status().message());
    return 1;
  }
  if (!options.session_dir.empty()) {
    // Where `phalanx stop` finds it, also when it was started again by hand from gcs.args.
    auto written = phalanx::WritePidFile(options.session_dir, "gcs", getpid(), "phalanx-gcs");
    if (!written.ok()) spdlog::warn("cannot record the GCS's pid: {}", written.message());
  }
  int sig = phalanx::WaitForTerminationSignal();
  spdlog::info("signal {}: shutting down (at most {})", sig,
               absl::FormatDuration(options.shutdown_timeout));
  // The bound holds even when a Redis call blocks past it (a stopped Redis answers nothing):
  // a watchdog ends the process, saying what was not persisted.
  phalanx::gcs::GcsServer* gcs = server->get();
  std::thread([gcs, bound = options.shutdown_timeout] {
    absl::SleepFor(bound);
    spdlog::error("shutdown still not done after {}: exiting; {} writes were not persisted",
                  absl::FormatDuration(bound), gcs->UnpersistedWrites());
    spdlog::shutdown();
    std::_Exit(1);
  }).detach();
  (*server)->Shutdown();
  if (int64_t lost = (*server)->UnpersistedWrites(); lost > 0) {
    spdlog::warn("shut down; {} writes were not persisted", lost);
  } else {
    spdlog::info("shut down; every write was persisted");
  }
  server->reset();
  return 0;
}
