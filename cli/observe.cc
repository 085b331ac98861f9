// `--watch` for status commands, and `phalanx metrics-config`.
#include <unistd.h>

#include <iostream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/tls.h"
#include "cli/commands.h"
#include "client/gcs_client.h"

namespace phalanx::cli {

int RunWatched(const WatchOptions& options, const std::function<int()>& show) {
  if (!options.watch) return show();
  // Each frame is drawn into a buffer first, then written in one go over the last one: the
  // terminal never shows half a frame.
  while (true) {
    std::ostringstream frame;
    std::streambuf* out = std::cout.rdbuf(frame.rdbuf());
    std::streambuf* err = std::cerr.rdbuf(frame.rdbuf());
    show();
    std::cout.rdbuf(out);
    std::cerr.rdbuf(err);
    std::cout << "\033[H\033[2J" << frame.str() << "\n(every " << options.interval_s
              << " s; Ctrl-C to stop)" << std::flush;
    absl::SleepFor(absl::Seconds(options.interval_s));
  }
}

int RunMetricsConfig(const ClusterFlags& flags) {
  auto cluster = rpc::FindCluster(flags.address, flags.token);
  if (!cluster.ok()) {
    std::cerr << "phalanx metrics-config: " << cluster.status().message() << "\n";
    return 1;
  }
  auto gcs = gcs::GcsClient::Connect({cluster->address, cluster->token}, absl::Seconds(5));
  auto info = gcs.ok() ? (*gcs)->GetClusterInfo() : gcs.status();
  auto nodes = gcs.ok() ? (*gcs)->GetAllNodes(true) : gcs.status();
  if (!info.ok() || !nodes.ok()) {
    std::cerr << "phalanx metrics-config: "
              << (info.ok() ? nodes.status().message() : info.status().message()) << "\n";
    return 1;
  }
  if (info->dashboard_port() == 0) {
    std::cerr << "phalanx metrics-config: the head serves no /metrics (it was started with "
                 "--dashboard-port -1): start it without that flag\n";
    return 1;
  }
  std::string session;
  for (const auto& n : *nodes) {
    if (n.is_head()) session = n.session_dir();
  }
  if (session.empty()) {
    std::cerr << "phalanx metrics-config: the head node is not alive, and its session dir "
                 "(where the targets are kept) is not known; run this again once it is\n";
    return 1;
  }
  bool tls = info->dashboard_https();
  std::cout << "# Prometheus scrape config for the Phalanx cluster " << info->cluster_id()
            << " (`phalanx metrics-config`).\n"
            << "# The head keeps the targets current in " << session << "/metrics/targets.json:\n"
            << "# its own /metrics (the cluster, the GCS, every elastic job) and every node "
               "manager's.\n"
            << "# Paths are on the head: run Prometheus there, or copy the files.\n"
            << "scrape_configs:\n"
            << "  - job_name: phalanx\n"
            << "    scrape_interval: 5s\n"
            << "    scheme: " << (tls ? "https" : "http") << "\n"
            << "    authorization:\n"
            << "      type: Bearer\n"
            << "      credentials_file: " << session << "/token\n";
  if (tls) {
    std::cout << "    tls_config:\n"
              << "      ca_file: " << session << "/tls/" << rpc::kCaCertFile << "\n"
              << "      server_name: " << rpc::kClusterServerName << "\n";
  }
  std::cout << "    file_sd_configs:\n"
            << "      - files: [" << session << "/metrics/targets.json]\n"
            << "        refresh_interval: 5s\n";
  return 0;
}

}  // namespace phalanx::cli
