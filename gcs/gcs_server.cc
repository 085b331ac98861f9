#include "gcs/gcs_server.h"

#include <algorithm>
#include <atomic>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "base/describe.h"
#include "base/files.h"
#include "base/ids.h"
#include "base/logging.h"
#include "base/proto/gcs.grpc.pb.h"
#include "base/rpc.h"
#include "base/sha256.h"
#include "base/system.h"
#include "base/tls.h"
#include "gcs/actor_manager.h"
#include "gcs/availability.h"
#include "gcs/dashboard.h"
#include "gcs/driver_leases.h"
#include "gcs/gcs_service.h"
#include "gcs/job_history.h"
#include "gcs/job_manager.h"
#include "gcs/kv_manager.h"
#include "gcs/node_client_pool.h"
#include "gcs/node_manager.h"
#include "gcs/placement_group_manager.h"
#include "gcs/publisher.h"
#include "gcs/record_table.h"
#include "placement/resource_scheduler.h"

namespace phalanx::gcs {
namespace {

// Checks that the store belongs to this cluster and token, or claims it for them.
absl::Status CheckClusterMeta(Store* store, const std::string& cluster_id,
                              const std::string& token) {
  std::string token_hash = Sha256Hex(token);
  auto stored = store->Get("meta", "token_sha256");
  if (!stored.ok()) return stored.status();
  if (stored->has_value()) {
    if (**stored != token_hash) {
      return absl::PermissionDeniedError(absl::StrCat(
          "cluster ", cluster_id,
          " in Redis was created with another token; start the GCS with the token file of "
          "the session that created it"));
    }
    return absl::OkStatus();
  }
  if (auto s = store->PutSync("meta", "cluster_id", cluster_id); !s.ok()) return s;
  if (auto s = store->PutSync("meta", "created_ms", std::to_string(NowMs())); !s.ok()) return s;
  return store->PutSync("meta", "token_sha256", token_hash);
}

void SetJobBody(rpc::PubMessage* m, const rpc::JobInfo& j) { *m->mutable_job() = j; }

// A node is knocked on (GcsNodeManager::Options::knock_after) once it has been silent for
// this fraction of node_timeout: past one or two missed heartbeats at the default periods
// (500 ms heartbeats, a 3 s timeout: 750 ms), so that a killed node manager is declared dead
// in under a second while a node that is only late costs one handshake.
constexpr int kKnocksPerNodeTimeout = 4;

// The GCS server's threads kept waiting for calls (rpc::ServerOptions::max_idle_threads).
// gcs_bench, 16 clients writing: 6.7–6.8k writes/s with gRPC's default of 2, 7.9–8.2k with 16.
constexpr int kGcsIdleServerThreads = 16;

JobManagerOptions JobOptions(const GcsServerOptions& options) {
  JobManagerOptions out;
  out.session_dir = options.session_dir;
  out.token = options.token;
  out.tls_dir = options.tls_dir;
  out.runner_path = ExecutableDir() + "/phalanx-job-runner";
  out.max_working_dir_bytes = options.max_working_dir_bytes;
  out.kinds = options.job_kinds;
  return out;
}

class GcsServerImpl final : public GcsServer {
 public:
  explicit GcsServerImpl(std::unique_ptr<Store> store, const GcsServerOptions& options)
      : options_(options),
        store_(NewTimedStore(std::move(store), &store_metrics_)),
        publisher_(RandomHex(8)),
        nodes_(store_.get(), &publisher_, NodeOptions(options)),
        kv_(store_.get(), &publisher_),
        node_clients_(options.token, options.node_call_timeout),
        actors_(store_.get(), &publisher_, &nodes_, &node_clients_, &scheduler_),
        jobs_(store_.get(), &publisher_, "jobs", rpc::JOB, &SetJobBody),
        placement_groups_(store_.get(), &publisher_, &nodes_, &node_clients_, &scheduler_,
                          &actors_),
        job_manager_(&jobs_, &actors_, &kv_, JobOptions(options)),
        drivers_(
            DriverLeaseOptions{options.node_timeout, options.driver_lease_timeout},
            [this](const std::string& owner, const std::string& job, const std::string& why) {
              int killed = actors_.KillOwnedBy(owner, why);
              int removed = placement_groups_.RemoveJob(job);
              spdlog::info(
                  "driver {} of job {} is gone: killed {} actor(s), removed {} "
                  "placement group(s)",
                  owner, job, killed, removed);
            },
            store_.get()) {
    // One path for node events: the scheduler first, then the managers.
    nodes_.AddRegisteredListener([this](const rpc::NodeInfo& node) {
      scheduler_.AddNode(node.node_id(), rpc::FromProto(node.total()),
                         {node.labels().begin(), node.labels().end()});
      actors_.OnNodeRegistered(node);  // sets the node's availability from the scheduler's
      placement_groups_.ScheduleNow();
      UpdateScrapeTargets();
    });
    // Nodes declared dead together are handled together: every one leaves the scheduler
    // before any of their actors or bundles is placed again (not on a node about to be
    // handled next), and each manager makes one pass for the whole batch.
    nodes_.AddDeadListener([this](const std::vector<rpc::NodeInfo>& dead) {
      std::vector<std::pair<std::string, int>> lost;
      for (const auto& node : dead) {
        auto bundles = scheduler_.RemoveNode(node.node_id());
        lost.insert(lost.end(), bundles.begin(), bundles.end());
      }
      actors_.OnNodesDead(dead);
      placement_groups_.OnBundlesLost(lost);
      UpdateScrapeTargets();
    });
    actors_.SetPlacementGroupCheck(
        [this](const std::string& pg_id, int index, const Resources& request) {
          return placement_groups_.CheckActorBundle(pg_id, index, request);
        });
    actors_.SetResourcesFreedCallback([this] { placement_groups_.ScheduleNow(); });
    actors_.SetDeathCallback([this](const rpc::ActorInfo& a) { job_manager_.OnActorDead(a); });
  }

