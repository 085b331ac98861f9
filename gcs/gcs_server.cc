#include "gcs/gcs_server.h"

#include <algorithm>
#include <atomic>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "gcs/actor_manager.h"
#include "gcs/dashboard.h"
#include "gcs/job_history.h"
#include "gcs/job_manager.h"
#include "gcs/kv_manager.h"
#include "gcs/node_client_pool.h"
#include "gcs/node_manager.h"
#include "gcs/placement_group_manager.h"
#include "gcs/publisher.h"
#include "gcs/record_table.h"
#include "placement/resource_scheduler.h"
#include "runtime/common/files.h"
#include "runtime/common/ids.h"
#include "runtime/common/logging.h"
#include "runtime/common/sha256.h"
#include "runtime/common/system.h"
#include "runtime/proto/gcs.grpc.pb.h"
#include "runtime/rpc/describe.h"
#include "runtime/rpc/rpc.h"
#include "runtime/rpc/tls.h"

namespace phalanx::gcs {
namespace {

constexpr char kVersion[] = "0.1.0";

class GcsServiceImpl final : public rpc::GcsService::Service {
 public:
  GcsServiceImpl(std::string cluster_id, GcsPublisher* publisher, GcsNodeManager* nodes,
                 GcsKvManager* kv, GcsActorManager* actors, RecordTable<rpc::JobInfo>* jobs,
                 GcsPlacementGroupManager* placement_groups, GcsJobManager* job_manager,
                 JobHistory* history, absl::Duration node_timeout,
                 std::optional<rpc::KeyAndCert> ca)
      : cluster_id_(std::move(cluster_id)),
        ca_(std::move(ca)),
        start_time_ms_(NowMs()),
        publisher_(publisher),
        nodes_(nodes),
        kv_(kv),
        actors_(actors),
        jobs_(jobs),
        placement_groups_(placement_groups),
        job_manager_(job_manager),
        history_(history),
        node_timeout_(node_timeout) {}

  void Stop() { stopping_ = true; }
  // Set before the server starts.
  void SetDashboard(int port, bool https) {
    dashboard_port_ = port;
    dashboard_https_ = https;
  }

  // Bounds on an IssueCertificate request (an EC or RSA public key is well under 4 KiB).
  static constexpr size_t kMaxPublicKeyBytes = 4096;
  static constexpr int kMaxCertificateNames = 16;

  grpc::Status GetClusterInfo(grpc::ServerContext*, const rpc::GetClusterInfoRequest*,
                              rpc::GetClusterInfoReply* reply) override {
    reply->set_cluster_id(cluster_id_);
    reply->set_incarnation(publisher_->incarnation());
    reply->set_version(kVersion);
    reply->set_start_time_ms(start_time_ms_);
    reply->set_dashboard_port(dashboard_port_);
    reply->set_dashboard_https(dashboard_https_);
    return grpc::Status::OK;
  }

