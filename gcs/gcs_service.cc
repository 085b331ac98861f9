#include "gcs/gcs_service.h"

#include <algorithm>
#include <atomic>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/describe.h"
#include "base/files.h"
#include "base/ids.h"
#include "base/logging.h"
#include "base/proto/gcs.grpc.pb.h"
#include "base/rpc.h"
#include "base/system.h"
#include "base/tls.h"
#include "gcs/actor_manager.h"
#include "gcs/driver_leases.h"
#include "gcs/job_history.h"
#include "gcs/job_manager.h"
#include "gcs/kv_manager.h"
#include "gcs/node_manager.h"
#include "gcs/placement_group_manager.h"
#include "gcs/publisher.h"
#include "gcs/record_table.h"

namespace phalanx::gcs {
namespace {

// The longest a call waits for a placement group to be ready (a client asking for longer
// asks again); the wait a call asks for, in milliseconds, bounded by it.
constexpr absl::Duration kMaxPlacementGroupWait = absl::Seconds(60);
absl::Duration WaitBound(int64_t ms) {
  return std::clamp(absl::Milliseconds(ms), absl::ZeroDuration(), kMaxPlacementGroupWait);
}

class GcsServiceImpl final : public GcsServiceHandlers {
 public:
  GcsServiceImpl(std::string cluster_id, GcsPublisher* publisher, GcsNodeManager* nodes,
                 GcsKvManager* kv, GcsActorManager* actors, RecordTable<rpc::JobInfo>* jobs,
                 GcsPlacementGroupManager* placement_groups, GcsJobManager* job_manager,
                 JobHistory* history, absl::Duration node_timeout,
                 std::optional<rpc::KeyAndCert> ca, DriverLeases* drivers)
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
        node_timeout_(node_timeout),
        drivers_(drivers) {}

  void Stop() override { stopping_ = true; }
  void SetDashboard(int port, bool https) override {
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
    reply->set_version(kGcsVersion);
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
    placement_groups_->ReconcileNode(
        request->node().node_id(), request->node().address(),
        {request->held_bundles().begin(), request->held_bundles().end()});
    reply->set_incarnation(publisher_->incarnation());
    reply->set_cluster_id(cluster_id_);
    reply->set_node_timeout_ms(absl::ToInt64Milliseconds(node_timeout_));
    reply->set_partition_timeout_ms(absl::ToInt64Milliseconds(nodes_->partition_timeout()));
    return grpc::Status::OK;
  }

  grpc::Status Heartbeat(grpc::ServerContext*, const rpc::HeartbeatRequest* request,
                         rpc::HeartbeatReply* reply) override {
    bool unknown = false, dead = false;
    if (auto s = nodes_->Heartbeat(*request, &unknown, &dead, reply); !s.ok()) {
      return rpc::ToGrpc(s);
    }
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

  grpc::Status PublishLogs(grpc::ServerContext*, const rpc::PublishLogsRequest* request,
                           rpc::PublishLogsReply*) override {
    for (const rpc::LogLines& lines : request->logs()) {
      rpc::PubMessage m;
      m.set_channel(rpc::LOGS);
      m.set_key(lines.job_id());
      *m.mutable_log() = lines;
      publisher_->Publish(std::move(m));
    }
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
                                 absl::Milliseconds(request->timeout_ms()),
                                 absl::Milliseconds(request->running_timeout_ms()), &stale);
    if (!s.ok()) return rpc::ToGrpc(s);
    reply->set_stale(stale);
    return grpc::Status::OK;
  }

  grpc::Status LendActorResources(grpc::ServerContext*,
                                  const rpc::LendActorResourcesRequest* request,
                                  rpc::LendActorResourcesReply* reply) override {
    auto held = actors_->Lend(request->actor_id(), request->attempt(), request->action());
    if (!held.ok()) return rpc::ToGrpc(held.status());
    reply->set_held(*held);
    return grpc::Status::OK;
  }

  grpc::Status RenewDriverLease(grpc::ServerContext*, const rpc::RenewDriverLeaseRequest* request,
                                rpc::RenewDriverLeaseReply* reply) override {
    if (request->owner_id().empty()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "RenewDriverLease: owner_id is empty (the driver's caller id)");
    }
    if (drivers_ == nullptr) return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "no leases");
    reply->set_renew_every_ms(absl::ToInt64Milliseconds(drivers_->Renew(*request)));
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

  grpc::Status AppendJobLog(grpc::ServerContext*, const rpc::AppendJobLogRequest* request,
                            rpc::AppendJobLogReply*) override {
    return rpc::ToGrpc(job_manager_->AppendLog(request->job_id(), request->data()));
  }

  grpc::Status CreatePlacementGroup(grpc::ServerContext*,
                                    const rpc::CreatePlacementGroupRequest* request,
                                    rpc::CreatePlacementGroupReply* reply) override {
    auto pg = placement_groups_->Create(request->placement_group());
    if (pg.ok() && request->wait_ready_ms() > 0) {
      pg = placement_groups_->WaitReady(pg->placement_group_id(),
                                        WaitBound(request->wait_ready_ms()));
    }
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
    auto pg = placement_groups_->WaitReady(request->placement_group_id(),
                                           WaitBound(request->timeout_ms()));
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
  DriverLeases* const drivers_;
  std::atomic<bool> stopping_{false};
};

}  // namespace

std::unique_ptr<GcsServiceHandlers> NewGcsService(
    std::string cluster_id, GcsPublisher* publisher, GcsNodeManager* nodes, GcsKvManager* kv,
    GcsActorManager* actors, RecordTable<rpc::JobInfo>* jobs,
    GcsPlacementGroupManager* placement_groups, GcsJobManager* job_manager, JobHistory* history,
    absl::Duration node_timeout, std::optional<rpc::KeyAndCert> ca, DriverLeases* drivers) {
  return std::make_unique<GcsServiceImpl>(std::move(cluster_id), publisher, nodes, kv, actors, jobs,
                                          placement_groups, job_manager, history, node_timeout,
                                          std::move(ca), drivers);
}

}  // namespace phalanx::gcs
