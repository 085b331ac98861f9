// SnapshotWriter: copies a rank's newest state out of its process, off the step's path, so that
// the state outlives the process (node/snapshot_store.h): into the node's shared-memory store,
// then to a peer node's store, so that it outlives the host too.
//
// The trainer host offers each state it comes to hold (a shared pointer, not a copy); one
// thread writes them into the node's store, another sends the newest one kept there to the
// peer. For each, an offer that comes while a copy runs replaces the one waiting, never the one
// running: a snapshot is at most one copy behind, and there are never two copies at once. The
// ranks of a node hold the same state: one of them writes each step, the others find it there
// (a lock file in the job's directory). The peer is the next live node after this one in the order
// of node ids (a ring, so no host holds the only copy of anything while there are two), sent in
// chunks at most at `peer_bytes_per_s`. A state that does not fit is skipped with one warning
// (which says what to do) per run of failures; training goes on either way.
//
// Thread-safe. Nothing here blocks the caller of Offer.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "node/snapshot_store.h"

namespace grpc {
class ClientContext;
}

namespace phalanx::elastic {

struct SnapshotWriterOptions {
  std::string job_id;
  std::string node_id;    // this node's
  std::string store_dir;  // its object store (node::ObjectStoreDir)
  bool peer_copy = true;
  double peer_bytes_per_s = 200e6;
  std::string token;  // the cluster's, for calls to the peer node
};

class SnapshotWriter {
 public:
  explicit SnapshotWriter(SnapshotWriterOptions options);
  ~SnapshotWriter();  // ends the copy under way at its next chunk
  SnapshotWriter(const SnapshotWriter&) = delete;
  SnapshotWriter& operator=(const SnapshotWriter&) = delete;

  // The state of `step` steps, run in collective epoch `epoch`. Returns at once.
  void Offer(std::shared_ptr<const std::string> state, int64_t step, int64_t epoch);
  // The steps past `step` were rolled back (every rank goes back to it): their snapshots in
  // this node's store go, and an offer of one of them that waits is dropped.
  void RolledBack(int64_t step);

 private:
  void Run();      // copies into this node's store
  void PeerRun();  // copies the newest one kept here to the peer
  void CopyToPeer(const std::string& state, int64_t step, int64_t epoch);
  std::string PeerAddress();

  const SnapshotWriterOptions options_;
  mutable absl::Mutex mu_;
  std::shared_ptr<const std::string> next_ ABSL_GUARDED_BY(mu_);
  int64_t next_step_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t next_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t offered_step_ ABSL_GUARDED_BY(mu_) = -1;  // the last offer's
  int64_t offered_epoch_ ABSL_GUARDED_BY(mu_) = -1;
  // The newest state kept in this node's store, for the peer thread (taken when it is free).
  std::shared_ptr<const std::string> kept_ ABSL_GUARDED_BY(mu_);
  int64_t kept_step_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t kept_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool warned_ ABSL_GUARDED_BY(mu_) = false;
  // The peer node's address, looked up again after kPeerLookupPeriod or a failed copy.
  std::string peer_ ABSL_GUARDED_BY(mu_);
  // The copy to the peer under way, cancelled by the destructor (a peer whose host was cut
  // would hold it until its deadline).
  grpc::ClientContext* peer_call_ ABSL_GUARDED_BY(mu_) = nullptr;
  absl::Time peer_looked_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::thread thread_;
  std::thread peer_thread_;
};

// What names a snapshot: its job, step, the epoch the step ran in, and the node it comes from.
struct SnapshotName {
  std::string job_id;
  int64_t step = 0;
  int64_t epoch = 0;
  std::string from_node;
};

// Sends `state` to the store of the node manager at `address` as the peer copy `name`
// (its PutSnapshot), in 1 MiB chunks at most `bytes_per_s` (0: as fast as it goes). `go_on`
// (optional) is called with the call's context before the first chunk and after each, and
// with null at the end; false stops the copy (CANCELLED). ALREADY_EXISTS: the peer holds that
// step already. Bounded by 30 s plus the time the bytes take at the rate.
absl::Status PutSnapshot(const std::string& address, const std::string& token,
                         const SnapshotName& name, absl::string_view state, double bytes_per_s,
                         const std::function<bool(grpc::ClientContext*)>& go_on = nullptr);

// What the node manager at `address` holds of job `job_id` (its ListSnapshots), newest first;
// `path` is empty. Bounded by `timeout`.
absl::StatusOr<std::vector<node::Snapshot>> ListNodeSnapshots(const std::string& address,
                                                              const std::string& token,
                                                              const std::string& job_id,
                                                              absl::Duration timeout);

// The state of job `job_id`'s snapshot of step `step` in the store of the node at `address`
// (its ReadSnapshot); NOT_FOUND when it holds none. Bounded by `timeout`.
absl::StatusOr<std::string> FetchSnapshot(const std::string& address, const std::string& token,
                                          const std::string& job_id, int64_t step,
                                          absl::Duration timeout);

}  // namespace phalanx::elastic
