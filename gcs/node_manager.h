// GcsNodeManager: the node table. Nodes register with their resources and heartbeat; a node
// whose heartbeats stop for `node_timeout` is declared DEAD (and published), and the
// listeners (the actor manager, placement) hear of it. A node silent for `knock_after` has
// its node manager's port knocked on: when its host answers that nothing listens there any
// more, its node manager is gone and the node is declared dead at once, not at the timeout
// (a cut-off host, or a stopped node manager whose kernel still accepts, is left to the
// timeout). Silence alone declares nodes dead only while they are at most half the votes (the
// alive nodes, plus this GCS when no node is the head; the head's own silence is never a
// partition's): when more are silent at once, this GCS is more likely the one cut off, and they
// get `partition_timeout` more (their node managers keep their workers as long as a
// majority of the cluster, cut off together, vouches for them: node/node_manager.h).
// After a GCS restart every node loaded as ALIVE gets `restart_grace` to heartbeat
// again before it is declared dead. Thread-safe.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/proto/gcs.pb.h"
#include "gcs/publisher.h"
#include "gcs/table.h"

namespace phalanx::gcs {

class GcsNodeManager {
 public:
  struct Options {
    absl::Duration node_timeout = absl::Seconds(3);
    absl::Duration restart_grace = absl::Seconds(10);
    // How long a node is silent before its port is knocked on (and again, while it stays
    // silent, at this interval); 0: never. The GCS uses a quarter of node_timeout.
    absl::Duration knock_after = absl::ZeroDuration();
    // How long a knock waits for the handshake of a node's host.
    absl::Duration knock_timeout = absl::Milliseconds(200);
    // How much longer than node_timeout nodes that are most of the alive ones get when they
    // fall silent together (see above). The nodes are told it at registration.
    absl::Duration partition_timeout = absl::Seconds(60);
  };

  GcsNodeManager(Store* store, GcsPublisher* publisher, Options options);

  // Loads the node table; live nodes get the restart grace period.
  absl::Status Load();

  // Registers (or re-registers, after a GCS restart) a node. A node id that was declared
  // dead cannot come back: FailedPrecondition tells its node manager to start afresh.
  absl::Status Register(rpc::NodeInfo node);

  // Records a heartbeat. Sets *unknown / *declared_dead for the reply.
  // Fills reply's members when the request's members_version is stale.
  absl::Status Heartbeat(const rpc::HeartbeatRequest& request, bool* unknown, bool* declared_dead,
                         rpc::HeartbeatReply* reply = nullptr);

  // Marks the node DEAD with `reason` (no-op if already dead or unknown). Returns once the
  // record is persisted and the dead listeners ran; the error is the write's (the node is
  // dead in memory and to the listeners all the same).
  absl::Status MarkDead(const std::string& node_id, const std::string& reason);

  std::vector<rpc::NodeInfo> GetAll(bool alive_only) const;
  absl::Duration partition_timeout() const { return options_.partition_timeout; }
  // How long since this GCS last heard the node (zero for an unknown or dead node, and for a
  // node loaded at a restart that has not heartbeat yet).
  absl::Duration SilentFor(const std::string& node_id) const;
  // The state letter of attempt `attempt` of `actor_id`'s process as `node_id`'s latest
  // heartbeat listed it among those that cannot run ("T", "t", "Z"); "" when not listed;
  // nullopt when the node's heartbeats do not say which of its workers cannot run.
  std::optional<std::string> StoppedState(const std::string& node_id, const std::string& actor_id,
                                          int attempt) const;
  std::optional<rpc::NodeInfo> Get(const std::string& node_id) const;

  // Declares dead every node whose heartbeat deadline passed, all at once: their writes go
  // out together and the dead listeners hear of them in one call; when they are more than
  // half the alive nodes, only those silent past the partition timeout too. Called by the
  // health checker.
  void CheckHeartbeats();

  // Knocks on the node manager port of each node silent for knock_after, all at once (a TCP
  // handshake, nothing sent; it blocks up to knock_timeout), and declares dead those whose
  // host refused it. Called by the GCS's knock loop; a no-op when knock_after is 0.
  void KnockOnSilentNodes();

