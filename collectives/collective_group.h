// CollectiveGroup: the ranks of a training job exchanging buffers — allreduce, allgather,
// broadcast, reduce-scatter, barrier, send/recv — in host memory (Backend::kGloo: shared
// memory and TCP) or GPU memory (NCCL), with membership by epoch.
//
//   auto group = CollectiveGroup::Create({.name = "job-7"});
//   group->Reconfigure(/*epoch=*/1, /*rank=*/r, /*world_size=*/4);   // every member calls it
//   group->Allreduce(grads, n, DType::kFloat32, ReduceOp::kAvg);
//   ... a peer died: the call fails within the timeout naming the epoch and the peer ...
//   group->Reconfigure(2, new_rank, 3);                               // the survivors go on
//
// Members meet through the GCS key-value store, namespaced by group name and epoch. An epoch
// is formed by every member calling Reconfigure with the same epoch and world size; a member
// can never go back to an older epoch than one the group already reached (its call is
// refused), so a stale process cannot join the current members.
//
// Host memory: members on one machine share a memory segment. A group that spans machines is
// hierarchical: shared memory among the members on each machine, and ONE TCP stream per pair
// of machines, between their leaders (the machine's lowest rank); an allreduce is a local
// reduce, a ring among the leaders, a local broadcast. Send/recv across machines open a direct
// stream on first use. Every path gives the same results for every op and dtype (floating-
// point sums up to the order of additions).
//
// A peer's death never hangs the others: the collective in flight fails as soon as the dead
// peer's connections close or its process is seen gone (milliseconds), naming the peer, or at
// the call's timeout for a peer that vanished silently (a host whose link went down, a stopped
// process), unless Abort() ends it first. The group stays failed until the next Reconfigure.
// Every call has a timeout. Calls are issued in order: collectives must be called in the same
// order on every member (as with MPI, Gloo and NCCL).
//
// Thread-safe; ops on one group run one at a time in call order (the async forms queue; a
// blocking call with none queued runs on the caller's thread).
// No Gloo, NCCL or gRPC in this header.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace phalanx::collective {

enum class DType { kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64 };
enum class ReduceOp { kSum, kProd, kMin, kMax, kAvg };
enum class Backend { kGloo, kNccl };

size_t DTypeSize(DType dtype);
const char* DTypeName(DType dtype);
const char* ReduceOpName(ReduceOp op);

// True when this build has the NCCL backend (CUDA/NCCL found at build time).
bool NcclBuilt();
// Number of CUDA devices usable by NCCL here (0 without a GPU or without NCCL).
int NcclDeviceCount();

// Where a group's members meet: a key-value store every member reaches, which the group uses
// only to form its epochs (addresses, the world's ranks, first failures), never on the path
// of an op. The GCS's KV is one (what Create uses when GroupOptions::rendezvous is unset); a
// caller may give its own: a launcher's store, a file system the hosts share, a test's map.
// The group's keys are "<name>/epochs/..." and "<name>/e<epoch>/..."; a caller sharing the
// store keeps its own apart (elastic's network check: "<name>/netcheck/..."). Thread-safe.
class RendezvousStore {
 public:
  virtual ~RendezvousStore() = default;
  // Sets `key`, overwriting it.
  virtual absl::Status Put(const std::string& key, const std::string& value) = 0;
  // nullopt when `key` is absent.
  virtual absl::StatusOr<std::optional<std::string>> Get(const std::string& key) = 0;
  // Every key that starts with `prefix`, with its value.
  virtual absl::StatusOr<std::vector<std::pair<std::string, std::string>>> List(
      const std::string& prefix) = 0;
  virtual absl::Status DeletePrefix(const std::string& prefix) = 0;
};

struct GroupOptions {
  std::string name;  // the group's name: rendezvous keys live under it
  Backend backend = Backend::kGloo;
  // Where the members meet. Null: the GCS's KV, at `gcs_address` ("" reads $PHALANX_ADDRESS
  // / $PHALANX_TOKEN, then the latest session on this machine).
  std::shared_ptr<RendezvousStore> rendezvous;
  std::string gcs_address;
  // The secret members prove to each other on every connection: the cluster's token with
  // the GCS's rendezvous (found with its address when empty); with a store of the caller's,
  // the caller's (empty: connections prove nothing).
  std::string token;
  // The address (IPv4) peers on other machines reach this member at: its TCP streams listen
  // there.
  std::string host = "127.0.0.1";
  // The default timeout of every call, and of forming an epoch.
  absl::Duration timeout = absl::Seconds(30);
  // Host memory: members on one machine talk through shared memory instead of loopback TCP.
  // Off: TCP between every pair of members.
  bool shared_memory = true;
  // Host memory: Gloo's own TCP mesh instead of the hierarchical transport (for comparison).
  bool gloo_mesh = false;
  // NCCL: the CUDA device of this member (-1: rank % device count) and the stream ops are
  // issued on (a cudaStream_t; nullptr: the group's own stream). Buffers are device memory.
  int cuda_device = -1;
  void* cuda_stream = nullptr;
};

