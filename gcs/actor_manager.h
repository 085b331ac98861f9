// GcsActorManager: the actor table and every actor's life.
//
//   PENDING ──► CREATING ──► ALIVE ──► RESTARTING ──► CREATING …
//      │            │          │            │
//      └────────────┴──────────┴────────────┴──► DEAD (death cause)
//
// Create() validates a request and stores it PENDING; the scheduler picks a node (placement
// policies, exact resource accounting) and asks that node manager to start a worker (state
// CREATING). The node reports ALIVE once the constructor ran, and DEAD with a cause when the
// worker ends. A death restarts the actor while max_restarts allows (Ray's semantics:
// RESTARTING, rescheduled, possibly elsewhere); otherwise the actor is DEAD with the cause.
// A node's death is the death of every actor on it (NODE_DIED). Everything is in the actor
// table, so a restarted GCS resumes where the last one stopped. Thread-safe.
#pragma once

#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/proto/gcs.pb.h"
#include "base/timer.h"
#include "gcs/node_client_pool.h"
#include "gcs/node_manager.h"
#include "gcs/publisher.h"
#include "gcs/table.h"
#include "placement/resource_scheduler.h"

namespace phalanx::gcs {

class GcsActorManager {
 public:
  GcsActorManager(Store* store, GcsPublisher* publisher, GcsNodeManager* nodes,
                  NodeClientPool* node_clients, placement::ResourceScheduler* scheduler);

  // Checks that an actor's placement group exists and that its bundle index is in range
  // (set by the GCS server; the placement-group manager answers).
  void SetPlacementGroupCheck(std::function<absl::Status(const std::string& pg_id, int bundle_index,
                                                         const Resources& request)>
                                  check);
  ~GcsActorManager();

  // Loads the actor table and resumes: re-allocates the resources of placed actors, asks
  // nodes again to start CREATING ones, reschedules the rest. Call after the nodes and the
  // placement groups are in the scheduler.
  absl::Status Load();

  // Validates and stores a new actor (PENDING), then schedules it. Errors name the field:
  // bad resources, unknown strategy, a name in use, or a request no node can ever hold.
  absl::StatusOr<rpc::ActorInfo> Create(rpc::ActorInfo spec);

  // A node's report on one attempt of an actor. Sets *stale when the GCS no longer wants that
  // worker (the node then stops it).
  absl::Status ReportState(const rpc::ReportActorStateRequest& report, bool* stale);

  // Kills an actor. no_restart = false lets it restart as its max_restarts allows.
  absl::Status Kill(const std::string& actor_id, bool no_restart);

  std::optional<rpc::ActorInfo> Get(const std::string& actor_id) const;
  std::optional<rpc::ActorInfo> GetByName(const std::string& name, const std::string& ns) const;
  std::vector<rpc::ActorInfo> List(const std::string& job_id) const;
  // How many actors are in each (state, class), without copying them (for /metrics).
  std::map<std::pair<rpc::ActorState, std::string>, int> CountByStateAndClass() const;
  // Writes a record as given (tools and tests).
  absl::Status Put(const rpc::ActorInfo& actor);

  // Node events (the GCS server forwards GcsNodeManager's; it updates the scheduler first).
  // OnNodesDead takes every node declared dead together: their actors die (NODE_DIED) in
  // create-time order, and those that restart are placed in one pass over the survivors.
  void OnNodeRegistered(const rpc::NodeInfo& node);
  void OnNodesDead(const std::vector<rpc::NodeInfo>& nodes);

  // Called (outside any lock) after actors gave resources back, so that waiting placement
  // groups can be tried again.
  void SetResourcesFreedCallback(std::function<void()> callback);
  // Called (outside any lock) with the record of each actor that died for good.
  void SetDeathCallback(std::function<void(const rpc::ActorInfo&)> callback);

  // Tries the pending actors again (resources were freed, or bundles reserved).
  void ScheduleNow();

  // Kills every actor of a placement group for good (the group was removed), or only those
  // in bundle `bundle_index` (placed there, or waiting for it; the bundle was released).
  void KillGroup(const std::string& pg_id, int bundle_index = -1);

  // Kills, for good, every non-detached actor created by `owner_id` (an owner_address) that
  // is not dead: its driver is gone (cause OWNER_DIED, saying `why`). How many.
  int KillOwnedBy(const std::string& owner_id, const std::string& why);

  // Lends or takes back an actor's CPU (gcs.proto's LendActorResources: a task worker blocked
  // in get, or kept idle by its pool). Returns whether the actor holds its CPU afterwards.
  // An actor that is not ALIVE, or an attempt that is not its current one, is left as it is
  // (answered held: it has nothing to lend). NotFound for an unknown actor.
  absl::StatusOr<bool> Lend(const std::string& actor_id, int attempt,
                            rpc::LendActorResourcesRequest::Action action);