  // This process was stalled for `how_long` (starved of CPU, stopped, swapped out): the
  // heartbeats of that time may still wait in its queue, and the stall is not the nodes'
  // fault, so every deadline moves by it. Called by the health checker when it ran late.
  void Stalled(absl::Duration how_long);

  // Called (outside any lock) after nodes are declared dead, with every node declared dead
  // together (one, or all those a heartbeat check found expired), oldest registration first.
  void AddDeadListener(std::function<void(const std::vector<rpc::NodeInfo>&)> listener);
  // Called (outside any lock) after every registration, first or repeated (a node
  // re-registers after a GCS restart).
  void AddRegisteredListener(std::function<void(const rpc::NodeInfo&)> listener);

  // Updates a node's available resources (from the scheduler); publishes the node and a
  // RESOURCES_CHANGED event when they changed. Availability is derived from the actor and
  // placement-group tables, which a restarted GCS loads and computes it from again, so it
  // is kept in memory and published at once, not written to the store: a write of each node
  // a placement or a release touches outnumbered the writes of the groups and actors
  // themselves (four against three for a group created and removed). When a
  // write of the node's record is still in flight, the change goes out with a write of its
  // own instead, so that it is never published before the state that write carries.
  absl::Status UpdateAvailable(const std::string& node_id, const rpc::ResourceSet& available);

 private:
  // How many votes a majority is counted out of: the alive nodes, and this GCS itself when
  // none of them is the head (whose node manager shares its host and stands for it).
  size_t VotersLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes `node`'s record; once persisted, it is published on the NODE channel and as a
  // `kind` event on the RESOURCES channel.
  PendingWrite SaveLocked(const rpc::NodeInfo& node, rpc::ResourceEvent::Kind kind)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `node` on the NODE channel and as a `kind` event on the RESOURCES channel.
  void PublishLocked(const rpc::NodeInfo& node, rpc::ResourceEvent::Kind kind)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  PendingWrite MarkDeadLocked(const std::string& node_id, const std::string& reason,
                              rpc::NodeInfo* dead) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Marks each of `node_ids` DEAD with `reason`, waits for all their writes, then tells the
  // dead listeners of those that were alive, in one call. Returns the first write's error.
  absl::Status MarkAllDead(const std::vector<std::string>& node_ids, const std::string& reason);

  GcsPublisher* const publisher_;
  const Options options_;
  mutable absl::Mutex mu_;
  Table<rpc::NodeInfo> nodes_ ABSL_GUARDED_BY(mu_);
  // In memory only: a heartbeat is not worth a Redis write.
  absl::flat_hash_map<std::string, absl::Time> deadline_ ABSL_GUARDED_BY(mu_);
  // When this GCS last heard each node (registration or heartbeat; none after a restart until
  // the node's next heartbeat): NodeInfo.heartbeat_age_ms.
  absl::flat_hash_map<std::string, absl::Time> heard_ ABSL_GUARDED_BY(mu_);
  // Each node's object store, as its last heartbeat said (NodeInfo.object_store).
  absl::flat_hash_map<std::string, rpc::ObjectStoreUsage> object_stores_ ABSL_GUARDED_BY(mu_);
  // Each reporting node's workers that could not run at its last heartbeat
  // (NodeInfo.stopped_workers); a node is here once a heartbeat of its said.
  absl::flat_hash_map<std::string, std::vector<rpc::StoppedWorker>> stopped_ ABSL_GUARDED_BY(mu_);
  // Bumped whenever the set of alive nodes changes (HeartbeatReply.members_version); starts at
  // the clock, so that a restarted GCS's versions do not repeat its predecessor's.
  int64_t members_version_ ABSL_GUARDED_BY(mu_);
  // Whether the last heartbeat check held back a silent majority (logged once per episode).
  bool holding_majority_ ABSL_GUARDED_BY(mu_) = false;
  // When each silent node was last knocked on.
  absl::flat_hash_map<std::string, absl::Time> knocked_ ABSL_GUARDED_BY(mu_);
  // Each node's latest write of its record (UpdateAvailable publishes without one only once
  // it is done).
  absl::flat_hash_map<std::string, PendingWrite> last_write_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void(const std::vector<rpc::NodeInfo>&)>> dead_listeners_
      ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void(const rpc::NodeInfo&)>> registered_listeners_ ABSL_GUARDED_BY(mu_);
};

}  // namespace phalanx::gcs
