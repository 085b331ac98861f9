// NodeMetrics: what a node manager's /metrics says: its workers by state, each actor's
// memory, the kills for memory, how long workers take to start, and its object store.
// Thread-safe.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/metrics.h"
#include "node/worker_pool.h"

namespace phalanx::node {

class NodeMetrics {
 public:
  // An actor's worker was asked for (StartActor).
  void Starting(const std::string& actor_id, int attempt, absl::Time when);
  // It is ready to serve (or failed to start): the start latency is observed.
  void Ready(const std::string& actor_id, int attempt, absl::Time when);
  // A worker ended with `cause`.
  void Ended(const WorkerRecord& worker, const rpc::DeathCause& cause);

  // The Prometheus page, given the pool's workers now.
  std::string Page(const std::string& node_id, const std::vector<WorkerRecord>& workers,
                   const rpc::ObjectStoreUsage& store) const;

 private:
  metrics::Histogram start_latency_{metrics::LatencyBuckets()};
  mutable absl::Mutex mu_;
  std::map<std::pair<std::string, int>, absl::Time> starting_ ABSL_GUARDED_BY(mu_);
  int64_t oom_kills_ ABSL_GUARDED_BY(mu_) = 0;      // an actor above its own memory limit
  int64_t monitor_kills_ ABSL_GUARDED_BY(mu_) = 0;  // the node-wide memory monitor's
  std::map<std::string, int64_t> exits_ ABSL_GUARDED_BY(mu_);  // by death cause
};

}  // namespace phalanx::node
