#include "client/gcs_client.h"

#include <atomic>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/logging.h"
#include "base/proto/gcs.grpc.pb.h"
#include "base/rpc.h"
#include "base/tls.h"

namespace phalanx::gcs {
namespace {

using Stub = rpc::GcsService::Stub;

class SubscriptionImpl final : public GcsClient::Subscription {
 public:
  SubscriptionImpl(Stub* stub, std::string token, std::string address,
                   std::vector<rpc::Channel> channels, std::vector<std::string> keys,
                   GcsClient::MessageCallback on_message)
      : stub_(stub),
        token_(std::move(token)),
        address_(std::move(address)),
        channels_(std::move(channels)),
        keys_(std::move(keys)),
        on_message_(std::move(on_message)) {
    thread_ = std::thread([this] { Loop(); });
  }

  ~SubscriptionImpl() override {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
      if (context_) context_->TryCancel();
    }
    thread_.join();
  }

  int reconnects() const override { return reconnects_.load(); }

 private:
  void Loop() {
    absl::Duration backoff = absl::Milliseconds(50);
    bool first = true;
    while (true) {
      rpc::SubscribeRequest request;
      for (auto c : channels_) request.add_channels(c);
      for (const auto& k : keys_) request.add_keys(k);
      request.set_incarnation(incarnation_);
      for (const auto& [c, seq] : last_seq_) (*request.mutable_last_seq())[c] = seq;
      grpc::ClientContext context;
      if (!token_.empty()) context.AddMetadata(rpc::kTokenHeader, token_);
      context.set_wait_for_ready(true);
      {
        absl::MutexLock lock(&mu_);
        if (stopping_) return;
        context_ = &context;
      }
      if (!first) reconnects_.fetch_add(1);
      first = false;
      auto reader = stub_->Subscribe(&context, request);
      rpc::PubMessage message;
      bool got_any = false;
      while (reader->Read(&message)) {
        got_any = true;
        incarnation_ = message.incarnation();
        // A snapshot's position counts only once it is complete: a stream cut in the middle
        // of one must get the whole snapshot again.
        if (message.snapshot_done() || !message.snapshot()) {
          last_seq_[message.channel()] = message.seq();
        }
        on_message_(message);
      }
      grpc::Status status = reader->Finish();
      {
        absl::MutexLock lock(&mu_);
        context_ = nullptr;
        if (stopping_) return;
      }
      if (status.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
          status.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
        spdlog::error("subscription to the GCS at {} refused: {}", address_,
                      status.error_message());
      } else {
        spdlog::debug("subscription to the GCS at {} ended ({}); reconnecting", address_,
                      status.error_message());
      }
      if (got_any) backoff = absl::Milliseconds(50);
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), backoff);
      if (stopping_) return;
      backoff = std::min(backoff * 2, absl::Seconds(1));
    }
  }

  Stub* const stub_;
  const std::string token_;
  const std::string address_;
  const std::vector<rpc::Channel> channels_;
  const std::vector<std::string> keys_;
  const GcsClient::MessageCallback on_message_;
  // Touched by the loop thread only.
  std::string incarnation_;
  std::map<int, uint64_t> last_seq_;
  std::atomic<int> reconnects_{0};

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::thread thread_;
};

class GcsClientImpl final : public GcsClient {
 public:
  explicit GcsClientImpl(const GcsClientOptions& options)
      : options_(options), stub_(rpc::GcsService::NewStub(rpc::MakeChannel(options.address))) {}

  const std::string& address() const override { return options_.address; }

