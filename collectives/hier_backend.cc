// The hierarchical backend, for groups that span machines (as NCCL does across nodes):
// members on one machine (a "node") share a memory segment (ShmBackend), and the first
// member of each node, its leader, holds ONE TCP stream to each other node's leader
// (TcpMesh) — not one per pair of ranks.
//
//   allreduce       local reduce to the leader (shm) → ring reduce-scatter + ring allgather
//                   among the leaders (full duplex: each step sends to the next leader while
//                   it receives from the previous one and reduces what has arrived) → local
//                   broadcast; large buffers in 4 MiB pieces, pipelined (the leaders' ring on
//                   one piece overlaps the local reduce of the next)
//   allgather       local allgather → ring allgather of the nodes' blocks → local broadcast
//   broadcast       local broadcast in the root's node → pipelined chain of leaders starting
//                   at the root's node → local broadcast in every other node
//   reduce-scatter  the allreduce above on a copy of the input, then this rank's block
//   barrier         local barrier → one byte to and from every other leader → local barrier
//   send/recv       same node: shared memory; across nodes: a direct stream opened on first
//                   use (PeerLinks). Relaying through the leaders would need the leaders to
//                   take part in a call only two members make (send/recv are not collective),
//                   so the stream is direct.
//
// Every TCP wait polls the abort eventfd and the deadline: Abort() ends the call at once,
// even on a peer that vanished without closing its connections; a closed connection fails
// the call at once naming the peer. Abort also shuts this member's streams down, so the
// peers blocked on it fail at once too.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "base/system.h"
#include "collectives/backend.h"
#include "collectives/reduce.h"
#include "collectives/tcp_transport.h"

namespace phalanx::collective {
namespace {

// Bytes per piece of a broadcast relayed along the chain of leaders.
constexpr size_t kPiece = 1 << 20;
// Bytes per piece of a pipelined allreduce (see AllreduceNoDivide).
constexpr size_t kPipelinePiece = 4 << 20;

class HierBackend final : public CommBackend {
 public:
  HierBackend(int rank, std::vector<int> node_of, std::vector<std::vector<int>> members,
              std::shared_ptr<AbortSignal> abort)
      : rank_(rank),
        world_(static_cast<int>(node_of.size())),
        node_of_(std::move(node_of)),
        members_(std::move(members)),
        node_(node_of_[rank]),
        abort_(abort ? std::move(abort) : std::make_shared<AbortSignal>()) {
    const auto& mine = members_[node_];
    local_rank_ = static_cast<int>(std::find(mine.begin(), mine.end(), rank) - mine.begin());
  }

  absl::Status Allreduce(void* data, size_t count, DType dtype, ReduceOp op,
                         absl::Duration timeout) override {
    absl::Time deadline = absl::Now() + timeout;
    // An average is a sum until the very end (then one division by the world size).
    ReduceOp sum_or_op = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
    if (auto s = AllreduceNoDivide(data, count, dtype, sum_or_op, deadline); !s.ok()) return s;
    if (op == ReduceOp::kAvg) DivideInPlace(data, count, dtype, world_);
    return absl::OkStatus();
  }

  absl::Status Allgather(const void* in, void* out, size_t count, DType dtype,
                         absl::Duration timeout) override {
    absl::Time deadline = absl::Now() + timeout;
    const size_t block = count * DTypeSize(dtype);  // one member's bytes
    const int nodes = static_cast<int>(members_.size());
    // The nodes' blocks, node after node, each in its members' order.
    std::vector<size_t> offset(nodes + 1, 0);
    for (int k = 0; k < nodes; ++k) offset[k + 1] = offset[k] + members_[k].size() * block;
    std::vector<uint8_t> gathered(offset[nodes]);
    uint8_t* mine = gathered.data() + offset[node_];
    if (local_) {
      if (auto s = local_->Allgather(in, mine, count, dtype, Left(deadline)); !s.ok()) return s;
    } else {
      std::memcpy(mine, in, block);
    }
    if (leader()) {
      if (mesh_) {
        const int n = mesh_->size(), i = mesh_->me();
        const int next = (i + 1) % n, prev = (i + n - 1) % n;
        for (int step = 0; step < n - 1; ++step) {
          int out_block = (i - step + n) % n, in_block = (i - step - 1 + n) % n;
          std::vector<Transfer> sends = {{mesh_->fd(next), gathered.data() + offset[out_block],
                                          offset[out_block + 1] - offset[out_block],
                                          mesh_->name(next)}};
          std::vector<Transfer> recvs = {{mesh_->fd(prev), gathered.data() + offset[in_block],
                                          offset[in_block + 1] - offset[in_block],
                                          mesh_->name(prev)}};
          if (auto s = ExchangeAll(sends, recvs, *abort_, deadline); !s.ok()) return s;
        }
      }
      uint8_t* dst = static_cast<uint8_t*>(out);
      for (int k = 0; k < nodes; ++k) {
        for (size_t j = 0; j < members_[k].size(); ++j) {
          std::memcpy(dst + members_[k][j] * block, gathered.data() + offset[k] + j * block, block);
        }
      }
    }
    if (local_) return local_->Broadcast(out, count * world_, dtype, 0, Left(deadline));
    return absl::OkStatus();
  }