// A pending async call (or one already done); Wait() returns its outcome.
class Work {
 public:
  Work() = default;
  explicit Work(std::shared_future<absl::Status> future) : future_(std::move(future)) {}
  explicit Work(absl::Status done) : done_(std::move(done)) {}
  // A Work no collective made (default-constructed) is an error to wait on, never success.
  // (Inline: the torch backend's module uses it without linking the collectives library.)
  absl::Status Wait() const {
    if (done_.has_value()) return *done_;
    if (!future_.valid()) {
      return absl::FailedPreconditionError(
          "Work::Wait on a Work no collective returned (default-constructed): keep the Work "
          "that Allreduce, Broadcast and the others return");
    }
    return future_.get();
  }
  bool Done() const {
    return done_.has_value() || !future_.valid() ||
           future_.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  }

 private:
  std::optional<absl::Status> done_;
  std::shared_future<absl::Status> future_;
};

// One timed exchange with a peer (CollectiveGroup::ProbeLinks).
struct LinkProbe {
  int peer = -1;
  absl::Status status;                         // how the exchange ended
  absl::Duration took = absl::ZeroDuration();  // the timed exchange, not the meeting before it
};

// The GCS's key-value store as a RendezvousStore (what Create uses when
// GroupOptions::rendezvous is unset), with the cluster's token: found at `gcs_address` ("":
// $PHALANX_ADDRESS / $PHALANX_TOKEN, then the latest session on this machine). For a caller
// that keeps keys of its own beside a group's (a health check's reports): it gives the store
// to the group (GroupOptions::rendezvous, with the token) and keeps it.
struct ClusterRendezvous {
  std::shared_ptr<RendezvousStore> store;
  std::string token;
};
absl::StatusOr<ClusterRendezvous> ConnectClusterRendezvous(const std::string& gcs_address,
                                                           const std::string& token = "");

class CollectiveGroup {
 public:
  // Connects to the GCS for rendezvous; no epoch is formed yet. Errors: no GCS, bad options,
  // NCCL asked for but not built.
  static absl::StatusOr<std::unique_ptr<CollectiveGroup>> Create(const GroupOptions& options);

  virtual ~CollectiveGroup() = default;
  CollectiveGroup(const CollectiveGroup&) = delete;
  CollectiveGroup& operator=(const CollectiveGroup&) = delete;

  // Forms epoch `epoch` as `rank` of `world_size`: blocks until every member joined (or the
  // timeout). Refused (FailedPrecondition) when the group already reached a newer epoch, or
  // `epoch` is not newer than this member's current one.
  virtual absl::Status Reconfigure(int64_t epoch, int rank, int world_size,
                                   absl::Duration timeout = absl::ZeroDuration()) = 0;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual int64_t epoch() const = 0;  // 0 before the first Reconfigure
  virtual const std::string& name() const = 0;
  virtual Backend backend() const = 0;

  // A timeout of zero means the group's default (GroupOptions::timeout).
  // In place: `data` holds `count` elements in and the result out.
  Work AllreduceAsync(void* data, size_t count, DType dtype, ReduceOp op,
                      absl::Duration timeout = absl::ZeroDuration()) {
    return DoAllreduce(data, count, dtype, op, timeout, Dispatch::kQueue);
  }
  // `in` holds `count` elements; `out` receives world_size × count, rank-major.
  Work AllgatherAsync(const void* in, void* out, size_t count, DType dtype,
                      absl::Duration timeout = absl::ZeroDuration()) {
    return DoAllgather(in, out, count, dtype, timeout, Dispatch::kQueue);
  }
  Work BroadcastAsync(void* data, size_t count, DType dtype, int root,
                      absl::Duration timeout = absl::ZeroDuration()) {
    return DoBroadcast(data, count, dtype, root, timeout, Dispatch::kQueue);
  }
  // `in` holds world_size × count elements; `out` receives this rank's reduced `count`.
  Work ReduceScatterAsync(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                          absl::Duration timeout = absl::ZeroDuration()) {
    return DoReduceScatter(in, out, count, dtype, op, timeout, Dispatch::kQueue);
  }
  Work BarrierAsync(absl::Duration timeout = absl::ZeroDuration()) {
    return DoBarrier(timeout, Dispatch::kQueue);
  }
  Work SendAsync(const void* data, size_t count, DType dtype, int dst,
                 absl::Duration timeout = absl::ZeroDuration()) {
    return DoSend(data, count, dtype, dst, timeout, Dispatch::kQueue);
  }
  Work RecvAsync(void* data, size_t count, DType dtype, int src,
                 absl::Duration timeout = absl::ZeroDuration()) {
    return DoRecv(data, count, dtype, src, timeout, Dispatch::kQueue);
  }

