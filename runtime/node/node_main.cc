// phalanx-node: the node manager daemon. Started by `phalanx start`.
#include <cstdlib>
#include <string>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "runtime/common/files.h"
#include "runtime/common/logging.h"
#include "runtime/common/signals.h"
#include "runtime/common/system.h"
#include "runtime/node/node_manager.h"

int main(int argc, char** argv) {
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
  app.add_option("--memory-usage-threshold", options.memory_usage_threshold,
                 "kill the newest actor when the node's memory use passes this fraction");
  app.add_option("--memory-enforcement", options.memory_enforcement,
                 "how actor memory limits are enforced: auto, cgroup or rss");
  int64_t debug_prepare_delay_ms = 0;
  app.add_option("--debug-prepare-delay-ms", debug_prepare_delay_ms,
                 "test hook: delay answering PrepareBundle");
  CLI11_PARSE(app, argc, argv);
  options.debug_prepare_delay = absl::Milliseconds(debug_prepare_delay_ms);

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

  auto node = phalanx::node::NodeManager::Start(options);
  if (!node.ok()) {
    spdlog::error("node manager failed to start: {}", node.status().message());
    return 1;
  }
  bool declared_dead = false;
  std::thread watcher([&] {
    declared_dead = (*node)->Wait();
    phalanx::RequestTermination();
  });
  int sig = phalanx::WaitForTerminationSignal();
  spdlog::info("signal {}: shutting down", sig);
  (*node)->Shutdown("stopped");
  watcher.join();
  return declared_dead ? 1 : 0;
}
