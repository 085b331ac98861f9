#include "node/node_metrics.h"

#include "absl/strings/ascii.h"

namespace phalanx::node {

// Bounds the map of workers asked for and never ready (their start failed before it said so).
constexpr size_t kMaxStarting = 10000;

void NodeMetrics::Starting(const std::string& actor_id, int attempt, absl::Time when) {
  absl::MutexLock lock(&mu_);
  if (starting_.size() >= kMaxStarting) starting_.erase(starting_.begin());
  starting_.emplace(std::make_pair(actor_id, attempt), when);
}

void NodeMetrics::Ready(const std::string& actor_id, int attempt, absl::Time when) {
  absl::Time started;
  {
    absl::MutexLock lock(&mu_);
    auto it = starting_.find({actor_id, attempt});
    if (it == starting_.end()) return;
    started = it->second;
    starting_.erase(it);
  }
  start_latency_.Observe(when - started);
}

void NodeMetrics::Ended(const WorkerRecord& worker, const rpc::DeathCause& cause) {
  absl::MutexLock lock(&mu_);
  starting_.erase({worker.actor_id, worker.attempt});
  if (worker.actor_id.empty()) return;  // a prestarted worker that never hosted an actor
  ++exits_[absl::AsciiStrToLower(rpc::DeathCause::Kind_Name(cause.kind()))];
  if (cause.kind() == rpc::DeathCause::OOM_KILLED) {
    ++(worker.node_oom_victim ? monitor_kills_ : oom_kills_);
  }
}

std::string NodeMetrics::Page(const std::string& node_id, const std::vector<WorkerRecord>& workers,
                              const rpc::ObjectStoreUsage& store) const {
  metrics::MetricsWriter w;
  int idle = 0, starting = 0, running = 0;
  for (const auto& r : workers) {
    if (r.idle) {
      ++idle;
    } else if (r.address.empty()) {
      ++starting;
    } else {
      ++running;
    }
  }
  metrics::Labels node = {{"node_id", node_id}};
  auto with = [&](const char* key, const std::string& value) {
    metrics::Labels l = node;
    l.emplace_back(key, value);
    return l;
  };
  w.Gauge("phalanx_node_workers",
          "Worker processes by state: idle (prestarted), starting, running an actor.");
  w.Sample(with("state", "idle"), idle);
  w.Sample(with("state", "starting"), starting);
  w.Sample(with("state", "running"), running);
  auto per_actor = [&](const char* name, const char* help, auto bytes) {
    w.Gauge(name, help);
    for (const auto& r : workers) {
      if (r.idle || r.actor_id.empty()) continue;
      metrics::Labels l = with("actor_id", r.actor_id);
      l.emplace_back("pid", std::to_string(r.pid));
      w.Sample(l, static_cast<double>(bytes(r)));
    }
  };
  per_actor("phalanx_node_actor_rss_bytes", "Each actor's resident memory, as last sampled.",
            [](const WorkerRecord& r) { return r.last_rss; });
  per_actor("phalanx_node_actor_memory_limit_bytes", "Each actor's memory limit (0: none).",
            [](const WorkerRecord& r) { return r.memory_limit; });
  w.Gauge("phalanx_node_object_store_bytes",
          "The object store: its capacity in memory, what it holds there (cached copies of "
          "other nodes' values included), and what went to disk past it.");
  w.Sample(with("kind", "capacity"), static_cast<double>(store.capacity_bytes()));
  w.Sample(with("kind", "used"), static_cast<double>(store.used_bytes()));
  w.Sample(with("kind", "cached"), static_cast<double>(store.cached_bytes()));
  w.Sample(with("kind", "spilled"), static_cast<double>(store.spilled_bytes()));
  w.Counter("phalanx_node_object_store_sent_bytes_total",
            "Bytes of this node's values sent to readers on other nodes.");
  w.Sample(node, static_cast<double>(store.sent_bytes()));
  w.Gauge("phalanx_node_object_store_objects", "Values in the object store (memory and disk).");
  w.Sample(node, static_cast<double>(store.objects()));
  w.HistogramFamily("phalanx_node_worker_start_seconds",
                    "From an actor's start request to its worker serving it.");
  w.Histogram(node, start_latency_.Snapshot());
  absl::MutexLock lock(&mu_);
  w.Counter("phalanx_node_oom_kills_total", "Actors killed for passing their own memory limit.");
  w.Sample(node, static_cast<double>(oom_kills_));
  w.Counter("phalanx_node_memory_monitor_kills_total",
            "Actors killed by the node-wide memory monitor (the node was nearly out of memory).");
  w.Sample(node, static_cast<double>(monitor_kills_));
  w.Counter("phalanx_node_actor_exits_total", "Actors' workers that ended, by death cause.");
  for (const auto& [cause, n] : exits_) w.Sample(with("cause", cause), static_cast<double>(n));
  return w.text();
}

}  // namespace phalanx::node