  // Blocking forms. With nothing queued or running they run on the calling thread, sparing
  // the hand-off to the group's op thread and back, which costs a small op more than the op
  // itself (bench/README.md has the figures). Else they wait their turn behind the queued
  // ones.
  absl::Status Allreduce(void* data, size_t count, DType dtype, ReduceOp op,
                         absl::Duration timeout = absl::ZeroDuration()) {
    return Timed(DoAllreduce(data, count, dtype, op, timeout, Dispatch::kHereIfIdle));
  }
  absl::Status Allgather(const void* in, void* out, size_t count, DType dtype,
                         absl::Duration timeout = absl::ZeroDuration()) {
    return Timed(DoAllgather(in, out, count, dtype, timeout, Dispatch::kHereIfIdle));
  }
  absl::Status Broadcast(void* data, size_t count, DType dtype, int root,
                         absl::Duration timeout = absl::ZeroDuration()) {
    return Timed(DoBroadcast(data, count, dtype, root, timeout, Dispatch::kHereIfIdle));
  }
  absl::Status ReduceScatter(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                             absl::Duration timeout = absl::ZeroDuration()) {
    return Timed(DoReduceScatter(in, out, count, dtype, op, timeout, Dispatch::kHereIfIdle));
  }
  absl::Status Barrier(absl::Duration timeout = absl::ZeroDuration()) {
    return Timed(DoBarrier(timeout, Dispatch::kHereIfIdle));
  }
  absl::Status Send(const void* data, size_t count, DType dtype, int dst,
                    absl::Duration timeout = absl::ZeroDuration()) {
    return Timed(DoSend(data, count, dtype, dst, timeout, Dispatch::kHereIfIdle));
  }
  absl::Status Recv(void* data, size_t count, DType dtype, int src,
                    absl::Duration timeout = absl::ZeroDuration()) {
    return Timed(DoRecv(data, count, dtype, src, timeout, Dispatch::kHereIfIdle));
  }

  // Makes the call in flight (if any) fail at once, from any thread — host memory: within
  // milliseconds on every transport (shared memory, TCP, Gloo), even when the call waits on a
  // peer that vanished without closing its connections; NCCL: ncclCommAbort — and leaves the
  // group failed until the next Reconfigure. Peers blocked on this member fail too (its
  // connections are shut down). For a controller that knows a peer is gone before the
  // transport does: abort every survivor, then Reconfigure them. A Reconfigure in progress
  // (called before this Abort) stops waiting for its members' rendezvous keys at once and
  // fails (Aborted), where it would wait out its timeout for a member that is gone.
  virtual void Abort(const std::string& reason) = 0;

  // Times an exchange of `bytes` with each of `peers` in turn, over the links the group's
  // calls use: what a health check above the group builds on (elastic's network check). The
  // two members of a pair name each other at the same place in their lists; the lower rank
  // sends first. Each exchange, bounded by `timeout`, follows an untimed one-element meeting,
  // so that a peer slow to arrive does not count as a slow link. The meeting of the i-th
  // probe (from 0) waits up to (i(i+1) + 1) × `timeout`: its peer may still be in its own i
  // probes before, each a meeting and an exchange, when one of those peers is gone. A failed
  // probe does not stop the next one (its peer is another member), but once all ran the group
  // is failed until the next Reconfigure, as after any failed call. Errors (not per peer): no
  // epoch, the group already failed, a peer that is not another rank.
  virtual absl::StatusOr<std::vector<LinkProbe>> ProbeLinks(const std::vector<int>& peers,
                                                            size_t bytes,
                                                            absl::Duration timeout) = 0;

  // How long the blocking forms above have waited, in total, since the group was made: the
  // part of a training step spent in collectives (the rest is the rank's own compute, which
  // is what tells a straggler).
  absl::Duration TimeInCollectives() const {
    return absl::Nanoseconds(waited_ns_.load(std::memory_order_relaxed));
  }

 protected:
  CollectiveGroup() = default;

  // Where a call runs: queued for the group's op thread (the async forms), or on the calling
  // thread when no other call is queued or running (the blocking forms).
  enum class Dispatch { kQueue, kHereIfIdle };
  virtual Work DoAllreduce(void* data, size_t count, DType dtype, ReduceOp op,
                           absl::Duration timeout, Dispatch dispatch) = 0;
  virtual Work DoAllgather(const void* in, void* out, size_t count, DType dtype,
                           absl::Duration timeout, Dispatch dispatch) = 0;
  virtual Work DoBroadcast(void* data, size_t count, DType dtype, int root, absl::Duration timeout,
                           Dispatch dispatch) = 0;
  virtual Work DoReduceScatter(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                               absl::Duration timeout, Dispatch dispatch) = 0;
  virtual Work DoBarrier(absl::Duration timeout, Dispatch dispatch) = 0;
  virtual Work DoSend(const void* data, size_t count, DType dtype, int dst, absl::Duration timeout,
                      Dispatch dispatch) = 0;
  virtual Work DoRecv(void* data, size_t count, DType dtype, int src, absl::Duration timeout,
                      Dispatch dispatch) = 0;

 private:
  absl::Status Timed(const Work& work) {
    absl::Time start = absl::Now();
    absl::Status s = work.Wait();
    waited_ns_.fetch_add(absl::ToInt64Nanoseconds(absl::Now() - start), std::memory_order_relaxed);
    return s;
  }

  std::atomic<int64_t> waited_ns_{0};
};

}  // namespace phalanx::collective