  absl::Status Broadcast(void* data, size_t count, DType dtype, int root,
                         absl::Duration timeout) override {
    absl::Time deadline = absl::Now() + timeout;
    const int root_node = node_of_[root];
    if (local_ && node_ == root_node) {
      if (auto s = local_->Broadcast(data, count, dtype, LocalRank(root), Left(deadline)); !s.ok())
        return s;
    }
    if (leader() && mesh_) {
      // A chain from the root's node: each leader relays piece k-1 while it receives piece k.
      const int n = mesh_->size(), i = mesh_->me();
      const int position = (i - root_node + n) % n;
      const int next = (i + 1) % n, prev = (i + n - 1) % n;
      const size_t total = count * DTypeSize(dtype);
      uint8_t* bytes = static_cast<uint8_t*>(data);
      const size_t pieces = (total + kPiece - 1) / kPiece;
      auto piece = [&](size_t k) {
        return std::make_pair(bytes + k * kPiece, std::min(kPiece, total - k * kPiece));
      };
      if (position == 0) {
        std::vector<Transfer> sends = {{mesh_->fd(next), bytes, total, mesh_->name(next)}};
        std::vector<Transfer> none;
        if (auto s = ExchangeAll(sends, none, *abort_, deadline); !s.ok()) return s;
      } else {
        for (size_t k = 0; k <= pieces; ++k) {
          std::vector<Transfer> sends, recvs;
          if (position < n - 1 && k >= 1) {
            auto [p, len] = piece(k - 1);
            sends.push_back({mesh_->fd(next), p, len, mesh_->name(next)});
          }
          if (k < pieces) {
            auto [p, len] = piece(k);
            recvs.push_back({mesh_->fd(prev), p, len, mesh_->name(prev)});
          }
          if (auto s = ExchangeAll(sends, recvs, *abort_, deadline); !s.ok()) return s;
        }
      }
    }
    if (local_ && node_ != root_node) {
      return local_->Broadcast(data, count, dtype, 0, Left(deadline));
    }
    return absl::OkStatus();
  }

  absl::Status ReduceScatter(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                             absl::Duration timeout) override {
    size_t elem = DTypeSize(dtype);
    std::vector<uint8_t> whole(static_cast<const uint8_t*>(in),
                               static_cast<const uint8_t*>(in) + count * elem * world_);
    if (auto s = Allreduce(whole.data(), count * world_, dtype, op, timeout); !s.ok()) return s;
    std::memcpy(out, whole.data() + count * elem * rank_, count * elem);
    return absl::OkStatus();
  }

  absl::Status Barrier(absl::Duration timeout) override {
    absl::Time deadline = absl::Now() + timeout;
    if (local_) {
      if (auto s = local_->Barrier(Left(deadline)); !s.ok()) return s;
    }
    if (leader() && mesh_) {
      const int n = mesh_->size();
      std::vector<uint8_t> out(n, 1), in(n, 0);
      std::vector<Transfer> sends, recvs;
      for (int k = 0; k < n; ++k) {
        if (k == mesh_->me()) continue;
        sends.push_back({mesh_->fd(k), &out[k], 1, mesh_->name(k)});
        recvs.push_back({mesh_->fd(k), &in[k], 1, mesh_->name(k)});
      }
      if (auto s = ExchangeAll(sends, recvs, *abort_, deadline); !s.ok()) return s;
    }
    if (local_) return local_->Barrier(Left(deadline));
    return absl::OkStatus();
  }