  ~GcsServerImpl() override { Shutdown(); }

  absl::Status Init() {
    const std::string& cluster_id = options_.redis.cluster_id;
    if (auto s = CheckClusterMeta(store_.get(), cluster_id, options_.token); !s.ok()) return s;
    if (auto s = nodes_.Load(); !s.ok()) return s;
    for (const auto& node : nodes_.GetAll(/*alive_only=*/true)) {
      scheduler_.AddNode(node.node_id(), rpc::FromProto(node.total()),
                         {node.labels().begin(), node.labels().end()});
    }
    if (auto s = kv_.Load(); !s.ok()) return s;
    // Bundles before actors: actors of a group take their resources from its bundles.
    if (auto s = placement_groups_.Load(); !s.ok()) return s;
    if (auto s = actors_.Load(); !s.ok()) return s;
    if (auto s = jobs_.Load(); !s.ok()) return s;
    if (auto s = drivers_.Load(); !s.ok()) return s;
    // Availability is not stored (it is derived): computed again from what was loaded.
    for (const auto& node : nodes_.GetAll(/*alive_only=*/true)) {
      SyncAvailable(scheduler_, &nodes_, node.node_id());
    }
    std::optional<rpc::KeyAndCert> ca;
    if (!options_.tls_dir.empty()) {
      auto cert = ReadFile(absl::StrCat(options_.tls_dir, "/", rpc::kCaCertFile));
      auto key = ReadFile(absl::StrCat(options_.tls_dir, "/", rpc::kCaKeyFile));
      if (!cert.ok() || !key.ok()) {
        return absl::FailedPreconditionError(
            absl::StrCat("--tls-dir ", options_.tls_dir, " has no CA (", rpc::kCaCertFile, " and ",
                         rpc::kCaKeyFile, "); `phalanx start --head` makes them"));
      }
      ca = rpc::KeyAndCert{*key, *cert};
    }
    // The HTTP port before the gRPC one: once nodes can register, the scrape targets they
    // change have a port to name.
    std::string ca_fingerprint = ca ? rpc::CertFingerprint(ca->cert_pem).value_or("") : "";
    if (auto s = StartDashboard(cluster_id, ca_fingerprint); !s.ok()) return s;
    service_ =
        NewGcsService(cluster_id, &publisher_, &nodes_, &kv_, &actors_, &jobs_, &placement_groups_,
                      &job_manager_, &history_, options_.node_timeout, std::move(ca), &drivers_);
    if (dashboard_) service_->SetDashboard(dashboard_->port(), dashboard_->https());
    rpc::ServerOptions server_options{options_.token, rpc::kMaxControlMessageBytes};
    server_options.latency = &rpc_latency_;
    // Writes block their handler until Redis has them: keep threads for the concurrent ones.
    server_options.max_idle_threads = kGcsIdleServerThreads;
    auto started = rpc::StartServer(absl::StrCat(options_.listen_host, ":", options_.port),
                                    {service_.get()}, server_options);
    if (!started.ok()) {
      return absl::UnavailableError(absl::StrCat("GCS cannot listen on port ", options_.port, ": ",
                                                 started.status().message()));
    }
    server_ = std::move(started->server);
    port_ = started->port;
    job_manager_.Start(port_);
    health_thread_ = std::thread([this] { HealthLoop(); });
    knock_thread_ = std::thread([this] { KnockLoop(); });
    spdlog::info("GCS for cluster {} listening on port {} (incarnation {})", cluster_id, port_,
                 publisher_.incarnation());
    return absl::OkStatus();
  }

  int port() const override { return port_; }
  int dashboard_port() const override { return dashboard_ ? dashboard_->port() : 0; }
  const std::string& cluster_id() const override { return options_.redis.cluster_id; }
  const std::string& incarnation() const override { return publisher_.incarnation(); }

  void Wait() override { stopped_.WaitForNotification(); }

  int64_t UnpersistedWrites() override { return store_->FailedWrites() + store_->QueuedWrites(); }

