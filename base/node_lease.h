// NodeLease: how a node's processes know that the node is still part of the cluster.
//
// The node manager renews the lease each time it has evidence that it is not cut off from
// the GCS (a heartbeat the GCS took, or, while the GCS does not answer, a TCP handshake with
// the GCS's host: a stopped or restarting GCS is not a partition). The GCS declares a node
// dead after `timeout` without heartbeats; a lease older than `timeout` therefore means the
// node may have been declared dead and its actors replaced. Its processes must then stop
// (fencing): the node manager kills its workers, and every worker checks the lease on its own
// too, so a stopped node manager cannot leave workers behind that the cluster gave up on.
//
// The lease is one page in /dev/shm shared by the node manager (writer) and its workers
// (readers); times are CLOCK_MONOTONIC, the same for every process of the machine.
// Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace phalanx {

class NodeLease {
 public:
  // Creates the lease file at `path` (renewed now) for the node manager. The file is removed
  // when the returned object is destroyed.
  static absl::StatusOr<std::unique_ptr<NodeLease>> Create(const std::string& path,
                                                           absl::Duration timeout);
  // Opens an existing lease read-only (a worker).
  static absl::StatusOr<std::unique_ptr<NodeLease>> Open(const std::string& path);

  ~NodeLease();
  NodeLease(const NodeLease&) = delete;
  NodeLease& operator=(const NodeLease&) = delete;

  // The clock the lease is kept in.
  static int64_t NowNs();

  // Records evidence, seen at `seen_ns` (NowNs() when it was sought), that the node is part of
  // the cluster. Never moves the lease backwards.
  void Renew(int64_t seen_ns);
  void SetTimeout(absl::Duration timeout);

  // How long since the last renewal, and whether that is past the timeout.
  absl::Duration Age() const;
  absl::Duration timeout() const;
  bool Expired() const { return Age() > timeout(); }

 private:
  struct Page {
    std::atomic<int64_t> renewed_ns;
    std::atomic<int64_t> timeout_ns;
  };
  NodeLease(Page* page, std::string path_to_remove)
      : page_(page), path_to_remove_(std::move(path_to_remove)) {}

  Page* page_;
  std::string path_to_remove_;  // empty for readers
};

// Whether a TCP handshake with `host_port` completes (or is refused: the host answered) within
// `timeout`. The evidence a node manager uses, while the GCS does not answer its heartbeats,
// that it is not cut off from the GCS's host (a stopped GCS still completes handshakes in
// its kernel; a partitioned host completes none).
bool HostAnswers(const std::string& host_port, absl::Duration timeout);

// Removes the lease pages in `dir` (`phalanx-node-<id>-<pid>-<tag>.lease`) left by node
// managers that ended without removing theirs (SIGKILL, a crash, a machine's power): a page
// goes when the pid in its name is not a live process and the lease in it has expired. A
// page that cannot be opened (another user's) stays. Returns how many were removed. Each
// node manager calls it at start.
int RemoveStaleLeases(const std::string& dir = "/dev/shm");

// The environment variable that tells a worker where its node's lease is.
inline constexpr char kNodeLeaseEnv[] = "PHALANX_NODE_LEASE";

}  // namespace phalanx
