// GcsPlacementGroupManager: placement groups (Ray's semantics): sets of resource bundles
// reserved all-or-nothing across nodes.
//
//   PENDING ──► CREATED ──(a node with bundles dies)──► RESCHEDULING ──► CREATED
//      └──────────────┴──────────────────────────────────────┴──► REMOVED
//
// Placing a group: the scheduler plans nodes for its bundles and reserves them in the GCS's
// view; then every node involved is asked, in one round, to reserve its bundles. When all did,
// the group is CREATED; if any refused or did not answer, every node of the round is told to
// cancel, the reservations go back, and the group waits to be tried again. One round is safe
// because nothing is placed in a bundle before its group is CREATED (Ray's prepare phase
// exists for raylets that use a bundle on their own); what a crash leaves held on a node is
// cancelled when the node registers again (ReconcileNode), and a cancel the node did not
// answer is sent again. A node's death sends the bundles that lived there (only those) back
// to be placed, ahead of groups still pending.
// Removing a group kills its actors and frees everything; releasing one bundle does the same
// for that bundle alone. Thread-safe.
#pragma once

#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/proto/gcs.pb.h"
#include "base/timer.h"
#include "gcs/actor_manager.h"
#include "gcs/node_client_pool.h"
#include "gcs/node_manager.h"
#include "gcs/publisher.h"
#include "gcs/table.h"
#include "placement/resource_scheduler.h"

namespace phalanx::gcs {

class GcsPlacementGroupManager {
 public:
  // A group whose round was rolled back is tried again after this.
  static constexpr absl::Duration kRetryAfterRollback = absl::Milliseconds(300);
  // A cancel that a node did not answer (within the node client's timeout) is sent again after
  // this, at most kCancelAttempts times in all; after that, the bundle is cancelled when the
  // node registers again.
  static constexpr absl::Duration kCancelRetryDelay = absl::Seconds(1);
  static constexpr int kCancelAttempts = 5;

  GcsPlacementGroupManager(Store* store, GcsPublisher* publisher, GcsNodeManager* nodes,
                           NodeClientPool* node_clients, placement::ResourceScheduler* scheduler,
                           GcsActorManager* actors);

  // Loads the table; CREATED groups get their bundles back in the scheduler (call before the
  // actor manager loads, so that actors find their bundles), the rest are placed again.
  absl::Status Load();

  absl::StatusOr<rpc::PlacementGroupInfo> Create(rpc::PlacementGroupInfo spec);
  absl::Status Remove(const std::string& pg_id);
  // Removes every placement group of job `job_id` (its driver is gone); how many.
  int RemoveJob(const std::string& job_id);
  // Kills the actors in bundle `index` and gives its resources back to its node; the bundle
  // is marked released and never placed again. Releasing a released bundle is a no-op.
  absl::Status ReleaseBundle(const std::string& pg_id, int index);
  std::optional<rpc::PlacementGroupInfo> Get(const std::string& pg_id) const;
  std::optional<rpc::PlacementGroupInfo> GetByName(const std::string& name) const;
  std::vector<rpc::PlacementGroupInfo> List() const;
  // Waits until the group is CREATED (or REMOVED) or `timeout` passes; returns its record.
  absl::StatusOr<rpc::PlacementGroupInfo> WaitReady(const std::string& pg_id,
                                                    absl::Duration timeout);

  // For actors created into a group: the group exists and is not removed, the bundle index
  // is in range, and the request fits the bundle (any bundle, for index -1).
  absl::Status CheckActorBundle(const std::string& pg_id, int bundle_index,
                                const Resources& request) const;

  // A node (re-)registered holding `held`: each bundle the scheduler does not hold on that node
  // (left by a round that a GCS crash cut short) is cancelled there.
  void ReconcileNode(const std::string& node_id, const std::string& address,
                     const std::vector<rpc::HeldBundle>& held);

  // Bundles whose node died (from the scheduler): placed again first.
  void OnBundlesLost(const std::vector<std::pair<std::string, int>>& lost);
  // Resources appeared (a node joined, something was freed): try the waiting groups.
  void ScheduleNow();

 private:
  // Writes `pg`'s record; it is published once persisted.
  void SaveLocked(const rpc::PlacementGroupInfo& pg) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The last write of group `pg_id`'s record, to wait for outside the lock (OK when none).
  PendingWrite LastWriteLocked(const std::string& pg_id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ScheduleLocked(std::vector<std::pair<rpc::PlacementGroupInfo, std::vector<int>>>* starts)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Asks the nodes to reserve `indices` of `pg` (already reserved in the scheduler), one round.
  void ReserveRound(rpc::PlacementGroupInfo pg, std::vector<int> indices);
  // `nodes` and `addresses`: where each of `indices` was asked (an address is empty where the
  // node was gone); a round that failed is cancelled there.
  void FinishRound(const std::string& pg_id, int64_t round, const std::vector<int>& indices,
                   absl::Status outcome, const std::vector<std::string>& nodes,
                   const std::vector<std::string>& addresses);
  // Tells the node at `address` to give bundle `index` of `pg_id` back. One the node does not
  // answer is sent again kCancelRetryDelay later, at most kCancelAttempts times in all, unless
  // the bundle is reserved on that node again meanwhile. A caller that could race a new round
  // for the same bundle holds mu_, so that the cancel is queued before that round's reserve.
  void SendCancel(const std::string& pg_id, int index, const std::string& node_id,
                  const std::string& address, int attempt);
  // The group `pg_id`, once it is known to exist, not to be removed, and to have a bundle
  // `index` (or `index` is -1, any bundle, and `any_ok`); else NotFound, FailedPrecondition
  // or InvalidArgument. Each message starts with `who` ("actor: ", or empty) and, for a
  // removed group, ends with `fix_if_removed`.
  absl::StatusOr<const rpc::PlacementGroupInfo*> FindBundleLocked(
      const std::string& pg_id, int index, bool any_ok, absl::string_view who,
      absl::string_view fix_if_removed) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string AddressOf(const std::string& node_id) const;
  void Run(std::vector<std::pair<rpc::PlacementGroupInfo, std::vector<int>>> starts);

  GcsPublisher* const publisher_;
  GcsNodeManager* const nodes_;
  NodeClientPool* const node_clients_;
  placement::ResourceScheduler* const scheduler_;
  GcsActorManager* const actors_;
  TimerQueue timers_;

  mutable absl::Mutex mu_;
  Table<rpc::PlacementGroupInfo> groups_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, PendingWrite> last_write_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> queue_ ABSL_GUARDED_BY(mu_);  // waiting to be placed, FIFO
  // Groups whose reservation round is in flight → its round number (stale replies lose).
  std::map<std::string, int64_t> reserving_ ABSL_GUARDED_BY(mu_);
  int64_t next_round_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace phalanx::gcs