  absl::Status Send(const void* data, size_t count, DType dtype, int dst,
                    absl::Duration timeout) override {
    if (node_of_[dst] == node_) return local_->Send(data, count, dtype, LocalRank(dst), timeout);
    return links_->Send(data, count * DTypeSize(dtype), dst, absl::Now() + timeout);
  }

  absl::Status Recv(void* data, size_t count, DType dtype, int src,
                    absl::Duration timeout) override {
    if (node_of_[src] == node_) return local_->Recv(data, count, dtype, LocalRank(src), timeout);
    return links_->Recv(data, count * DTypeSize(dtype), src, absl::Now() + timeout);
  }

  // From any thread: the eventfd ends this member's TCP waits, the shared-memory abort flag
  // its local ones (and its machine's members'); shutting the streams down ends the waits of
  // the other machines' leaders on this one.
  void Abort() override {
    abort_->Raise();
    if (mesh_) mesh_->ShutdownAll();
    if (links_) links_->ShutdownAll();
    if (local_) local_->Abort();
  }

 private:
  friend class Connector;

  bool leader() const { return local_rank_ == 0; }

  int LocalRank(int rank) const {
    const auto& m = members_[node_of_[rank]];
    return static_cast<int>(std::find(m.begin(), m.end(), rank) - m.begin());
  }

  static absl::Duration Left(absl::Time deadline) {
    return std::max(deadline - absl::Now(), absl::Milliseconds(1));
  }

  // Large buffers go in pieces, pipelined: the leaders' ring on piece k runs (on a helper
  // thread of the leader) while the machine reduces piece k+1 locally; then piece k is
  // broadcast locally. Every member of a machine makes the same local calls in the same
  // order: reduce 0, reduce 1, broadcast 0, reduce 2, broadcast 1, ..., broadcast last.
  absl::Status AllreduceNoDivide(void* data, size_t count, DType dtype, ReduceOp op,
                                 absl::Time deadline) {
    if (count == 0) return absl::OkStatus();
    const size_t elem = DTypeSize(dtype);
    const size_t per_piece = local_ ? std::max<size_t>(1, kPipelinePiece / elem) : count;
    const size_t pieces = (count + per_piece - 1) / per_piece;
    uint8_t* bytes = static_cast<uint8_t*>(data);
    auto piece = [&](size_t k) {
      return std::make_pair(bytes + k * per_piece * elem,
                            std::min(per_piece, count - k * per_piece));
    };
    auto local_reduce = [&](size_t k) {
      if (!local_) return absl::OkStatus();
      auto [p, n] = piece(k);
      return local_->Reduce(p, n, dtype, op, 0, Left(deadline));
    };
    auto ring = [&](size_t k) {
      if (!leader() || !mesh_) return absl::OkStatus();
      auto [p, n] = piece(k);
      return RingAllreduce(p, n, dtype, op, deadline);
    };
    if (auto s = local_reduce(0); !s.ok()) return s;
    for (size_t k = 0; k < pieces; ++k) {
      absl::Status net, local;
      std::thread helper;
      if (leader() && mesh_ && k + 1 < pieces) {
        helper = std::thread([&, k] { net = ring(k); });
      } else {
        net = ring(k);
      }
      if (k + 1 < pieces) local = local_reduce(k + 1);
      bool ended_ring = false;
      if (helper.joinable()) {
        // Ends the helper's wait at once (this epoch has failed). Only ours: the streams stay
        // up until the group has recorded this member's failure first (then it aborts us), so
        // that the other machines name the right first failure.
        if (!local.ok()) {
          abort_->Raise();
          ended_ring = true;
        }
        helper.join();
      }
      // The local failure is the cause when it ended the ring: the ring's own error is then
      // only "aborted", which would hide the peer that died.
      if (ended_ring) return local;
      if (!net.ok()) return net;
      if (!local.ok()) return local;
      if (local_) {
        auto [p, n] = piece(k);
        if (auto s = local_->Broadcast(p, n, dtype, 0, Left(deadline)); !s.ok()) return s;
      }
    }
    return absl::OkStatus();
  }