  grpc::Status IssueCertificate(grpc::ServerContext* context,
                                const rpc::IssueCertificateRequest* request,
                                rpc::IssueCertificateReply* reply) override {
    if (!ca_) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          "this cluster runs without TLS (started with --no-tls): join it with "
                          "--no-tls");
    }
    if (request->public_key_pem().size() > kMaxPublicKeyBytes ||
        request->names_size() > kMaxCertificateNames) {
      return grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("IssueCertificate: at most ", kMaxPublicKeyBytes,
                       " bytes of public_key_pem and ", kMaxCertificateNames, " names"));
    }
    std::vector<std::string> names(request->names().begin(), request->names().end());
    // On a thread of its own: OpenSSL's per-thread state (its error queue, its random
    // generator) ends with that thread instead of staying on one of gRPC's, whose TLS reads
    // the same error queue. A machine joins once; the thread costs nothing that matters.
    absl::StatusOr<std::string> cert;
    std::thread([&] {
      cert = rpc::IssueCertificate(*ca_, request->public_key_pem(), names);
    }).join();
    if (!cert.ok()) {
      return rpc::ToGrpc(absl::Status(cert.status().code(),
                                      absl::StrCat("IssueCertificate: ", cert.status().message())));
    }
    spdlog::info("issued a certificate for {} to {}", absl::StrJoin(names, ", "), context->peer());
    reply->set_cert_chain_pem(*cert + ca_->cert_pem);
    return grpc::Status::OK;
  }

  grpc::Status RegisterNode(grpc::ServerContext*, const rpc::RegisterNodeRequest* request,
                            rpc::RegisterNodeReply* reply) override {
    if (auto s = nodes_->Register(request->node()); !s.ok()) return rpc::ToGrpc(s);
    reply->set_incarnation(publisher_->incarnation());
    reply->set_cluster_id(cluster_id_);
    reply->set_node_timeout_ms(absl::ToInt64Milliseconds(node_timeout_));
    return grpc::Status::OK;
  }

  grpc::Status Heartbeat(grpc::ServerContext*, const rpc::HeartbeatRequest* request,
                         rpc::HeartbeatReply* reply) override {
    bool unknown = false, dead = false;
    if (auto s = nodes_->Heartbeat(*request, &unknown, &dead); !s.ok()) return rpc::ToGrpc(s);
    reply->set_incarnation(publisher_->incarnation());
    reply->set_unknown_node(unknown);
    reply->set_declared_dead(dead);
    return grpc::Status::OK;
  }

  grpc::Status UnregisterNode(grpc::ServerContext*, const rpc::UnregisterNodeRequest* request,
                              rpc::UnregisterNodeReply*) override {
    std::string reason = request->reason().empty() ? "stopped" : request->reason();
    return rpc::ToGrpc(nodes_->MarkDead(request->node_id(), reason));
  }

  grpc::Status GetAllNodes(grpc::ServerContext*, const rpc::GetAllNodesRequest* request,
                           rpc::GetAllNodesReply* reply) override {
    for (auto& n : nodes_->GetAll(request->alive_only())) *reply->add_nodes() = std::move(n);
    return grpc::Status::OK;
  }

  grpc::Status KvPut(grpc::ServerContext*, const rpc::KvPutRequest* request,
                     rpc::KvPutReply* reply) override {
    auto added =
        kv_->Put(request->namespace_(), request->key(), request->value(), request->overwrite());
    if (!added.ok()) return rpc::ToGrpc(added.status());
    reply->set_added(*added);
    return grpc::Status::OK;
  }

  grpc::Status KvGet(grpc::ServerContext*, const rpc::KvGetRequest* request,
                     rpc::KvGetReply* reply) override {
    if (auto s = ValidateKvKey(request->namespace_(), request->key()); !s.ok()) {
      return rpc::ToGrpc(s);
    }
    auto value = kv_->Get(request->namespace_(), request->key());
    reply->set_found(value.has_value());
    if (value) reply->set_value(std::move(*value));
    return grpc::Status::OK;
  }

  grpc::Status KvDelete(grpc::ServerContext*, const rpc::KvDeleteRequest* request,
                        rpc::KvDeleteReply* reply) override {
    auto n = kv_->Delete(request->namespace_(), request->key(), request->by_prefix());
    if (!n.ok()) return rpc::ToGrpc(n.status());
    reply->set_deleted(*n);
    return grpc::Status::OK;
  }

  grpc::Status KvList(grpc::ServerContext*, const rpc::KvListRequest* request,
                      rpc::KvListReply* reply) override {
    for (auto& e : kv_->List(request->namespace_(), request->prefix())) {
      *reply->add_entries() = std::move(e);
    }
    return grpc::Status::OK;
  }

  grpc::Status CreateActor(grpc::ServerContext*, const rpc::CreateActorRequest* request,
                           rpc::CreateActorReply* reply) override {
    auto actor = actors_->Create(request->actor());
    if (!actor.ok()) return rpc::ToGrpc(actor.status());
    *reply->mutable_actor() = std::move(*actor);
    return grpc::Status::OK;
  }

  grpc::Status ReportActorState(grpc::ServerContext*, const rpc::ReportActorStateRequest* request,
                                rpc::ReportActorStateReply* reply) override {
    bool stale = false;
    if (auto s = actors_->ReportState(*request, &stale); !s.ok()) return rpc::ToGrpc(s);
    reply->set_stale(stale);
    return grpc::Status::OK;
  }

  grpc::Status KillActor(grpc::ServerContext*, const rpc::KillActorViaGcsRequest* request,
                         rpc::KillActorViaGcsReply*) override {
    return rpc::ToGrpc(actors_->Kill(request->actor_id(), request->no_restart()));
  }
  grpc::Status RenewActorLease(grpc::ServerContext*, const rpc::RenewActorLeaseRequest* request,
                               rpc::RenewActorLeaseReply* reply) override {
    bool stale = false;
    auto s = actors_->RenewLease(request->actor_id(), request->attempt(),
                                 absl::Milliseconds(request->timeout_ms()), &stale);
    if (!s.ok()) return rpc::ToGrpc(s);
    reply->set_stale(stale);
    return grpc::Status::OK;
  }

  grpc::Status UpdateActor(grpc::ServerContext*, const rpc::UpdateActorRequest* request,
                           rpc::UpdateActorReply*) override {
    if (request->actor().actor_id().empty()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "UpdateActor: actor_id is empty");
    }
    return rpc::ToGrpc(actors_->Put(request->actor()));
  }

  grpc::Status GetActor(grpc::ServerContext*, const rpc::GetActorRequest* request,
                        rpc::GetActorReply* reply) override {
    std::optional<rpc::ActorInfo> actor;
    if (!request->actor_id().empty()) {
      actor = actors_->Get(request->actor_id());
    } else if (!request->name().empty()) {
      actor = actors_->GetByName(request->name(), request->namespace_());
    } else {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "GetActor: give an actor_id or a name");
    }
    if (!actor) {
      return grpc::Status(
          grpc::StatusCode::NOT_FOUND,
          absl::StrCat("no actor ", request->actor_id().empty()
                                        ? absl::StrCat("named '", request->name(), "'")
                                        : request->actor_id()));
    }
    *reply->mutable_actor() = std::move(*actor);
    return grpc::Status::OK;
  }

  grpc::Status ListActors(grpc::ServerContext*, const rpc::ListActorsRequest* request,
                          rpc::ListActorsReply* reply) override {
    for (auto& a : actors_->List(request->job_id())) *reply->add_actors() = std::move(a);
    return grpc::Status::OK;
  }

  grpc::Status UpdateJob(grpc::ServerContext*, const rpc::UpdateJobRequest* request,
                         rpc::UpdateJobReply*) override {
    absl::Status updated = job_manager_->Update(request->job());
    if (updated.ok()) history_->Record(request->job(), absl::Now());
    return rpc::ToGrpc(updated);
  }

  grpc::Status GetJob(grpc::ServerContext*, const rpc::GetJobRequest* request,
                      rpc::GetJobReply* reply) override {
    auto job = jobs_->Get(request->job_id());
    if (!job) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          absl::StrCat("no job '", request->job_id(),
                                       "'; `phalanx job list` shows the known ones"));
    }
    *reply->mutable_job() = std::move(*job);
    return grpc::Status::OK;
  }

  grpc::Status ListJobs(grpc::ServerContext*, const rpc::ListJobsRequest*,
                        rpc::ListJobsReply* reply) override {
    auto jobs = jobs_->List();
    std::sort(jobs.begin(), jobs.end(), [](const auto& a, const auto& b) {
      return std::make_tuple(a.submit_time_ms(), a.job_id()) <
             std::make_tuple(b.submit_time_ms(), b.job_id());
    });
    for (auto& j : jobs) *reply->add_jobs() = std::move(j);
    return grpc::Status::OK;
  }

  grpc::Status UploadWorkingDir(grpc::ServerContext*, grpc::ServerReader<rpc::UploadChunk>* reader,
                                rpc::UploadWorkingDirReply* reply) override {
    auto received = job_manager_->ReceiveUpload(
        [reader](rpc::UploadChunk* chunk) { return reader->Read(chunk); });
    if (!received.ok()) return rpc::ToGrpc(received.status());
    *reply = std::move(*received);
    return grpc::Status::OK;
  }

  grpc::Status SubmitJob(grpc::ServerContext*, const rpc::SubmitJobRequest* request,
                         rpc::SubmitJobReply* reply) override {
    auto job = job_manager_->Submit(*request);
    if (!job.ok()) return rpc::ToGrpc(job.status());
    *reply->mutable_job() = std::move(*job);
    return grpc::Status::OK;
  }

  grpc::Status StopJob(grpc::ServerContext*, const rpc::StopJobRequest* request,
                       rpc::StopJobReply* reply) override {
    auto job = job_manager_->Stop(request->job_id(), request->grace_s());
    if (!job.ok()) return rpc::ToGrpc(job.status());
    *reply->mutable_job() = std::move(*job);
    return grpc::Status::OK;
  }

  grpc::Status ScaleJob(grpc::ServerContext*, const rpc::ScaleJobRequest* request,
                        rpc::ScaleJobReply* reply) override {
    auto job = job_manager_->Scale(*request);
    if (!job.ok()) return rpc::ToGrpc(job.status());
    *reply->mutable_job() = std::move(*job);
    return grpc::Status::OK;
  }

  grpc::Status ReportJob(grpc::ServerContext*, const rpc::ReportJobRequest* request,
                         rpc::ReportJobReply*) override {
    return rpc::ToGrpc(job_manager_->Report(*request));
  }

  grpc::Status JobLogs(grpc::ServerContext* context, const rpc::JobLogsRequest* request,
                       grpc::ServerWriter<rpc::JobLogsChunk>* writer) override {
    return rpc::ToGrpc(job_manager_->StreamLogs(
        *request, [&](const rpc::JobLogsChunk& chunk) { return writer->Write(chunk); },
        [&] { return context->IsCancelled() || stopping_.load(); }));
  }

  grpc::Status CreatePlacementGroup(grpc::ServerContext*,
                                    const rpc::CreatePlacementGroupRequest* request,
                                    rpc::CreatePlacementGroupReply* reply) override {
    auto pg = placement_groups_->Create(request->placement_group());
    if (!pg.ok()) return rpc::ToGrpc(pg.status());
    *reply->mutable_placement_group() = std::move(*pg);
    return grpc::Status::OK;
  }

  grpc::Status RemovePlacementGroup(grpc::ServerContext*,
                                    const rpc::RemovePlacementGroupRequest* request,
                                    rpc::RemovePlacementGroupReply*) override {
    return rpc::ToGrpc(placement_groups_->Remove(request->placement_group_id()));
  }

  grpc::Status ReleasePlacementGroupBundle(grpc::ServerContext*,
                                           const rpc::ReleasePlacementGroupBundleRequest* request,
                                           rpc::ReleasePlacementGroupBundleReply*) override {
    return rpc::ToGrpc(
        placement_groups_->ReleaseBundle(request->placement_group_id(), request->bundle_index()));
  }

  grpc::Status GetPlacementGroup(grpc::ServerContext*, const rpc::GetPlacementGroupRequest* request,
                                 rpc::GetPlacementGroupReply* reply) override {
    auto pg = request->placement_group_id().empty()
                  ? placement_groups_->GetByName(request->name())
                  : placement_groups_->Get(request->placement_group_id());
    if (!pg) {
      return grpc::Status(
          grpc::StatusCode::NOT_FOUND,
          absl::StrCat("no placement group ", request->placement_group_id().empty()
                                                  ? absl::StrCat("named '", request->name(), "'")
                                                  : request->placement_group_id()));
    }
    *reply->mutable_placement_group() = std::move(*pg);
    return grpc::Status::OK;
  }

  grpc::Status WaitPlacementGroupReady(grpc::ServerContext*,
                                       const rpc::WaitPlacementGroupReadyRequest* request,
                                       rpc::WaitPlacementGroupReadyReply* reply) override {
    auto pg = placement_groups_->WaitReady(
        request->placement_group_id(),
        absl::Milliseconds(std::clamp<int64_t>(request->timeout_ms(), 0, 60000)));
    if (!pg.ok()) return rpc::ToGrpc(pg.status());
    *reply->mutable_placement_group() = std::move(*pg);
    return grpc::Status::OK;
  }

  grpc::Status ListPlacementGroups(grpc::ServerContext*, const rpc::ListPlacementGroupsRequest*,
                                   rpc::ListPlacementGroupsReply* reply) override {
    for (auto& pg : placement_groups_->List()) *reply->add_placement_groups() = std::move(pg);
    return grpc::Status::OK;
  }

  grpc::Status Subscribe(grpc::ServerContext* context, const rpc::SubscribeRequest* request,
                         grpc::ServerWriter<rpc::PubMessage>* writer) override {
    if (request->channels().empty()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "Subscribe: no channels given");
    }
    for (int c : request->channels()) {
      if (!rpc::Channel_IsValid(c) || c == rpc::CHANNEL_UNSPECIFIED) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            absl::StrCat("Subscribe: unknown channel ", c));
      }
    }
    auto subscriber = publisher_->Subscribe(*request);
    bool fell_behind = false;
    while (!context->IsCancelled() && !stopping_) {
      auto message = subscriber->Next(absl::Milliseconds(200));
      if (!message) {
        if (subscriber->closed()) {
          fell_behind = !stopping_;
          break;
        }
        continue;
      }
      if (!writer->Write(*message)) break;
    }
    publisher_->Unsubscribe(subscriber);
    if (fell_behind) {
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                          "subscriber fell behind; reconnect to resync");
    }
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "GCS is shutting down");
  }

 private:
  const std::string cluster_id_;
  const std::optional<rpc::KeyAndCert> ca_;  // signs joining machines' keys (TLS clusters)
  const int64_t start_time_ms_;
  GcsPublisher* publisher_;
  GcsNodeManager* nodes_;
  GcsKvManager* kv_;
  GcsActorManager* actors_;
  RecordTable<rpc::JobInfo>* jobs_;
  GcsPlacementGroupManager* placement_groups_;
  GcsJobManager* job_manager_;
  JobHistory* history_;
  int dashboard_port_ = 0;
  bool dashboard_https_ = false;
  const absl::Duration node_timeout_;
  std::atomic<bool> stopping_{false};
};

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
        nodes_(store_.get(), &publisher_, {options.node_timeout, options.restart_grace}),
        kv_(store_.get(), &publisher_),
        node_clients_(options.token),
        actors_(store_.get(), &publisher_, &nodes_, &node_clients_, &scheduler_),
        jobs_(store_.get(), &publisher_, "jobs", rpc::JOB, &SetJobBody),
        placement_groups_(store_.get(), &publisher_, &nodes_, &node_clients_, &scheduler_,
                          &actors_),
        job_manager_(&jobs_, &actors_, &kv_, JobOptions(options)) {
    // One path for node events: the scheduler first, then the managers.
    nodes_.AddRegisteredListener([this](const rpc::NodeInfo& node) {
      scheduler_.AddNode(node.node_id(), rpc::FromProto(node.total()),
                         {node.labels().begin(), node.labels().end()});
      actors_.OnNodeRegistered(node);
      placement_groups_.ScheduleNow();
      UpdateScrapeTargets();
    });
    nodes_.AddDeadListener([this](const rpc::NodeInfo& node) {
      auto lost = scheduler_.RemoveNode(node.node_id());
      actors_.OnNodeDead(node);
      placement_groups_.OnBundlesLost(lost);
      UpdateScrapeTargets();
    });
    actors_.SetPlacementGroupCheck(
        [this](const std::string& pg_id, int index, const Resources& request) {
          return placement_groups_.CheckActorBundle(pg_id, index, request);
        });
    actors_.SetResourcesFreedCallback([this] { placement_groups_.ScheduleNow(); });
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
    service_ = std::make_unique<GcsServiceImpl>(cluster_id, &publisher_, &nodes_, &kv_, &actors_,
                                                &jobs_, &placement_groups_, &job_manager_,
                                                &history_, options_.node_timeout, std::move(ca));
    if (dashboard_) service_->SetDashboard(dashboard_->port(), dashboard_->https());
    rpc::ServerOptions server_options{options_.token, rpc::kMaxControlMessageBytes};
    server_options.latency = &rpc_latency_;
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
    o.version = kVersion;
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

  void HealthLoop() {
    while (!shutdown_started_) {
      absl::Time slept = absl::Now();
      absl::SleepFor(options_.health_check_period);
      absl::Duration late = absl::Now() - slept - options_.health_check_period;
      if (late > options_.node_timeout / 4) {
        nodes_.Stalled(late);
        actors_.LeasesStalled(late);
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
  std::unique_ptr<GcsServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<HeadDashboard> dashboard_;
  int port_ = 0;
  std::thread health_thread_;
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
