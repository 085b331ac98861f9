// NodeManager: the per-machine daemon (phalanx-node). Registers the machine's resources with
// the GCS, heartbeats, serves NodeManagerService, and (with the actors issue) starts and
// supervises one worker process per actor. Survives GCS restarts: heartbeats resume against
// the new GCS, and the node re-registers when it sees a new GCS incarnation.
//
// Fencing: a node the GCS declared dead (it missed its heartbeats), or one cut off from the
// GCS for the node timeout (so that it may have been declared dead: see NodeLease), kills
// its workers and ends; Wait() then returns true and the daemon registers again as a new
// node. Its old actors can never meet their replacements. Thread-safe.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/resources.h"

namespace phalanx::node {

struct NodeManagerOptions {
  std::string gcs_address;
  std::string token;
  std::string tls_dir;  // the machine's TLS dir, handed to its workers (empty: plaintext)
  std::string node_id;  // empty: a new random id
  std::string node_ip = "127.0.0.1";
  int port = 0;         // 0: any free port
  Resources resources;  // what this node offers (CPU, GPU, memory bytes, custom)
  bool is_head = false;
  std::string session_dir;
  std::map<std::string, std::string> labels;
  absl::Duration heartbeat_period = absl::Milliseconds(500);
  // Memory: see WorkerPool. The node-wide monitor kills the newest actor above this fraction
  // of the machine's memory (>= 1 disables it).
  double memory_usage_threshold = 0.95;
  std::string memory_enforcement = "auto";  // auto | cgroup | rss
  absl::Duration memory_sample_period = absl::Milliseconds(50);
  bool fork_server = true;  // C++ workers forked from a server per program (see WorkerPool)
  // Test hook: each bundle RESERVE waits this long (to kill a node or the GCS mid-round).
  absl::Duration debug_reserve_delay = absl::ZeroDuration();
  // Test hook: the worker pool records each worker it started this much later.
  absl::Duration debug_record_delay = absl::ZeroDuration();
  // Fence (kill every worker) after this long without evidence of being part of the cluster.
  // Zero: the GCS's node timeout, told at registration (the only value that is safe).
  absl::Duration fence_timeout = absl::ZeroDuration();
  // The /metrics port (HTTPS with the machine's certificate when tls_dir is set; the cluster
  // token as a bearer token). 0: any free one; -1: none. Registered with the node, so that
  // `phalanx status` and the head's scrape targets list it.
  int metrics_port = -1;
  // What the object store may hold in /dev/shm before values go to disk (object_store.h).
  // 0: kDefaultObjectStoreFraction of the machine's memory.
  int64_t object_store_bytes = 0;
  // Where the store's files live ("": /dev/shm). The store's path in /dev/shm is then a link
  // to a directory in it (object_store.h).
  std::string object_store_dir;
  // How long to wait for the GCS at start-up before giving up.
  absl::Duration register_timeout = absl::Seconds(30);
};

class NodeManager {
 public:
  // Starts the gRPC server and registers with the GCS. Errors: unreachable GCS, wrong token.
  static absl::StatusOr<std::unique_ptr<NodeManager>> Start(const NodeManagerOptions& options);

  virtual ~NodeManager() = default;
  NodeManager(const NodeManager&) = delete;
  NodeManager& operator=(const NodeManager&) = delete;

  virtual const std::string& node_id() const = 0;
  virtual int port() const = 0;

  // Blocks until Shutdown() is called or this node was fenced (declared dead by the GCS, or
  // cut off from it for the node timeout; its workers are gone). Returns true in the second
  // case: the caller starts a new node manager, which registers as a new node.
  virtual bool Wait() = 0;

  // Stops workers, tells the GCS this node is gone (reason) and stops serving. Idempotent.
  virtual void Shutdown(const std::string& reason) = 0;

 protected:
  NodeManager() = default;
};

}  // namespace phalanx::node
