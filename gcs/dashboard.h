// The head's HTTP port (served by the GCS): /metrics for Prometheus, /api/... as JSON, and
// the dashboard page at /. What it reads is the GCS's own state (its managers, in memory) and
// its counters; nothing here changes the cluster.
//
// Internal to gcs/: built by gcs_server.cc.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/http_server.h"
#include "base/metrics.h"
#include "gcs/actor_manager.h"
#include "gcs/job_history.h"
#include "gcs/job_manager.h"
#include "gcs/node_manager.h"
#include "gcs/placement_group_manager.h"
#include "gcs/publisher.h"
#include "gcs/record_table.h"
#include "gcs/store.h"

namespace phalanx::gcs {

// Where the pages read from. Every pointer outlives the HTTP server.
struct GcsObservables {
  std::string cluster_id;
  std::string version;
  int64_t start_time_ms = 0;
  std::string ca_fingerprint;  // empty: a --no-tls cluster
  GcsNodeManager* nodes = nullptr;
  GcsActorManager* actors = nullptr;
  GcsPlacementGroupManager* placement_groups = nullptr;
  RecordTable<rpc::JobInfo>* jobs = nullptr;
  GcsJobManager* job_manager = nullptr;
  GcsPublisher* publisher = nullptr;
  Store* store = nullptr;
  const metrics::HistogramFamily* rpc_latency = nullptr;
  const StoreMetrics* store_metrics = nullptr;
  const JobHistory* history = nullptr;
};

struct DashboardOptions {
  std::string host = "0.0.0.0";
  int port = 8265;             // 0: any free one
  bool port_fallback = false;  // `port` taken: any free one (a warning) instead of failing
  std::string token;
  std::string tls_dir;  // the machine's certificate and key (rpc/tls.h); empty: plain HTTP
  // Where the Prometheus file_sd targets are kept current (empty: nowhere).
  std::string scrape_targets_path;
};

// The head's HTTP port, serving DashboardRoutes. Thread-safe.
class HeadDashboard {
 public:
  static absl::StatusOr<std::unique_ptr<HeadDashboard>> Start(const GcsObservables& o,
                                                              const DashboardOptions& options);
  int port() const { return server_->port(); }
  bool https() const { return server_->https(); }
  void Stop() { server_->Stop(); }
  // Rewrites the scrape targets (a node joined or died).
  void UpdateScrapeTargets();

 private:
  HeadDashboard(GcsObservables o, DashboardOptions options)
      : o_(std::move(o)), options_(std::move(options)) {}

  const GcsObservables o_;
  const DashboardOptions options_;
  std::unique_ptr<rpc::HttpServer> server_;
  absl::Mutex targets_mu_;  // one writer of the targets file at a time
};

// How many nodes are alive and dead, and the live ones' resources, total and used.
struct NodeTotals {
  int alive = 0;
  int dead = 0;
  std::map<std::string, double> total;
  std::map<std::string, double> used;
};
NodeTotals SumNodes(const std::vector<rpc::NodeInfo>& nodes);

// The /metrics page: the cluster (nodes, resources, actors, placement groups, jobs), the GCS
// (RPC latency by method, Redis writes, subscribers) and every elastic job (size, progress,
// step times, restarts, and the phases of each recovery as histograms).
std::string ClusterMetricsPage(const GcsObservables& o);

// The routes of the head's HTTP port, /metrics included.
std::vector<rpc::HttpRoute> DashboardRoutes(const GcsObservables& o);

// Writes the Prometheus file_sd targets of the cluster (the head's HTTP port and every live
// node's metrics port) to `path`, atomically. `head_address`: host:port of the head's.
absl::Status WriteScrapeTargets(const std::string& path, const std::string& head_address,
                                const std::vector<rpc::NodeInfo>& nodes);

}  // namespace phalanx::gcs
