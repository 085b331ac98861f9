// The interface every transport implements for one formed epoch (internal). Not thread-safe:
// the group runs one call at a time. Errors are statuses whose messages the group prefixes
// with the group, epoch and operation.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collectives/collective_group.h"
#include "collectives/kv_store.h"

namespace phalanx::collective {

class AbortSignal;  // tcp_transport.h

class CommBackend {
 public:
  virtual ~CommBackend() = default;
  virtual absl::Status Allreduce(void* data, size_t count, DType dtype, ReduceOp op,
                                 absl::Duration timeout) = 0;
  virtual absl::Status Allgather(const void* in, void* out, size_t count, DType dtype,
                                 absl::Duration timeout) = 0;
  virtual absl::Status Broadcast(void* data, size_t count, DType dtype, int root,
                                 absl::Duration timeout) = 0;
  virtual absl::Status ReduceScatter(const void* in, void* out, size_t count, DType dtype,
                                     ReduceOp op, absl::Duration timeout) = 0;
  virtual absl::Status Barrier(absl::Duration timeout) = 0;
  // The reduction lands in `root`'s `data` only (others' `data` is left undefined). Default:
  // an allreduce.
  virtual absl::Status Reduce(void* data, size_t count, DType dtype, ReduceOp op, int root,
                              absl::Duration timeout) {
    (void)root;
    return Allreduce(data, count, dtype, op, timeout);
  }
  virtual absl::Status Send(const void* data, size_t count, DType dtype, int dst,
                            absl::Duration timeout) = 0;
  virtual absl::Status Recv(void* data, size_t count, DType dtype, int src,
                            absl::Duration timeout) = 0;
  // Releases the transport at once (NCCL: ncclCommAbort), even while a call is stuck.
  virtual void Abort() {}
};

struct ConnectOptions {
  int rank = 0;
  int world_size = 1;
  std::string host;
  absl::Duration timeout;
  int cuda_device = -1;
  void* cuda_stream = nullptr;
  // The cluster token. Every mesh connection proves it (an HMAC bound to the epoch's keys
  // and both ends), so a stranger that reaches a member's port is never taken for a peer.
  std::string secret;
  // Raised by CollectiveGroup::Abort while the epoch forms: the TCP waits of the formation
  // (connects and accepts between machines) end at once. The backend keeps it as its own
  // abort signal. Null: the backend makes its own.
  std::shared_ptr<AbortSignal> abort;
};

// How many times the members try to form a Gloo mesh before the epoch fails (each try within
// a share of the group's timeout). A try fails for all when a stranger took one of its ports.
inline constexpr int kGlooFormAttempts = 3;

// Forms a Gloo full mesh through `store` (keys of one epoch). Every connection proves
// `options.secret`.
absl::StatusOr<std::unique_ptr<CommBackend>> ConnectGloo(KvStore* store,
                                                         const ConnectOptions& options);

// The host-memory transport. Every member on this machine (and `allow_shared_memory`): one
// shared-memory segment carries every call (ConnectShm). Members on several machines: the
// hierarchical backend (shared memory inside each machine, one TCP stream per pair of
// machines between their leaders). Without shared memory: that backend with every member
// its own "machine", i.e. TCP between all. `gloo_mesh`: Gloo's mesh instead.
absl::StatusOr<std::unique_ptr<CommBackend>> ConnectHost(KvStore* store,
                                                         const ConnectOptions& options,
                                                         bool allow_shared_memory, bool gloo_mesh);

// A shared-memory segment for `options.world_size` members, all on this machine (keys under
// `store`). FailedPrecondition when some member could not map it (then no member uses it).
// `group_ranks[i]`: the rank errors name for member i (empty: i itself).
absl::StatusOr<std::unique_ptr<CommBackend>> ConnectShm(KvStore* store,
                                                        const ConnectOptions& options,
                                                        std::vector<int> group_ranks = {});

// The hierarchical backend: members with equal `node_keys[rank]` share a machine (shared
// memory among them); the first member of each node is its leader; leaders form a TCP mesh.
absl::StatusOr<std::unique_ptr<CommBackend>> ConnectHierarchical(
    KvStore* store, const ConnectOptions& options, const std::vector<std::string>& node_keys);

// Forms an NCCL communicator; `previous` (this member's communicator of the last epoch, may
// be null) is shrunk instead of re-initialized when the new epoch only drops members
// (`kept_ranks`: the new rank of each old rank, -1 = gone).
absl::StatusOr<std::unique_ptr<CommBackend>> ConnectNccl(KvStore* store,
                                                         const ConnectOptions& options,
                                                         CommBackend* previous,
                                                         const std::vector<int>& kept_ranks);

}  // namespace phalanx::collective