  void Shutdown() override {
    if (shutdown_started_.exchange(true)) {
      stopped_.WaitForNotification();
      return;
    }
    if (service_) service_->Stop();
    // Queued writes get until the store's shutdown_timeout; then they fail, so that handlers
    // waiting on them return and the server can stop (a Redis that is gone cannot hold it).
    store_->Close(options_.redis.shutdown_timeout);
    publisher_.Shutdown();
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    if (dashboard_) dashboard_->Stop();
    if (health_thread_.joinable()) health_thread_.join();
    if (knock_thread_.joinable()) knock_thread_.join();
    // No callback of a call to a node may run once the managers it reports to are gone.
    node_clients_.Shutdown();
    job_manager_.Shutdown();
    stopped_.Notify();
  }

 private:
  absl::Status StartDashboard(const std::string& cluster_id, const std::string& ca_fingerprint) {
    if (options_.dashboard_port < 0) return absl::OkStatus();
    GcsObservables o;
    o.cluster_id = cluster_id;
    o.version = kGcsVersion;
    o.start_time_ms = NowMs();
    o.ca_fingerprint = ca_fingerprint;
    o.nodes = &nodes_;
    o.actors = &actors_;
    o.placement_groups = &placement_groups_;
    o.jobs = &jobs_;
    o.job_manager = &job_manager_;
    o.publisher = &publisher_;
    o.store = store_.get();
    o.rpc_latency = &rpc_latency_;
    o.store_metrics = &store_metrics_;
    o.history = &history_;
    DashboardOptions d;
    d.host = options_.listen_host;
    d.port = options_.dashboard_port;
    d.port_fallback = options_.dashboard_port_fallback;
    d.token = options_.token;
    if (!ca_fingerprint.empty()) d.tls_dir = options_.tls_dir;
    d.scrape_targets_path = options_.scrape_targets_path;
    if (d.scrape_targets_path.empty() && !options_.session_dir.empty()) {
      d.scrape_targets_path = absl::StrCat(options_.session_dir, "/metrics/targets.json");
    }
    auto started = HeadDashboard::Start(o, d);
    if (!started.ok()) return started.status();
    dashboard_ = std::move(*started);
    return absl::OkStatus();
  }

  void UpdateScrapeTargets() {
    if (dashboard_) dashboard_->UpdateScrapeTargets();
  }

  static GcsNodeManager::Options NodeOptions(const GcsServerOptions& options) {
    GcsNodeManager::Options o;
    o.node_timeout = options.node_timeout;
    o.restart_grace = options.restart_grace;
    o.partition_timeout = options.partition_timeout;
    o.knock_after = options.node_timeout / kKnocksPerNodeTimeout;
    return o;
  }

  // Apart from HealthLoop: a knock on a cut-off host waits for its handshake (knock_timeout),
  // and the heartbeat deadlines must not wait with it.
  void KnockLoop() {
    while (!shutdown_started_) {
      absl::SleepFor(options_.health_check_period);
      nodes_.KnockOnSilentNodes();
      drivers_.Check();
    }
  }

  void HealthLoop() {
    while (!shutdown_started_) {
      absl::Time slept = absl::Now();
      absl::SleepFor(options_.health_check_period);
      absl::Duration late = absl::Now() - slept - options_.health_check_period;
      if (late > options_.node_timeout / 4) {
        nodes_.Stalled(late);
        actors_.LeasesStalled(late);
        drivers_.Stalled(late);
      }
      nodes_.CheckHeartbeats();
      actors_.ExpireLeases();
    }
  }

  const GcsServerOptions options_;
  // Before the store: it counts the store's writes.
  StoreMetrics store_metrics_;
  metrics::HistogramFamily rpc_latency_{metrics::LatencyBuckets()};
  JobHistory history_;
  std::unique_ptr<Store> store_;
  GcsPublisher publisher_;
  GcsNodeManager nodes_;
  GcsKvManager kv_;
  NodeClientPool node_clients_;
  placement::ResourceScheduler scheduler_;
  GcsActorManager actors_;
  RecordTable<rpc::JobInfo> jobs_;
  GcsPlacementGroupManager placement_groups_;
  GcsJobManager job_manager_;
  DriverLeases drivers_;
  std::unique_ptr<GcsServiceHandlers> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<HeadDashboard> dashboard_;
  int port_ = 0;
  std::thread health_thread_;
  std::thread knock_thread_;
  std::atomic<bool> shutdown_started_{false};
  absl::Notification stopped_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GcsServer>> GcsServer::Start(const GcsServerOptions& options) {
  if (options.token.empty()) return absl::InvalidArgumentError("GCS: the cluster token is empty");
  if (options.redis.cluster_id.empty()) {
    return absl::InvalidArgumentError("GCS: the cluster id is empty");
  }
  std::unique_ptr<Store> store;
  if (options.in_memory_store) {
    store = NewInMemoryStore();
  } else {
    auto redis = ConnectRedisStore(options.redis);
    if (!redis.ok()) return redis.status();
    store = std::move(*redis);
  }
  auto server = std::make_unique<GcsServerImpl>(std::move(store), options);
  if (auto s = server->Init(); !s.ok()) return s;
  return std::unique_ptr<GcsServer>(std::move(server));
}

}  // namespace phalanx::gcs
