// GcsClient: what every process (node manager, worker, driver, CLI) uses to talk to the GCS.
// Calls are blocking and thread-safe. Each call carries the cluster token; while the GCS is
// down (a restart) a call waits for it up to its timeout and is retried if it was cut off,
// which is safe because every mutating call is idempotent. No gRPC in this header.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/proto/gcs.pb.h"

namespace phalanx::gcs {

struct GcsClientOptions {
  std::string address;  // host:port of the GCS
  std::string token;    // the cluster token
  // Upper bound of one call, including waiting for a restarting GCS.
  absl::Duration rpc_timeout = absl::Seconds(30);
  // Upper bound of one working-dir upload (UploadWorkingDir), which streams up to the head's
  // --max-working-dir-mb.
  absl::Duration upload_timeout = absl::Minutes(10);
};

class GcsClient {
 public:
  // A live subscription; destroying it stops the stream and joins its thread.
  class Subscription {
   public:
    virtual ~Subscription() = default;
    // How many times the stream was re-established (after a GCS restart, say).
    virtual int reconnects() const = 0;
  };
  using MessageCallback = std::function<void(const rpc::PubMessage&)>;

  // Connects and checks the address and the token with one call bounded by
  // `connect_timeout`. Errors: Unavailable ("cannot reach the GCS at …"), Unauthenticated.
  static absl::StatusOr<std::unique_ptr<GcsClient>> Connect(
      const GcsClientOptions& options, absl::Duration connect_timeout = absl::Seconds(5));
  // A client on a connection of its own, made on its first call, without Connect's check: for
  // a caller that already knows the address works and replaces a connection that a lost
  // packet holds up (a node's heartbeats). The address must be host:port.
  static std::unique_ptr<GcsClient> Open(const GcsClientOptions& options);

  virtual ~GcsClient() = default;
  GcsClient(const GcsClient&) = delete;
  GcsClient& operator=(const GcsClient&) = delete;

  virtual const std::string& address() const = 0;

  virtual absl::StatusOr<rpc::GetClusterInfoReply> GetClusterInfo() = 0;
  // A certificate for this machine's key from the cluster's CA (TLS clusters): its PEM chain
  // (the machine's certificate, then the CA's). `names`: the machine's IPs and host name.
  virtual absl::StatusOr<std::string> IssueCertificate(const std::string& public_key_pem,
                                                       const std::vector<std::string>& names) = 0;

  // `held`: the placement-group bundles the node holds; the GCS cancels those it does not hold
  // on that node.
  virtual absl::StatusOr<rpc::RegisterNodeReply> RegisterNode(
      const rpc::NodeInfo& node, const std::vector<rpc::HeldBundle>& held) = 0;
  virtual absl::StatusOr<rpc::HeartbeatReply> Heartbeat(const rpc::HeartbeatRequest& request) = 0;
  virtual absl::Status UnregisterNode(const std::string& node_id, const std::string& reason) = 0;
  virtual absl::StatusOr<std::vector<rpc::NodeInfo>> GetAllNodes(bool alive_only = false) = 0;

  // Returns whether the key was added (false: it existed; kept unless overwrite).
  virtual absl::StatusOr<bool> KvPut(const std::string& ns, const std::string& key,
                                     const std::string& value, bool overwrite = true) = 0;
  // nullopt when the key does not exist.
  virtual absl::StatusOr<std::optional<std::string>> KvGet(const std::string& ns,
                                                           const std::string& key) = 0;
  virtual absl::StatusOr<int> KvDelete(const std::string& ns, const std::string& key,
                                       bool by_prefix = false) = 0;
  virtual absl::StatusOr<std::vector<rpc::KvEntry>> KvList(const std::string& ns,
                                                           const std::string& prefix = "") = 0;

  // Creates an actor (validated, stored PENDING, scheduled); returns its record.
  virtual absl::StatusOr<rpc::ActorInfo> CreateActor(const rpc::ActorInfo& spec) = 0;
  virtual absl::StatusOr<rpc::ReportActorStateReply> ReportActorState(
      const rpc::ReportActorStateRequest& report) = 0;
  // Kills an actor; with no_restart = false it restarts as its max_restarts allows.
  virtual absl::Status KillActor(const std::string& actor_id, bool no_restart) = 0;
  // Renews the liveness lease of `attempt` of an actor for `timeout`, or `running_timeout`
  // while its process is seen able to run (see RenewActorLease in gcs.proto). Returns true
  // when that attempt was replaced: the caller must exit.
  virtual absl::StatusOr<bool> RenewActorLease(
      const std::string& actor_id, int attempt, absl::Duration timeout,
      absl::Duration running_timeout = absl::ZeroDuration()) = 0;
  // Lends or takes back an actor's CPU (gcs.proto's LendActorResources; attempt -1: the
  // current one). Returns whether the actor holds its CPU afterwards.
  virtual absl::StatusOr<bool> LendActorResources(const std::string& /*actor_id*/, int /*attempt*/,
                                                  rpc::LendActorResourcesRequest::Action /*action*/,
                                                  absl::Duration /*timeout*/) {
    return absl::UnimplementedError("LendActorResources");
  }
  // Renews this driver's lease (gcs.proto's RenewDriverLease); returns how often to renew.
  virtual absl::StatusOr<absl::Duration> RenewDriverLease(
      const rpc::RenewDriverLeaseRequest& /*request*/) {
    return absl::UnimplementedError("RenewDriverLease");
  }
  // Writes an actor record as given (tools and tests; not the lifecycle).
  virtual absl::Status UpdateActor(const rpc::ActorInfo& actor) = 0;
  // By id; NotFound names the actor.
  virtual absl::StatusOr<rpc::ActorInfo> GetActor(const std::string& actor_id) = 0;
  virtual absl::StatusOr<rpc::ActorInfo> GetNamedActor(const std::string& name,
                                                       const std::string& ns = "") = 0;
  virtual absl::StatusOr<std::vector<rpc::ActorInfo>> ListActors(
      const std::string& job_id = "") = 0;

