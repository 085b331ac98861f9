// A training job's snapshots in a node's object store: the newest state of its ranks, kept in
// shared memory so that it outlives their processes (every rank of a node killed at once loses
// nothing), and the copies that ranks of other nodes sent here (a host lost loses nothing).
//
//   <store>/.snapshots/<job id>/step-<step>.e<epoch>.snap                 a rank of this node's
//   <store>/.snapshots/<job id>/step-<step>.e<epoch>.from-<node id>.snap  a peer node's copy
//
// Each file holds "<step>\n<state>", the checkpoint's format (a rank loads either alike). The
// epoch is the collective group's when the step ran: a step that was rolled back and run again
// in a later epoch has a newer copy, which wins. A writer writes a hidden ".tmp-" file in the
// same directory and renames it into place, so a reader sees a whole snapshot or none. The
// newest kSnapshotsKept of a job are kept on each node; the node manager removes a job's
// directory once the job has ended, and counts the snapshots in the store's used bytes.
//
// Functions on files only: thread-safe as the file system is (several processes write one
// job's directory).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace phalanx::node {

inline constexpr char kSnapshotDir[] = ".snapshots";
// Snapshots kept per job and node: the newest step, and the two before it (a rank's newest
// may be a step the controller has not agreed on yet, and a rollback drops it).
inline constexpr int kSnapshotsKept = 3;

struct Snapshot {
  int64_t step = 0;
  int64_t epoch = 0;
  int64_t bytes = 0;      // of the state (the file's size less its header line)
  std::string from_node;  // empty: written by a rank of this node; else the peer it came from
  std::string path;
};

// <store>/.snapshots/<job id>, or "" when `job_id` is not a name.
std::string SnapshotJobDir(const std::string& store_dir, const std::string& job_id);

// The snapshots of `job_id` in the store, the newest first (by step, then epoch; a copy of
// this node's rank before a peer's of the same step). Temporary files are not listed.
std::vector<Snapshot> ListSnapshots(const std::string& store_dir, const std::string& job_id);

// Whether the store holds step `step` of `job_id` run in epoch `epoch` or later (of any origin).
bool HasSnapshot(const std::string& store_dir, const std::string& job_id, int64_t step,
                 int64_t epoch);

// The jobs that have a snapshot directory in the store.
std::vector<std::string> SnapshotJobs(const std::string& store_dir);

// The bytes of every snapshot file in the store (temporary ones included).
int64_t SnapshotBytes(const std::string& store_dir);

// Removes the snapshots of `job_id` that are not among its newest `keep` steps (of a step, the
// newest epoch's copies stay), and those of steps past `rolled_back_past` when it is >= 0 (a
// rollback: those steps will run again).
void PruneSnapshots(const std::string& store_dir, const std::string& job_id, int keep,
                    int64_t rolled_back_past = -1);

// Writes one snapshot into a store, in chunks: Open checks the room (the store's capacity less
// what it holds), Append adds bytes, Commit renames the whole file into place and prunes the
// job's older snapshots. Destroyed before Commit, it removes its temporary file.
// Not thread-safe; one writer per file.
class SnapshotFileWriter {
 public:
  SnapshotFileWriter() = default;
  ~SnapshotFileWriter();
  SnapshotFileWriter(const SnapshotFileWriter&) = delete;
  SnapshotFileWriter& operator=(const SnapshotFileWriter&) = delete;

  // RESOURCE_EXHAUSTED with the sizes and the fix when `total_bytes` does not fit; ALREADY_EXISTS
  // when the store holds that step and epoch already; INVALID_ARGUMENT for a job or node id
  // that is not a name.
  absl::Status Open(const std::string& store_dir, const std::string& job_id, int64_t step,
                    int64_t epoch, const std::string& from_node, int64_t total_bytes);
  absl::Status Append(absl::string_view data);
  // FAILED_PRECONDITION unless exactly total_bytes were appended.
  absl::Status Commit();

 private:
  void Discard();
  std::string store_dir_, job_id_, tmp_, final_;
  int fd_ = -1;
  int64_t total_ = 0, written_ = 0, header_ = 0;
};

// Writes `state` as a snapshot (SnapshotFileWriter, in one go).
absl::Status WriteSnapshot(const std::string& store_dir, const std::string& job_id, int64_t step,
                           int64_t epoch, const std::string& from_node, absl::string_view state);

// Reads snapshot `path`: its step and state. NOT_FOUND when it is gone (pruned meanwhile).
absl::StatusOr<std::pair<int64_t, std::string>> ReadSnapshot(const std::string& path);

// Streams the state of snapshot `path` (without its header line) to `write` in chunks of at
// most `chunk_bytes`, each with the state's whole size. NOT_FOUND when it is gone.
absl::Status StreamSnapshot(
    const std::string& path, int64_t chunk_bytes,
    const std::function<bool(absl::string_view chunk, int64_t size)>& write);

}  // namespace phalanx::node
