// The head's /metrics page (gcs/dashboard.h says what it holds).
#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/describe.h"
#include "base/resources.h"
#include "gcs/dashboard.h"

namespace phalanx::gcs {
namespace {

using metrics::Labels;
using metrics::MetricsWriter;

// "ACTOR_ALIVE" → "alive": label values read as words.
std::string StateLabel(const std::string& enum_name) {
  return absl::AsciiStrToLower(enum_name.substr(enum_name.find('_') + 1));
}

bool Finished(rpc::JobState state) {
  return state == rpc::JOB_SUCCEEDED || state == rpc::JOB_FAILED || state == rpc::JOB_STOPPED;
}

void ClusterPart(const GcsObservables& o, MetricsWriter& w) {
  w.Gauge("phalanx_info", "The cluster this head serves (always 1).");
  w.Sample({{"cluster_id", o.cluster_id}, {"version", o.version}}, 1);
  w.Gauge("phalanx_gcs_start_time_seconds", "When this GCS started (unix seconds).");
  w.Sample({}, static_cast<double>(o.start_time_ms) / 1000);

  NodeTotals nodes = SumNodes(o.nodes->GetAll(/*alive_only=*/false));
  w.Gauge("phalanx_nodes", "Nodes by state.");
  w.Sample({{"state", "alive"}}, nodes.alive);
  w.Sample({{"state", "dead"}}, nodes.dead);
  w.Gauge("phalanx_resources_total", "Resources of the live nodes, by resource.");
  for (const auto& [k, v] : nodes.total) w.Sample({{"resource", k}}, v);
  w.Gauge("phalanx_resources_used", "Resources taken by actors and reservations, by resource.");
  for (const auto& [k, v] : nodes.used) w.Sample({{"resource", k}}, v);

  w.Gauge("phalanx_actors", "Actors by state and class.");
  for (const auto& [key, n] : o.actors->CountByStateAndClass()) {
    w.Sample({{"state", StateLabel(rpc::ActorState_Name(key.first))}, {"class", key.second}}, n);
  }

  std::map<std::string, int> groups;
  for (const auto& pg : o.placement_groups->List()) {
    ++groups[StateLabel(rpc::PlacementGroupState_Name(pg.state()))];
  }
  w.Gauge("phalanx_placement_groups", "Placement groups by state.");
  for (const auto& [state, n] : groups) w.Sample({{"state", state}}, n);

  std::map<std::pair<std::string, std::string>, int> jobs;
  for (const auto& j : o.jobs->List()) {
    ++jobs[{j.kind().empty() ? "driver" : j.kind(), StateLabel(rpc::JobState_Name(j.state()))}];
  }
  w.Gauge("phalanx_jobs", "Jobs by kind and state.");
  for (const auto& [key, n] : jobs) w.Sample({{"kind", key.first}, {"state", key.second}}, n);
}

void GcsPart(const GcsObservables& o, MetricsWriter& w) {
  w.HistogramFamily("phalanx_gcs_rpc_latency_seconds",
                    "GCS unary RPCs, from arrival to status, by method.");
  for (const auto& [method, data] : o.rpc_latency->Snapshot()) {
    w.Histogram({{"method", method}}, data);
  }
  w.HistogramFamily("phalanx_gcs_redis_write_latency_seconds",
                    "GCS writes to Redis, from issued to durable (or failed).");
  w.Histogram({}, o.store_metrics->write_latency.Snapshot());
  w.Counter("phalanx_gcs_redis_write_errors_total", "GCS writes Redis refused or never got.");
  w.Sample({}, static_cast<double>(o.store_metrics->write_errors.load()));
  w.Gauge("phalanx_gcs_redis_writes_queued", "GCS writes issued and not yet sent to Redis.");
  w.Sample({}, static_cast<double>(o.store->QueuedWrites()));
  GcsPublisher::Stats pub = o.publisher->GetStats();
  w.Gauge("phalanx_gcs_subscribers", "Streams subscribed to the GCS's changes.");
  w.Sample({}, static_cast<double>(pub.subscribers));
  w.Counter("phalanx_gcs_subscribers_dropped_total",
            "Subscribers closed for falling too far behind (they reconnect and resync).");
  w.Sample({}, static_cast<double>(pub.dropped));
  w.Counter("phalanx_gcs_messages_published_total", "Changes published to subscribers.");
  w.Sample({}, static_cast<double>(pub.published));
}

// The three phases of a recovery, in seconds; nullopt-like -1 when not reached.
struct Phases {
  double detect = -1, resume = -1, full = -1;
};

Phases PhasesOf(const rpc::Recovery& r) {
  Phases p;
  if (r.detected_ms() > 0) p.detect = static_cast<double>(r.detected_ms() - r.fault_ms()) / 1000;
  if (r.resumed_ms() > 0) p.resume = static_cast<double>(r.resumed_ms() - r.detected_ms()) / 1000;
  if (r.full_strength_ms() > 0) {
    p.full = static_cast<double>(r.full_strength_ms() - r.fault_ms()) / 1000;
  }
  return p;
}

void ElasticPart(const GcsObservables& o, MetricsWriter& w) {
  std::vector<rpc::JobInfo> jobs =
      o.jobs->List([](const rpc::JobInfo& j) { return j.kind() == "elastic"; });
  std::sort(jobs.begin(), jobs.end(),
            [](const auto& a, const auto& b) { return a.job_id() < b.job_id(); });
  // Not "job": Prometheus gives that label the scrape job's name (and renames ours).
  auto id = [](const rpc::JobInfo& j) {
    return Labels{{"job_id", j.job_id()}, {"job_name", j.name()}};
  };
  // Gauges of the jobs that run; counters and histograms of every job (they only grow).
  std::vector<const rpc::JobInfo*> running;
  for (const auto& j : jobs) {
    if (!Finished(j.state())) running.push_back(&j);
  }
  auto gauge = [&](const char* name, const char* help, auto value) {
    w.Gauge(name, help);
    for (const rpc::JobInfo* j : running)
      w.Sample(id(*j), static_cast<double>(value(j->elastic())));
  };
  gauge("phalanx_elastic_world_size", "Ranks training now.",
        [](const rpc::ElasticStatus& e) { return e.world_size(); });
  gauge("phalanx_elastic_target_replicas", "The world size the controller works toward.",
        [](const rpc::ElasticStatus& e) { return e.target_replicas(); });
  gauge("phalanx_elastic_epoch", "The collective group's epoch.",
        [](const rpc::ElasticStatus& e) { return e.epoch(); });
  gauge("phalanx_elastic_step", "The last agreed step.",
        [](const rpc::ElasticStatus& e) { return e.step(); });
  gauge("phalanx_elastic_steps_per_second", "Agreed steps per second since the job trained.",
        [](const rpc::ElasticStatus& e) { return e.steps_per_second(); });
  gauge("phalanx_elastic_step_skew",
        "The slowest rank's compute time over the median's, of the last step (1: even).",
        [](const rpc::ElasticStatus& e) { return e.step_skew(); });
  gauge("phalanx_elastic_network_check_skew",
        "The last network check's slowest rank over the median: what the straggler policy "
        "compares with straggler.factor (0: none ran).",
        [](const rpc::ElasticStatus& e) { return e.network_check_skew(); });
  auto per_rank = [&](const char* name, const char* help, auto ms) {
    w.Gauge(name, help);
    for (const rpc::JobInfo* j : running) {
      for (const auto& t : j->elastic().step_times()) {
        Labels l = id(*j);
        l.emplace_back("rank", std::to_string(t.rank()));
        l.emplace_back("node", t.node_id());
        w.Sample(l, ms(t) / 1000);
      }
    }
  };
  per_rank("phalanx_elastic_rank_step_seconds", "Each rank's last step, wall time.",
           [](const rpc::RankStepTime& t) { return t.step_ms(); });
  per_rank("phalanx_elastic_rank_compute_seconds",
           "Each rank's last step, the part outside collectives.",
           [](const rpc::RankStepTime& t) { return t.compute_ms(); });
  w.Counter("phalanx_elastic_restarts_total", "Ranks respawned, by the fault that caused it.");
  for (const auto& j : jobs) {
    for (const auto& [cause, n] : j.elastic().restarts_by_cause()) {
      Labels l = id(j);
      l.emplace_back("cause", cause);
      w.Sample(l, n);
    }
  }
  w.Counter("phalanx_elastic_fault_seconds_total",
            "Time lost to faults: the sum of fault → the survivors' next step.");
  for (const auto& j : jobs) w.Sample(id(j), j.elastic().fault_seconds());

  // The recovery timeline, as histograms per job and fault kind.
  struct ByKind {
    metrics::HistogramData detect{metrics::RecoveryBuckets()};
    metrics::HistogramData resume{metrics::RecoveryBuckets()};
    metrics::HistogramData full{metrics::RecoveryBuckets()};
  };
  std::vector<std::pair<Labels, ByKind>> series;
  for (const auto& j : jobs) {
    std::map<std::string, ByKind> kinds;
    for (const auto& r : j.elastic().recoveries()) {
      Phases p = PhasesOf(r);
      ByKind& k = kinds[r.kind()];
      if (p.detect >= 0) k.detect.Observe(p.detect);
      if (p.resume >= 0) k.resume.Observe(p.resume);
      if (p.full >= 0) k.full.Observe(p.full);
    }
    for (auto& [kind, k] : kinds) {
      Labels l = id(j);
      l.emplace_back("kind", kind);
      series.emplace_back(std::move(l), std::move(k));
    }
  }
  w.HistogramFamily("phalanx_elastic_recovery_detect_seconds",
                    "Recovery: from the fault to the controller knowing, by fault kind.");
  for (const auto& [l, k] : series) w.Histogram(l, k.detect);
  w.HistogramFamily("phalanx_elastic_recovery_resume_seconds",
                    "Recovery: from detection to the survivors' next agreed step, by fault kind.");
  for (const auto& [l, k] : series) w.Histogram(l, k.resume);
  w.HistogramFamily(
      "phalanx_elastic_recovery_full_strength_seconds",
      "Recovery: from the fault to the first step with the world size before it, by fault kind.");
  for (const auto& [l, k] : series) w.Histogram(l, k.full);
}

}  // namespace

NodeTotals SumNodes(const std::vector<rpc::NodeInfo>& nodes) {
  NodeTotals t;
  std::map<std::string, double> available;
  for (const auto& n : nodes) {
    if (n.state() != rpc::NODE_ALIVE) {
      ++t.dead;
      continue;
    }
    ++t.alive;
    for (const auto& [k, v] : n.total().amounts()) t.total[k] += v;
    for (const auto& [k, v] : n.available().amounts()) available[k] += v;
  }
  for (const auto& [k, v] : t.total) t.used[k] = v - available[k];
  return t;
}

std::string ClusterMetricsPage(const GcsObservables& o) {
  MetricsWriter w;
  ClusterPart(o, w);
  GcsPart(o, w);
  ElasticPart(o, w);
  return w.text();
}

}  // namespace phalanx::gcs