  // Runs one unary call. While the GCS is unreachable the call waits for it (wait-for-ready)
  // up to `timeout`; a call cut off by a GCS crash is retried within the same bound.
  template <typename Request, typename Reply>
  absl::StatusOr<Reply> Call(grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&,
                                                          Reply*),
                             const Request& request, absl::Duration timeout) {
    absl::Time give_up = absl::Now() + timeout;
    while (true) {
      grpc::ClientContext context;
      rpc::PrepareContext(&context, options_.token, give_up - absl::Now());
      Reply reply;
      grpc::Status status = (stub_.get()->*method)(&context, request, &reply);
      if (status.ok()) return reply;
      bool retryable = status.error_code() == grpc::StatusCode::UNAVAILABLE;
      if (retryable && absl::Now() + absl::Milliseconds(50) < give_up) {
        absl::SleepFor(absl::Milliseconds(50));
        continue;
      }
      if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
          status.error_code() == grpc::StatusCode::UNAVAILABLE) {
        return absl::UnavailableError(
            absl::StrCat("cannot reach the GCS at ", options_.address, " (", status.error_message(),
                         "): check the address and that `phalanx start --head` is running there"));
      }
      return rpc::FromGrpc(status, absl::StrCat("GCS at ", options_.address));
    }
  }

  template <typename Request, typename Reply>
  absl::StatusOr<Reply> Call(grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&,
                                                          Reply*),
                             const Request& request) {
    return Call(method, request, options_.rpc_timeout);
  }

  absl::StatusOr<rpc::GetClusterInfoReply> GetClusterInfo() override {
    return Call(&Stub::GetClusterInfo, rpc::GetClusterInfoRequest());
  }

  absl::StatusOr<std::string> IssueCertificate(const std::string& public_key_pem,
                                               const std::vector<std::string>& names) override {
    rpc::IssueCertificateRequest request;
    request.set_public_key_pem(public_key_pem);
    for (const auto& name : names) request.add_names(name);
    auto reply = Call(&Stub::IssueCertificate, request);
    if (!reply.ok()) return reply.status();
    return reply->cert_chain_pem();
  }

  absl::StatusOr<rpc::GetClusterInfoReply> GetClusterInfo(absl::Duration timeout) {
    return Call(&Stub::GetClusterInfo, rpc::GetClusterInfoRequest(), timeout);
  }

  absl::StatusOr<rpc::RegisterNodeReply> RegisterNode(
      const rpc::NodeInfo& node, const std::vector<rpc::HeldBundle>& held) override {
    rpc::RegisterNodeRequest request;
    *request.mutable_node() = node;
    request.mutable_held_bundles()->Add(held.begin(), held.end());
    return Call(&Stub::RegisterNode, request);
  }

  absl::StatusOr<rpc::HeartbeatReply> Heartbeat(const rpc::HeartbeatRequest& request) override {
    return Call(&Stub::Heartbeat, request);
  }

  absl::Status UnregisterNode(const std::string& node_id, const std::string& reason) override {
    rpc::UnregisterNodeRequest request;
    request.set_node_id(node_id);
    request.set_reason(reason);
    return Call(&Stub::UnregisterNode, request).status();
  }

  absl::StatusOr<std::vector<rpc::NodeInfo>> GetAllNodes(bool alive_only) override {
    rpc::GetAllNodesRequest request;
    request.set_alive_only(alive_only);
    auto reply = Call(&Stub::GetAllNodes, request);
    if (!reply.ok()) return reply.status();
    return std::vector<rpc::NodeInfo>(reply->nodes().begin(), reply->nodes().end());
  }

  absl::StatusOr<bool> KvPut(const std::string& ns, const std::string& key,
                             const std::string& value, bool overwrite) override {
    rpc::KvPutRequest request;
    request.set_namespace_(ns);
    request.set_key(key);
    request.set_value(value);
    request.set_overwrite(overwrite);
    auto reply = Call(&Stub::KvPut, request);
    if (!reply.ok()) return reply.status();
    return reply->added();
  }

  absl::StatusOr<std::optional<std::string>> KvGet(const std::string& ns,
                                                   const std::string& key) override {
    rpc::KvGetRequest request;
    request.set_namespace_(ns);
    request.set_key(key);
    auto reply = Call(&Stub::KvGet, request);
    if (!reply.ok()) return reply.status();
    if (!reply->found()) return std::optional<std::string>();
    return std::optional<std::string>(reply->value());
  }

  absl::StatusOr<int> KvDelete(const std::string& ns, const std::string& key,
                               bool by_prefix) override {
    rpc::KvDeleteRequest request;
    request.set_namespace_(ns);
    request.set_key(key);
    request.set_by_prefix(by_prefix);
    auto reply = Call(&Stub::KvDelete, request);
    if (!reply.ok()) return reply.status();
    return reply->deleted();
  }

  absl::StatusOr<std::vector<rpc::KvEntry>> KvList(const std::string& ns,
                                                   const std::string& prefix) override {
    rpc::KvListRequest request;
    request.set_namespace_(ns);
    request.set_prefix(prefix);
    auto reply = Call(&Stub::KvList, request);
    if (!reply.ok()) return reply.status();
    return std::vector<rpc::KvEntry>(reply->entries().begin(), reply->entries().end());
  }

  absl::StatusOr<rpc::ActorInfo> CreateActor(const rpc::ActorInfo& spec) override {
    rpc::CreateActorRequest request;
    *request.mutable_actor() = spec;
    auto reply = Call(&Stub::CreateActor, request);
    if (!reply.ok()) return reply.status();
    return reply->actor();
  }

  absl::Status PublishLogs(const rpc::PublishLogsRequest& request) override {
    // Short: the lines are dropped rather than held while the GCS is away.
    return Call(&Stub::PublishLogs, request, absl::Seconds(2)).status();
  }

  absl::StatusOr<rpc::ReportActorStateReply> ReportActorState(
      const rpc::ReportActorStateRequest& report) override {
    return Call(&Stub::ReportActorState, report);
  }

  absl::Status KillActor(const std::string& actor_id, bool no_restart) override {
    rpc::KillActorViaGcsRequest request;
    request.set_actor_id(actor_id);
    request.set_no_restart(no_restart);
    return Call(&Stub::KillActor, request).status();
  }

  absl::StatusOr<bool> RenewActorLease(const std::string& actor_id, int attempt,
                                       absl::Duration timeout,
                                       absl::Duration running_timeout) override {
    rpc::RenewActorLeaseRequest request;
    request.set_actor_id(actor_id);
    request.set_attempt(attempt);
    request.set_timeout_ms(absl::ToInt64Milliseconds(timeout));
    request.set_running_timeout_ms(absl::ToInt64Milliseconds(running_timeout));
    // A renewal that cannot arrive in time is worth nothing: bounded by the lease itself.
    auto reply = Call(&Stub::RenewActorLease, request, std::min(timeout, options_.rpc_timeout));
    if (!reply.ok()) return reply.status();
    return reply->stale();
  }

  absl::StatusOr<bool> LendActorResources(const std::string& actor_id, int attempt,
                                          rpc::LendActorResourcesRequest::Action action,
                                          absl::Duration timeout) override {
    rpc::LendActorResourcesRequest request;
    request.set_actor_id(actor_id);
    request.set_attempt(attempt);
    request.set_action(action);
    auto reply = Call(&Stub::LendActorResources, request, std::min(timeout, options_.rpc_timeout));
    if (!reply.ok()) return reply.status();
    return reply->held();
  }

  absl::StatusOr<absl::Duration> RenewDriverLease(
      const rpc::RenewDriverLeaseRequest& request) override {
    auto reply = Call(&Stub::RenewDriverLease, request);
    if (!reply.ok()) return reply.status();
    return absl::Milliseconds(reply->renew_every_ms());
  }

  absl::Status UpdateActor(const rpc::ActorInfo& actor) override {
    rpc::UpdateActorRequest request;
    *request.mutable_actor() = actor;
    return Call(&Stub::UpdateActor, request).status();
  }

  absl::StatusOr<rpc::ActorInfo> GetActor(const std::string& actor_id) override {
    rpc::GetActorRequest request;
    request.set_actor_id(actor_id);
    auto reply = Call(&Stub::GetActor, request);
    if (!reply.ok()) return reply.status();
    return reply->actor();
  }

  absl::StatusOr<rpc::ActorInfo> GetNamedActor(const std::string& name,
                                               const std::string& ns) override {
    rpc::GetActorRequest request;
    request.set_name(name);
    request.set_namespace_(ns);
    auto reply = Call(&Stub::GetActor, request);
    if (!reply.ok()) return reply.status();
    return reply->actor();
  }

  absl::StatusOr<std::vector<rpc::ActorInfo>> ListActors(const std::string& job_id) override {
    rpc::ListActorsRequest request;
    request.set_job_id(job_id);
    auto reply = Call(&Stub::ListActors, request);
    if (!reply.ok()) return reply.status();
    return std::vector<rpc::ActorInfo>(reply->actors().begin(), reply->actors().end());
  }

  absl::Status UpdateJob(const rpc::JobInfo& job) override {
    rpc::UpdateJobRequest request;
    *request.mutable_job() = job;
    return Call(&Stub::UpdateJob, request).status();
  }

  absl::StatusOr<rpc::JobInfo> GetJob(const std::string& job_id) override {
    rpc::GetJobRequest request;
    request.set_job_id(job_id);
    auto reply = Call(&Stub::GetJob, request);
    if (!reply.ok()) return reply.status();
    return reply->job();
  }

  absl::StatusOr<std::vector<rpc::JobInfo>> ListJobs() override {
    auto reply = Call(&Stub::ListJobs, rpc::ListJobsRequest());
    if (!reply.ok()) return reply.status();
    return std::vector<rpc::JobInfo>(reply->jobs().begin(), reply->jobs().end());
  }

  absl::StatusOr<rpc::UploadWorkingDirReply> UploadWorkingDir(
      const std::function<absl::StatusOr<bool>(rpc::UploadChunk*)>& next) override {
    grpc::ClientContext context;
    rpc::PrepareContext(&context, options_.token, options_.upload_timeout);
    rpc::UploadWorkingDirReply reply;
    auto writer = stub_->UploadWorkingDir(&context, &reply);
    rpc::UploadChunk chunk;
    while (true) {
      chunk.Clear();
      auto more = next(&chunk);
      if (!more.ok()) {
        context.TryCancel();
        (void)writer->Finish();
        return more.status();
      }
      if (!*more) break;
      // A failed write means the head ended the call (a refusal): Finish() says why.
      if (!writer->Write(chunk)) break;
    }
    writer->WritesDone();
    grpc::Status status = writer->Finish();
    if (!status.ok()) return rpc::FromGrpc(status, absl::StrCat("GCS at ", options_.address));
    return reply;
  }

  absl::StatusOr<rpc::JobInfo> SubmitJob(const rpc::SubmitJobRequest& request) override {
    auto reply = Call(&Stub::SubmitJob, request);
    if (!reply.ok()) return reply.status();
    return reply->job();
  }

  absl::StatusOr<rpc::JobInfo> StopJob(const std::string& job_id, double grace_s) override {
    rpc::StopJobRequest request;
    request.set_job_id(job_id);
    request.set_grace_s(grace_s);
    auto reply = Call(&Stub::StopJob, request);
    if (!reply.ok()) return reply.status();
    return reply->job();
  }

  using GcsClient::ScaleJob;
  absl::StatusOr<rpc::JobInfo> ScaleJob(const rpc::ScaleJobRequest& request) override {
    auto reply = Call(&Stub::ScaleJob, request);
    if (!reply.ok()) return reply.status();
    return reply->job();
  }

  absl::Status ReportJob(const rpc::ReportJobRequest& report) override {
    return Call(&Stub::ReportJob, report).status();
  }

  absl::Status AppendJobLog(const std::string& job_id, const std::string& data) override {
    rpc::AppendJobLogRequest request;
    request.set_job_id(job_id);
    request.set_data(data);
    return Call(&Stub::AppendJobLog, request).status();
  }

  absl::Status JobLogs(const std::string& job_id, int64_t offset, bool follow,
                       const std::function<bool(const rpc::JobLogsChunk&)>& on_chunk) override {
    absl::Time give_up = absl::Now() + options_.rpc_timeout;
    while (true) {
      rpc::JobLogsRequest request;
      request.set_job_id(job_id);
      request.set_offset(offset);
      request.set_follow(follow);
      grpc::ClientContext context;
      if (!options_.token.empty()) context.AddMetadata(rpc::kTokenHeader, options_.token);
      context.set_wait_for_ready(true);
      if (!follow) {
        context.set_deadline(std::chrono::system_clock::now() +
                             absl::ToChronoMilliseconds(options_.rpc_timeout));
      }
      auto reader = stub_->JobLogs(&context, request);
      rpc::JobLogsChunk chunk;
      bool stopped = false;
      while (reader->Read(&chunk)) {
        offset = chunk.offset() + static_cast<int64_t>(chunk.data().size());
        give_up = absl::Now() + options_.rpc_timeout;
        if (!on_chunk(chunk)) {
          stopped = true;
          context.TryCancel();
          break;
        }
      }
      grpc::Status status = reader->Finish();
      if (stopped || status.ok()) return absl::OkStatus();
      // A GCS restart cuts the stream: resume from the offset reached.
      if (status.error_code() == grpc::StatusCode::UNAVAILABLE && absl::Now() < give_up) {
        absl::SleepFor(absl::Milliseconds(100));
        continue;
      }
      return rpc::FromGrpc(status, absl::StrCat("GCS at ", options_.address));
    }
  }

  absl::StatusOr<rpc::PlacementGroupInfo> CreatePlacementGroup(const rpc::PlacementGroupInfo& spec,
                                                               absl::Duration wait_ready) override {
    rpc::CreatePlacementGroupRequest request;
    *request.mutable_placement_group() = spec;
    request.set_wait_ready_ms(absl::ToInt64Milliseconds(wait_ready));
    auto reply = Call(&Stub::CreatePlacementGroup, request, wait_ready + options_.rpc_timeout);
    if (!reply.ok()) return reply.status();
    return reply->placement_group();
  }

  absl::Status RemovePlacementGroup(const std::string& pg_id) override {
    rpc::RemovePlacementGroupRequest request;
    request.set_placement_group_id(pg_id);
    return Call(&Stub::RemovePlacementGroup, request).status();
  }

  absl::Status ReleasePlacementGroupBundle(const std::string& pg_id, int bundle_index) override {
    rpc::ReleasePlacementGroupBundleRequest request;
    request.set_placement_group_id(pg_id);
    request.set_bundle_index(bundle_index);
    return Call(&Stub::ReleasePlacementGroupBundle, request).status();
  }

  absl::StatusOr<rpc::PlacementGroupInfo> GetPlacementGroup(const std::string& pg_id) override {
    rpc::GetPlacementGroupRequest request;
    request.set_placement_group_id(pg_id);
    auto reply = Call(&Stub::GetPlacementGroup, request);
    if (!reply.ok()) return reply.status();
    return reply->placement_group();
  }

  absl::StatusOr<rpc::PlacementGroupInfo> WaitPlacementGroupReady(const std::string& pg_id,
                                                                  absl::Duration timeout) override {
    rpc::WaitPlacementGroupReadyRequest request;
    request.set_placement_group_id(pg_id);
    request.set_timeout_ms(absl::ToInt64Milliseconds(timeout));
    auto reply = Call(&Stub::WaitPlacementGroupReady, request, timeout + options_.rpc_timeout);
    if (!reply.ok()) return reply.status();
    return reply->placement_group();
  }

  absl::StatusOr<std::vector<rpc::PlacementGroupInfo>> ListPlacementGroups() override {
    auto reply = Call(&Stub::ListPlacementGroups, rpc::ListPlacementGroupsRequest());
    if (!reply.ok()) return reply.status();
    return std::vector<rpc::PlacementGroupInfo>(reply->placement_groups().begin(),
                                                reply->placement_groups().end());
  }

  std::unique_ptr<Subscription> Subscribe(std::vector<rpc::Channel> channels,
                                          MessageCallback on_message) override {
    return SubscribeKeys(std::move(channels), {}, std::move(on_message));
  }

  std::unique_ptr<Subscription> SubscribeKeys(std::vector<rpc::Channel> channels,
                                              std::vector<std::string> keys,
                                              MessageCallback on_message) override {
    return std::make_unique<SubscriptionImpl>(stub_.get(), options_.token, options_.address,
                                              std::move(channels), std::move(keys),
                                              std::move(on_message));
  }

 private:
  const GcsClientOptions options_;
  std::unique_ptr<Stub> stub_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GcsClient>> GcsClient::Connect(const GcsClientOptions& options,
                                                              absl::Duration connect_timeout) {
  if (auto split = rpc::SplitHostPort(options.address, "GCS address"); !split.ok()) {
    return split.status();
  }
  auto client = std::make_unique<GcsClientImpl>(options);
  auto info = client->GetClusterInfo(connect_timeout);
  if (!info.ok() && !rpc::TlsEnabled() &&
      (absl::IsUnavailable(info.status()) || absl::IsDeadlineExceeded(info.status()))) {
    // The commonest cause: a TLS cluster, and this process has no CA for it.
    if (auto tls = rpc::SpeaksTls(options.address, absl::Seconds(2)); tls.ok() && *tls) {
      return absl::Status(
          info.status().code(),
          absl::StrCat("the GCS at ", options.address,
                       " speaks TLS and this process has no CA for it: set PHALANX_TLS_DIR to "
                       "a dir holding the cluster's ca.pem (the head's <session>/tls), or run "
                       "on a machine that joined the cluster"));
    }
  }
  if (!info.ok()) return info.status();
  return std::unique_ptr<GcsClient>(std::move(client));
}

std::unique_ptr<GcsClient> GcsClient::Open(const GcsClientOptions& options) {
  return std::make_unique<GcsClientImpl>(options);
}

}  // namespace phalanx::gcs