  // Among the leaders: the buffer in n segments; n-1 steps of reduce-scatter leave segment
  // (i+1) mod n fully reduced on leader i, n-1 steps of allgather pass them around. Each step
  // sends one segment to the next leader while receiving another from the previous one; what
  // arrives is reduced while the rest is still on the wire.
  absl::Status RingAllreduce(uint8_t* data, size_t count, DType dtype, ReduceOp op,
                             absl::Time deadline) {
    const int n = mesh_->size(), i = mesh_->me();
    const int next = (i + 1) % n, prev = (i + n - 1) % n;
    const size_t elem = DTypeSize(dtype);
    auto begin = [&](int k) { return count * k / n; };  // first element of segment k
    auto seg_bytes = [&](int k) { return (begin(k + 1) - begin(k)) * elem; };
    ReduceFn reduce = ReduceFunction(dtype, op);
    scratch_.resize(seg_bytes(n - 1) + elem);
    for (int step = 0; step < n - 1; ++step) {
      int out_seg = (i - step + n) % n, in_seg = (i - step - 1 + n) % n;
      uint8_t* acc = data + begin(in_seg) * elem;
      size_t reduced = 0;  // elements of the incoming segment reduced so far
      std::vector<Transfer> sends = {
          {mesh_->fd(next), data + begin(out_seg) * elem, seg_bytes(out_seg), mesh_->name(next)}};
      std::vector<Transfer> recvs = {{mesh_->fd(prev), scratch_.data(), seg_bytes(in_seg),
                                      mesh_->name(prev), [&](size_t bytes) {
                                        size_t ready = bytes / elem;
                                        if (ready > reduced) {
                                          reduce(acc + reduced * elem, acc + reduced * elem,
                                                 scratch_.data() + reduced * elem, ready - reduced);
                                          reduced = ready;
                                        }
                                      }}};
      if (auto s = ExchangeAll(sends, recvs, *abort_, deadline); !s.ok()) return s;
    }
    for (int step = 0; step < n - 1; ++step) {
      int out_seg = (i + 1 - step + n) % n, in_seg = (i - step + n) % n;
      std::vector<Transfer> sends = {
          {mesh_->fd(next), data + begin(out_seg) * elem, seg_bytes(out_seg), mesh_->name(next)}};
      std::vector<Transfer> recvs = {
          {mesh_->fd(prev), data + begin(in_seg) * elem, seg_bytes(in_seg), mesh_->name(prev)}};
      if (auto s = ExchangeAll(sends, recvs, *abort_, deadline); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  const int rank_;
  const int world_;
  const std::vector<int> node_of_;               // rank → node
  const std::vector<std::vector<int>> members_;  // node → its ranks, ascending
  const int node_;
  int local_rank_ = 0;
  std::shared_ptr<AbortSignal> abort_;  // outlives the streams below
  std::unique_ptr<CommBackend> local_;  // shared memory; null when alone on the node
  std::unique_ptr<TcpMesh> mesh_;       // leaders only; null with one node
  std::unique_ptr<PeerLinks> links_;    // send/recv across nodes
  std::vector<uint8_t> scratch_;
};

// Forms a HierBackend (the body of ConnectHierarchical, a friend of the backend).
class Connector {
 public:
  static absl::StatusOr<std::unique_ptr<CommBackend>> Connect(
      KvStore* store, const ConnectOptions& options, const std::vector<std::string>& node_keys);
};

absl::StatusOr<std::unique_ptr<CommBackend>> Connector::Connect(
    KvStore* store, const ConnectOptions& options, const std::vector<std::string>& node_keys) {
  const int world = options.world_size, rank = options.rank;
  absl::Time deadline = absl::Now() + options.timeout;
  // Nodes in the order of their lowest rank.
  std::vector<int> node_of(world, -1);
  std::vector<std::vector<int>> members;
  std::vector<std::string> keys;
  for (int r = 0; r < world; ++r) {
    auto it = std::find(keys.begin(), keys.end(), node_keys[r]);
    if (it == keys.end()) {
      keys.push_back(node_keys[r]);
      members.emplace_back();
      it = keys.end() - 1;
    }
    node_of[r] = static_cast<int>(it - keys.begin());
    members[node_of[r]].push_back(r);
  }
  auto machine = [&](int r) {
    std::string key = node_keys[r];
    return key.substr(0, key.find('#'));  // "<machine>#<rank>" when shared memory is off
  };
  auto peer_name = [&](int r) {
    return absl::StrCat("peer rank ", r, " (machine ", machine(r), ")");
  };
  std::unique_ptr<HierBackend> backend(new HierBackend(rank, node_of, members, options.abort));
  const int node = node_of[rank];

  // Send/recv streams: every member listens; the streams open on first use.
  std::string address;
  auto listen_fd = Listen(options.host, &address);
  if (!listen_fd.ok()) return listen_fd.status();
  std::vector<std::string> addresses(world), names(world);
  if (auto s = store->Set(absl::StrCat("p2p/", rank), address); !s.ok()) {
    ::close(*listen_fd);
    return s;
  }
  for (int r = 0; r < world; ++r) {
    names[r] = peer_name(r);
    if (r == rank) continue;
    auto there = store->Get(absl::StrCat("p2p/", r),
                            std::max(deadline - absl::Now(), absl::Milliseconds(1)));
    if (!there.ok()) {
      ::close(*listen_fd);
      return there.status();
    }
    addresses[r] = *there;
  }
  backend->links_ =
      std::make_unique<PeerLinks>(rank, *listen_fd, std::move(addresses), names, options.secret,
                                  store->prefix() + "links", backend->abort_.get());

  // Shared memory with the members on this node.
  if (members[node].size() > 1) {
    KvStore local_store = store->Child(absl::StrCat("node", node, "/"));
    ConnectOptions local = options;
    local.rank = backend->local_rank_;
    local.world_size = static_cast<int>(members[node].size());
    local.timeout = std::max(deadline - absl::Now(), absl::Milliseconds(1));
    auto shm = ConnectShm(&local_store, local, members[node]);
    if (!shm.ok()) {
      return absl::Status(shm.status().code(),
                          absl::StrCat("shared memory among the members on machine ", machine(rank),
                                       ": ", shm.status().message()));
    }
    backend->local_ = std::move(*shm);
  }

  // One stream per pair of nodes, between their leaders.
  if (backend->leader() && members.size() > 1) {
    std::vector<std::string> leader_names;
    for (const auto& m : members) leader_names.push_back(peer_name(m[0]));
    auto mesh =
        TcpMesh::Connect(store, "mesh", node, static_cast<int>(members.size()), options.host,
                         std::move(leader_names), options.secret, backend->abort_.get(),
                         std::max(deadline - absl::Now(), absl::Milliseconds(1)));
    if (!mesh.ok()) {
      return absl::Status(mesh.status().code(), absl::StrCat("connecting the machines' leaders: ",
                                                             mesh.status().message()));
    }
    backend->mesh_ = std::move(*mesh);
  }
  return std::unique_ptr<CommBackend>(std::move(backend));
}

}  // namespace

absl::StatusOr<std::unique_ptr<CommBackend>> ConnectHierarchical(
    KvStore* store, const ConnectOptions& options, const std::vector<std::string>& node_keys) {
  return Connector::Connect(store, options, node_keys);
}

absl::StatusOr<std::unique_ptr<CommBackend>> ConnectHost(KvStore* store,
                                                         const ConnectOptions& options,
                                                         bool allow_shared_memory, bool gloo_mesh) {
  if (gloo_mesh) return ConnectGloo(store, options);
  std::string here = MachineId();
  if (auto s = store->Set(absl::StrCat("machine/", options.rank), here); !s.ok()) return s;
  std::vector<std::string> machines(options.world_size);
  bool one_machine = true;
  for (int r = 0; r < options.world_size; ++r) {
    auto there = store->Get(absl::StrCat("machine/", r), options.timeout);
    if (!there.ok()) return there.status();
    machines[r] = *there;
    one_machine &= *there == here;
  }
  if (allow_shared_memory && one_machine && options.world_size > 1) {
    auto shm = ConnectShm(store, options);
    if (shm.ok() || !absl::IsFailedPrecondition(shm.status())) return shm;
    allow_shared_memory = false;  // no usable /dev/shm here: TCP between every member
  }
  if (!one_machine && options.rank == 0) {
    int count = 0;
    for (int r = 0; r < options.world_size; ++r) {
      count +=
          std::find(machines.begin(), machines.begin() + r, machines[r]) == machines.begin() + r;
    }
    spdlog::info(
        "collective group: the epoch spans {} machines: shared memory inside each, one TCP "
        "stream per machine pair between their leaders",
        count);
  }
  std::vector<std::string> node_keys = machines;
  if (!allow_shared_memory) {
    for (int r = 0; r < options.world_size; ++r) absl::StrAppend(&node_keys[r], "#", r);
  }
  return ConnectHierarchical(store, options, node_keys);
}

}  // namespace phalanx::collective