  virtual absl::Status UpdateJob(const rpc::JobInfo& job) = 0;
  virtual absl::StatusOr<rpc::JobInfo> GetJob(const std::string& job_id) = 0;
  virtual absl::StatusOr<std::vector<rpc::JobInfo>> ListJobs() = 0;
  // Job submission (the job manager on the head; see gcs/job_manager.h).
  // Streams a working dir to the head: `next` fills in the next chunk (UploadChunk) and
  // returns true, false at the end, or an error, which cancels the upload and is returned.
  // The reply's upload_id goes into SubmitJobRequest.upload_id. Not retried: a cut stream
  // fails, and the caller uploads again.
  virtual absl::StatusOr<rpc::UploadWorkingDirReply> UploadWorkingDir(
      const std::function<absl::StatusOr<bool>(rpc::UploadChunk*)>& next) = 0;
  virtual absl::StatusOr<rpc::JobInfo> SubmitJob(const rpc::SubmitJobRequest& request) = 0;
  virtual absl::StatusOr<rpc::JobInfo> StopJob(const std::string& job_id, double grace_s) = 0;
  // A running job's new size (elastic training jobs): `replicas`, or without `ranks`.
  virtual absl::StatusOr<rpc::JobInfo> ScaleJob(const rpc::ScaleJobRequest& request) = 0;
  absl::StatusOr<rpc::JobInfo> ScaleJob(const std::string& job_id, int replicas,
                                        const std::vector<int>& ranks) {
    rpc::ScaleJobRequest request;
    request.set_job_id(job_id);
    request.set_replicas(replicas);
    for (int r : ranks) request.add_ranks(r);
    return ScaleJob(request);
  }
  virtual absl::Status ReportJob(const rpc::ReportJobRequest& report) = 0;
  // Calls `on_chunk` with the job's log from `offset` (with `follow`: until the job ended).
  // A GCS restart in the middle resumes where it stopped. `on_chunk` returning false stops.
  virtual absl::Status JobLogs(const std::string& job_id, int64_t offset, bool follow,
                               const std::function<bool(const rpc::JobLogsChunk&)>& on_chunk) = 0;
  // Appends a job's workers' output to its log (an elastic job's; JobLogs reads it).
  virtual absl::Status AppendJobLog(const std::string& job_id, const std::string& data) = 0;

  // Creates a placement group (validated, stored PENDING, reserved on its nodes in one round).
  // With `wait_ready` > 0, the same call then waits for it as WaitPlacementGroupReady does
  // and returns its record then (CREATED, or still PENDING when the wait ran out).
  virtual absl::StatusOr<rpc::PlacementGroupInfo> CreatePlacementGroup(
      const rpc::PlacementGroupInfo& spec, absl::Duration wait_ready = absl::ZeroDuration()) = 0;
  virtual absl::Status RemovePlacementGroup(const std::string& pg_id) = 0;
  // Kills the actors in one bundle and gives its resources back to its node for good.
  virtual absl::Status ReleasePlacementGroupBundle(const std::string& pg_id, int bundle_index) = 0;
  virtual absl::StatusOr<rpc::PlacementGroupInfo> GetPlacementGroup(const std::string& pg_id) = 0;
  // Waits up to `timeout` for the group to be CREATED; returns its record either way.
  virtual absl::StatusOr<rpc::PlacementGroupInfo> WaitPlacementGroupReady(
      const std::string& pg_id, absl::Duration timeout) = 0;
  virtual absl::StatusOr<std::vector<rpc::PlacementGroupInfo>> ListPlacementGroups() = 0;

  // Publishes what the node's workers printed (channel LOGS).
  virtual absl::Status PublishLogs(const rpc::PublishLogsRequest& request) = 0;

  // Streams every change of `channels` to `on_message`, on a thread of the subscription's
  // own, in order. The stream reconnects by itself after a GCS restart or a network break,
  // resuming from the last sequence number seen: missed messages are replayed, or (after a
  // restart, or a gap too old to replay) a snapshot of the channel's table arrives as
  // messages with snapshot = true followed by one with snapshot_done = true.
  virtual std::unique_ptr<Subscription> Subscribe(std::vector<rpc::Channel> channels,
                                                  MessageCallback on_message) = 0;
  // The same, for only the messages whose key is one of `keys` (the GCS leaves out the rest).
  virtual std::unique_ptr<Subscription> SubscribeKeys(std::vector<rpc::Channel> channels,
                                                      std::vector<std::string> keys,
                                                      MessageCallback on_message) = 0;

 protected:
  GcsClient() = default;
};

}  // namespace phalanx::gcs
