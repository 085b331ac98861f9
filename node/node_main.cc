// phalanx-node: the node manager daemon. Started by `phalanx start`.
#include <cstdlib>
#include <string>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/synchronization/mutex.h"
#include "base/files.h"
#include "base/logging.h"
#include "base/mutex_check.h"
#include "base/signals.h"
#include "base/system.h"
#include "base/tls.h"
#include "node/node_manager.h"

// How often a fenced node tries to register again while the GCS is unreachable.
constexpr absl::Duration kRejoinRetry = absl::Seconds(1);

int main(int argc, char** argv) {
  phalanx::ConfigureMutexDeadlockCheck();
  CLI::App app{"phalanx-node: the Phalanx node manager"};
  phalanx::node::NodeManagerOptions options;
  std::string token_file, log_file, resources_json = "{}";
  double num_cpus = phalanx::NumCpus(), num_gpus = phalanx::NumGpus();
  double memory = static_cast<double>(phalanx::TotalMemoryBytes());
  int64_t heartbeat_ms = 500;
  app.add_option("--gcs-address", options.gcs_address, "GCS HOST:PORT")->required();
  app.add_option("--token-file", token_file, "file holding the cluster token (or $PHALANX_TOKEN)");
  app.add_option("--node-id", options.node_id, "node id (default: a new random one)");
  app.add_option("--node-ip", options.node_ip, "address other nodes reach this one at");
  app.add_option("--port", options.port, "gRPC port (0: any free one)");
  app.add_option("--num-cpus", num_cpus, "CPUs this node offers");
  app.add_option("--num-gpus", num_gpus, "GPUs this node offers");
  app.add_option("--memory", memory, "memory this node offers, in bytes");
  app.add_option("--resources", resources_json, "custom resources as JSON");
  app.add_flag("--head", options.is_head, "this is the head node");
  app.add_option("--session-dir", options.session_dir, "session directory");
  app.add_option("--heartbeat-ms", heartbeat_ms, "heartbeat period in milliseconds");
  app.add_option("--log-file", log_file, "log here instead of stderr");
  app.add_option("--metrics-port", options.metrics_port,
                 "this node's /metrics port (Prometheus; 0: any free one, -1: none)")
      ->check(CLI::Range(-1, 65535));
  app.add_option("--tls-dir", options.tls_dir,
                 "this machine's TLS dir (ca.pem, node.pem, node.key; `phalanx start` makes "
                 "it): serve and call over TLS. Without it: plaintext");
  app.add_option("--object-store-memory", options.object_store_bytes,
                 "what the object store may hold in /dev/shm, bytes (0: 30% of the machine's "
                 "memory); past it, values go to disk")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--object-store-dir", options.object_store_dir,
                 "keep the object store's files in this directory instead of /dev/shm (Ray's "
                 "--plasma-directory), e.g. a tmpfs mounted with huge=within_size")
      ->check(CLI::ExistingDirectory);
  app.add_option("--memory-usage-threshold", options.memory_usage_threshold,
                 "kill the newest actor when the node's memory use passes this fraction");
  app.add_option("--memory-enforcement", options.memory_enforcement,
                 "how actor memory limits are enforced: auto, cgroup or rss");
  app.add_option("--fork-server", options.fork_server,
                 "fork C++ workers from a fork server per program (true) or start a process "
                 "of the program for each (false)");
  int64_t debug_reserve_delay_ms = 0;
  app.add_option("--debug-reserve-delay-ms", debug_reserve_delay_ms,
                 "test hook: delay answering each bundle RESERVE");
  int64_t debug_record_delay_ms = 0;
  app.add_option("--debug-record-delay-ms", debug_record_delay_ms,
                 "test hook: record each started worker this much later");
  CLI11_PARSE(app, argc, argv);
  options.debug_reserve_delay = absl::Milliseconds(debug_reserve_delay_ms);
  options.debug_record_delay = absl::Milliseconds(debug_record_delay_ms);

  phalanx::BlockTerminationSignals();
  phalanx::InitLogging("node", log_file);

  if (!token_file.empty()) {
    auto token = phalanx::ReadFile(token_file);
    if (!token.ok()) {
      spdlog::error("--token-file: {}", token.status().message());
      return 2;
    }
    options.token = std::string(absl::StripAsciiWhitespace(*token));
  } else if (const char* env = std::getenv("PHALANX_TOKEN")) {
    options.token = env;
  }
  if (auto s = phalanx::rpc::UseTls(options.tls_dir); !s.ok()) {
    spdlog::error("--tls-dir: {}", s.message());
    return 2;
  }
  auto resources = phalanx::Resources::ParseJson(resources_json);
  if (!resources.ok()) {
    spdlog::error("{}", resources.status().message());
    return 2;
  }
  options.resources = *resources;
  options.resources.Set("CPU", num_cpus);
  options.resources.Set("GPU", num_gpus);
  options.resources.Set("memory", memory);
  options.heartbeat_period = absl::Milliseconds(heartbeat_ms);

  // A fenced node (declared dead by the GCS, or cut off from it for the node timeout) has
  // lost its workers; the daemon lives on and registers again as a new node, so that the
  // cluster (and an elastic job) can use this machine again once it is reachable.
  absl::Mutex mu;
  std::unique_ptr<phalanx::node::NodeManager> node;
  bool terminating = false;
  int exit_code = 0;
  std::thread runner([&] {
    std::string fenced_id;
    while (true) {
      auto started = phalanx::node::NodeManager::Start(options);
      absl::MutexLock lock(&mu);
      if (terminating) {
        if (started.ok()) (*started)->Shutdown("stopped");
        return;
      }
      if (!started.ok()) {
        if (fenced_id.empty()) {
          spdlog::error("node manager failed to start: {}", started.status().message());
          exit_code = 1;
          phalanx::RequestTermination();
          return;
        }
        // Not reachable yet (the host is still cut off): try again.
        spdlog::warn("registering again failed ({}); retrying in {}", started.status().message(),
                     absl::FormatDuration(kRejoinRetry));
        mu.AwaitWithTimeout(absl::Condition(&terminating), kRejoinRetry);
        if (terminating) return;
        continue;
      }
      node = std::move(*started);
      if (!fenced_id.empty()) {
        spdlog::warn("registered again as node {} (node {} was fenced: declared dead or cut off)",
                     node->node_id(), fenced_id);
      }
      phalanx::node::NodeManager* current = node.get();
      mu.Unlock();
      bool fenced = current->Wait();
      mu.Lock();
      if (!fenced || terminating) return;
      fenced_id = current->node_id();
      current->Shutdown("fenced");
      node.reset();
      options.node_id.clear();  // a new node: the old id stays dead
    }
  });
  int sig = phalanx::WaitForTerminationSignal();
  {
    absl::MutexLock lock(&mu);
    terminating = true;
    if (exit_code == 0) spdlog::info("signal {}: shutting down", sig);
  }
  // Shutdown outside the lock: it waits for the node's threads (Wait() returns first).
  phalanx::node::NodeManager* current = nullptr;
  {
    absl::MutexLock lock(&mu);
    current = node.get();
  }
  if (current != nullptr) current->Shutdown("stopped");
  runner.join();
  return exit_code;
}