  // Liveness leases (an elastic controller holds one). RenewLease arms or re-arms the lease of
  // an actor's attempt for `timeout`; *stale is set when that attempt is no longer the actor's
  // current one (it was replaced: the caller must exit). ExpireLeases, called by the health
  // checker, kills every attempt whose lease ran out (cause LEASE_EXPIRED), and the actor
  // restarts as its max_restarts allows; a lease whose actor's node is silent too waits for
  // the node to be heard again or declared dead (a partition is not the actor's fault). With
  // a `running_timeout` longer than `timeout`, a lease past `timeout` ends when the actor's
  // node's latest heartbeat lists its process among those that cannot run (stopped, exited);
  // one that can run is slow (a busy machine) or deadlocked, and is killed once unrenewed for
  // `running_timeout`. Leases live in memory: after a GCS restart a lease exists again at the
  // attempt's next renewal.
  absl::Status RenewLease(const std::string& actor_id, int attempt, absl::Duration timeout,
                          absl::Duration running_timeout, bool* stale);
  void ExpireLeases();
  // The GCS itself was stalled for `how_long`: renewals of that time may still be queued, so
  // every lease deadline moves by it (the actors are not to blame).
  void LeasesStalled(absl::Duration how_long);

 private:
  // Whether a node that may hold `request` is listed ALIVE but not yet in the scheduler (its
  // registration's listeners still to run): the node `request` is pinned to, or any node.
  bool NodeJoiningFor(const placement::ActorRequest& request) const;

  struct Dispatch {
    std::string node_address;
    rpc::StartActorRequest start;
  };
  struct Effects {
    std::vector<Dispatch> starts;
    std::vector<std::pair<std::string, rpc::KillActorRequest>> kills;  // address, request
    std::vector<std::string> availability_changed;                     // node ids
    bool freed = false;                                                // resources were given back
    std::vector<rpc::ActorInfo> dead;                                  // died for good
    // Actors whose process died (each death, restarted or not): what they own dies too.
    std::vector<std::string> owners_gone;
    std::vector<PendingWrite> writes;  // the records changed, in order: persisted before acting
  };

  // Writes `actor`'s record; it is published once persisted, and Apply waits for it.
  void SaveLocked(const rpc::ActorInfo& actor, Effects* effects) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Places as many pending actors as fit, in FIFO order.
  void ScheduleLocked(Effects* effects) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The worker of `actor`'s current attempt is gone with `cause`: restart or bury it.
  void HandleDeathLocked(rpc::ActorInfo actor, rpc::DeathCause cause, Effects* effects)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Kills `actor_id` with `cause` (KILLED_BY_USER, OWNER_DIED), for good with no_restart.
  absl::Status KillWithCause(const std::string& actor_id, bool no_restart, rpc::DeathCause cause);
  void ReleaseLocked(const rpc::ActorInfo& actor, Effects* effects)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes a placed actor's resources again (Load); one that no longer fits only because the
  // previous GCS lent CPUs takes the rest and owes its CPU (lent_). False: it cannot be held.
  bool AllocateOnLoadLocked(const rpc::ActorInfo& actor) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes back the CPU of lent actors that resumed (RECLAIM while none was free): first in
  // line for every freed CPU, before pending actors are placed.
  void RepayLocked(Effects* effects) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Outside the lock: waits until the changed records are persisted, then sends starts and
  // kills and publishes node availability. Returns the first write's error: the transition
  // is carried out anyway (the process it describes started or died already) and its record
  // is written again with its next change.
  absl::Status Apply(Effects effects);
  void SendStart(Dispatch dispatch);

  GcsPublisher* const publisher_;
  GcsNodeManager* const nodes_;
  NodeClientPool* const node_clients_;
  placement::ResourceScheduler* const scheduler_;
  std::function<absl::Status(const std::string&, int, const Resources&)> pg_check_;
  std::function<void()> on_freed_;
  std::function<void(const rpc::ActorInfo&)> on_dead_;

  mutable absl::Mutex mu_;
  Table<rpc::ActorInfo> actors_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> pending_ ABSL_GUARDED_BY(mu_);  // actor ids, FIFO
  // Actors whose CPU is lent (Lend), by id: in memory only, so a restarted GCS counts every
  // placed actor's resources as held again (its workers' next RECLAIM is then a no-op), as
  // far as they fit; the rest are owed (AllocateOnLoadLocked).
  struct Lent {
    Resources cpu;      // what was given back
    bool owed = false;  // its worker resumed and wants it back (RECLAIM): RepayLocked
  };
  std::map<std::string, Lent> lent_ ABSL_GUARDED_BY(mu_);
  struct Lease {
    int attempt = 0;
    absl::Duration timeout;
    absl::Duration running_timeout;  // 0: the timeout alone, whatever the process's state
    absl::Time renewed;
    absl::Time deadline;        // renewed + timeout (moved on while its node is silent)
    bool told_running = false;  // logged, once per overdue spell, that its process can run
  };
  // Kills `id`'s attempt `lease.attempt` for its lease (LEASE_EXPIRED, saying `why`).
  void ExpireLocked(const std::string& id, const Lease& lease, const std::string& why,
                    Effects* effects) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::flat_hash_map<std::string, Lease> leases_ ABSL_GUARDED_BY(mu_);  // by actor id
  // Actors whose process ended before they were created wait this long before the next try
  // (kCreationRetryBackoff, doubling): a program that exits at once is not restarted in a
  // tight loop. By actor id; pending actors are placed once their time is up.
  absl::flat_hash_map<std::string, absl::Time> not_before_ ABSL_GUARDED_BY(mu_);
  // Last: destroyed first, so that no timer runs on a half-destroyed manager.
  TimerQueue timers_;
};

// Checks an actor request's fields; the error names the field and the fix.
absl::Status ValidateActorSpec(const rpc::ActorInfo& spec);

}  // namespace phalanx::gcs
