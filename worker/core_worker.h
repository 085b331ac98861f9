// CoreWorker: the Phalanx runtime inside one process (a driver, or a worker whose actor calls
// other actors): the GCS connection, one subscription to actor state changes, and one
// ActorClient per actor this process calls. Created by Init, gone after Shutdown.
// Thread-safe.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "client/gcs_client.h"
#include "worker/actor_client.h"

namespace phalanx::worker {

class DriverLease;

struct CoreWorkerOptions {
  std::string address;  // GCS host:port
  std::string token;
  std::string job_id;      // empty: a new one
  std::string namespace_;  // actors' namespace for names
  std::string code_path;   // what workers of this process's actors run; empty: this binary
  bool is_driver = false;  // a driver kills the actors it created (unless detached) at Shutdown
  // A driver prints what its job's workers print (Ray's log_to_driver), on its stderr, each
  // line after "(Class pid=N)" ("(pid=N)" for a task; ", ip=" added for another host's).
  bool log_to_driver = false;
};

class CoreWorker {
 public:
  // Connects to the GCS (checks address and token). Returns AlreadyExists if initialized.
  static absl::Status Init(const CoreWorkerOptions& options);
  // The process's CoreWorker, or nullptr before Init / after Shutdown.
  static CoreWorker* Get();
  static void Shutdown();

  gcs::GcsClient& gcs() { return *gcs_; }
  CoreWorkerOptions options() const;
  // A prestarted worker learns its job late: actors it creates belong to `job_id`.
  void Adopt(const std::string& job_id, const std::string& ns, const std::string& code_path);

  // Creates an actor (job, namespace and code path filled in when empty) and returns its
  // record; its ActorClient is ready for calls at once (they wait until it is ALIVE).
  absl::StatusOr<rpc::ActorInfo> CreateActor(rpc::ActorInfo spec);
  // The client of a known actor; NotFound names the id.
  absl::StatusOr<std::shared_ptr<ActorClient>> Client(const std::string& actor_id);
  absl::StatusOr<std::shared_ptr<ActorClient>> NamedClient(const std::string& name,
                                                           const std::string& ns);
  absl::Status Kill(const std::string& actor_id, bool no_restart);
  // Cancels the actor call of this process whose result is `result`, whichever actor it went
  // to (ActorClient::Cancel); false when none of its clients has it unanswered.
  bool CancelCall(const std::shared_ptr<ObjectState>& result);
  // A client of `actor_id` on a connection of its own, as a caller of its own: not the
  // shared one (which may wait in TCP retransmission after a network outage), not kept, and
  // not told of the actor's changes. Close it when done.
  absl::StatusOr<std::shared_ptr<ActorClient>> FreshClient(const std::string& actor_id);

 private:
  explicit CoreWorker(CoreWorkerOptions options, std::unique_ptr<gcs::GcsClient> gcs);
  void OnActorMessage(const rpc::PubMessage& message);
  void PrintLogs(const rpc::PubMessage& message);
  std::shared_ptr<ActorClient> AddClient(const rpc::ActorInfo& info);
  // Follows the actor table's changes from now on (once; not after Stop).
  void Subscribe();
  void Stop();

  CoreWorkerOptions options_ ABSL_GUARDED_BY(mu_);
  const std::string caller_id_;
  std::unique_ptr<gcs::GcsClient> gcs_;
  // Started by the first actor client (Subscribe), stopped by Stop.
  absl::Mutex subscribe_mu_;
  std::unique_ptr<gcs::GcsClient::Subscription> subscription_ ABSL_GUARDED_BY(subscribe_mu_);
  bool stopped_ ABSL_GUARDED_BY(subscribe_mu_) = false;
  // The LOGS channel, for a driver with log_to_driver (set by Init, ended by Stop).
  std::unique_ptr<gcs::GcsClient::Subscription> logs_ ABSL_GUARDED_BY(subscribe_mu_);

  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<ActorClient>> clients_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, rpc::ActorInfo> latest_ ABSL_GUARDED_BY(mu_);  // from the subscription
  std::vector<std::string> owned_ ABSL_GUARDED_BY(mu_);                // created here, not detached
  // A driver's lease in the GCS: what it made goes with it however it ends (set by Init).
  std::unique_ptr<DriverLease> driver_lease_;
};

// The bound on each LendActorResources call a waiting task worker makes: a GCS that does not
// answer in time leaves the CPU as it was, and the wait goes on.
inline constexpr absl::Duration kLendCallTimeout = absl::Seconds(2);

// While a task worker's task waits for values (a get or wait that blocks), its CPU is lent
// back to the cluster (gcs.proto's LendActorResources), as Ray's raylet takes a blocked
// worker's CPU: the tasks it waits for may need that CPU, so a tree of tasks deeper than the
// cluster's CPUs does not deadlock. It is taken back when the wait ends (the task runs on at
// once, even before the GCS has a CPU free for it). Scopes nest and may overlap across threads:
// the first lends, the last takes back. Outside a task worker it does nothing.
class BlockedScope {
 public:
  BlockedScope();
  ~BlockedScope();
  BlockedScope(const BlockedScope&) = delete;
  BlockedScope& operator=(const BlockedScope&) = delete;

 private:
  bool counted_ = false;
};

}  // namespace phalanx::worker
