// The Gloo transport: TCP between every pair of members, host memory.
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/tcp/pair.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <map>
#include <regex>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/process.h"
#include "base/sha256.h"
#include "base/system.h"
#include "collectives/backend.h"
#include "collectives/reduce.h"
#include "spdlog/spdlog.h"

namespace phalanx::collective {
namespace {

// Gloo's rendezvous store over the GCS key-value store. Waits are bounded by `deadline`
// (the group's timeout), not by the shorter timeout Gloo's context carries for connecting.
class GlooStore : public gloo::rendezvous::Store {
 public:
  GlooStore(KvStore kv, absl::Time deadline) : kv_(std::move(kv)), deadline_(deadline) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    auto s = kv_.Set(key, std::string(data.begin(), data.end()));
    if (!s.ok()) throw gloo::IoException(std::string(s.message()));
  }

  std::vector<char> get(const std::string& key) override {
    std::string value = Wait(key);
    return std::vector<char>(value.begin(), value.end());
  }

  void wait(const std::vector<std::string>& keys) override {
    for (const auto& key : keys) Wait(key);
  }

  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds&) override {
    wait(keys);
  }

  std::string Wait(const std::string& key) {
    auto value = kv_.Get(key, std::max(deadline_ - absl::Now(), absl::Milliseconds(1)));
    if (!value.ok()) throw gloo::IoException(std::string(value.status().message()));
    return *value;
  }

 private:
  KvStore kv_;
  const absl::Time deadline_;
};

// The socket of a Gloo TCP pair (a protected member: reached through a pointer to member
// formed in a derived class, which the language allows).
struct PairSocket : gloo::transport::tcp::Pair {
  static int Of(gloo::transport::Pair* pair) {
    return static_cast<gloo::transport::tcp::Pair*>(pair)->*(&PairSocket::fd_);
  }
};

std::chrono::milliseconds Ms(absl::Duration d) {
  return std::chrono::milliseconds(std::max<int64_t>(1, absl::ToInt64Milliseconds(d)));
}

class GlooBackend final : public CommBackend {
 public:
  GlooBackend(std::shared_ptr<gloo::transport::Device> device,
              std::shared_ptr<gloo::rendezvous::Context> context, KvStore store, int rank)
      : device_(std::move(device)), context_(std::move(context)), store_(store), rank_(rank) {
    // Our own descriptors of the pairs' sockets, for Abort: Gloo may close (and the process
    // reuse) its numbers, ours stay valid until we close them.
    for (int r = 0; r < context_->size; ++r) {
      if (r == rank_) continue;
      int fd = PairSocket::Of(context_->getPair(r).get());
      if (fd >= 0) sockets_.push_back(::dup(fd));
    }
  }

  ~GlooBackend() override {
    for (int fd : sockets_) {
      if (fd >= 0) ::close(fd);
    }
  }

  absl::Status Allreduce(void* data, size_t count, DType dtype, ReduceOp op,
                         absl::Duration timeout) override {
    if (count == 0) return absl::OkStatus();
    return Guard([&] {
      gloo::AllreduceOptions opts(context_);
      SetOutput(&opts, data, count, dtype);
      opts.setReduceFunction(GlooReduce(dtype, op));
      opts.setTimeout(Ms(timeout));
      gloo::allreduce(opts);
      if (op == ReduceOp::kAvg) DivideInPlace(data, count, dtype, context_->size);
    });
  }

  absl::Status Allgather(const void* in, void* out, size_t count, DType dtype,
                         absl::Duration timeout) override {
    size_t bytes = count * DTypeSize(dtype);
    return Guard([&] {
      gloo::AllgatherOptions opts(context_);
      opts.setInput(const_cast<uint8_t*>(static_cast<const uint8_t*>(in)), bytes);
      opts.setOutput(static_cast<uint8_t*>(out), bytes * context_->size);
      opts.setTimeout(Ms(timeout));
      gloo::allgather(opts);
    });
  }

  absl::Status Broadcast(void* data, size_t count, DType dtype, int root,
                         absl::Duration timeout) override {
    size_t bytes = count * DTypeSize(dtype);
    return Guard([&] {
      gloo::BroadcastOptions opts(context_);
      opts.setOutput(static_cast<uint8_t*>(data), bytes);
      opts.setRoot(root);
      opts.setTimeout(Ms(timeout));
      gloo::broadcast(opts);
    });
  }

  absl::Status ReduceScatter(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                             absl::Duration timeout) override {
    // Allreduce of the whole buffer, then this rank's slice.
    size_t elem = DTypeSize(dtype);
    std::vector<uint8_t> whole(static_cast<const uint8_t*>(in),
                               static_cast<const uint8_t*>(in) + count * elem * context_->size);
    if (auto s = Allreduce(whole.data(), count * context_->size, dtype, op, timeout); !s.ok()) {
      return s;
    }
    std::memcpy(out, whole.data() + count * elem * context_->rank, count * elem);
    return absl::OkStatus();
  }

  // Shuts down every connection of this member, from any thread. Gloo's device loop then
  // reads end-of-stream on each pair and fails the buffers waiting on it, so the call in
  // flight here ends at once, even when it waits on a peer that vanished without a FIN;
  // peers blocked on this member see the close at once too. (Gloo's own closeConnections()
  // closes the sockets without failing the waiting buffers: a call blocked on a silent peer
  // would sit until its timeout.)
  void Abort() override {
    if (aborted_.exchange(true)) return;
    for (int fd : sockets_) {
      if (fd >= 0) ::shutdown(fd, SHUT_RDWR);
    }
  }

  absl::Status Barrier(absl::Duration timeout) override {
    return Guard([&] {
      gloo::BarrierOptions opts(context_);
      opts.setTimeout(Ms(timeout));
      gloo::barrier(opts);
    });
  }

  absl::Status Send(const void* data, size_t count, DType dtype, int dst,
                    absl::Duration timeout) override {
    return Guard([&] {
      auto buffer =
          context_->createUnboundBuffer(const_cast<void*>(data), count * DTypeSize(dtype));
      buffer->send(dst, kP2pSlot + send_seq_[dst]++);
      if (!buffer->waitSend(Ms(timeout))) {
        throw gloo::IoException(absl::StrCat("Timed out sending to rank ", dst));
      }
    });
  }

  absl::Status Recv(void* data, size_t count, DType dtype, int src,
                    absl::Duration timeout) override {
    return Guard([&] {
      auto buffer = context_->createUnboundBuffer(data, count * DTypeSize(dtype));
      buffer->recv(src, kP2pSlot + recv_seq_[src]++);
      if (!buffer->waitRecv(Ms(timeout))) {
        throw gloo::IoException(absl::StrCat("Timed out receiving from rank ", src));
      }
    });
  }

 private:
  // Point-to-point slots live far from the ones Gloo's collectives use.
  static constexpr uint64_t kP2pSlot = 1ull << 40;

  static void SetOutput(gloo::AllreduceOptions* opts, void* data, size_t count, DType dtype) {
    switch (dtype) {
      case DType::kFloat32:
        opts->setOutput(static_cast<float*>(data), count);
        break;
      case DType::kFloat64:
        opts->setOutput(static_cast<double*>(data), count);
        break;
      case DType::kInt32:
        opts->setOutput(static_cast<int32_t*>(data), count);
        break;
      case DType::kInt64:
        opts->setOutput(static_cast<int64_t*>(data), count);
        break;
      case DType::kFloat16:
      case DType::kBFloat16:
        opts->setOutput(static_cast<uint16_t*>(data), count);
        break;
    }
  }

  static gloo::AllreduceOptions::Func GlooReduce(DType dtype, ReduceOp op) {
    // Gloo's own (vectorized) sums for the common case; ours for the rest.
    if (op == ReduceOp::kSum || op == ReduceOp::kAvg) {
      if (dtype == DType::kFloat32) {
        return
            [](void* c, const void* a, const void* b, size_t n) { gloo::sum<float>(c, a, b, n); };
      }
      if (dtype == DType::kFloat64) {
        return
            [](void* c, const void* a, const void* b, size_t n) { gloo::sum<double>(c, a, b, n); };
      }
    }
    return ReduceFunction(dtype, op);
  }

  // Runs a Gloo call and turns its exceptions into statuses that name the peer whose
  // connection failed, when the message lets us tell.
  template <typename F>
  absl::Status Guard(F&& call) {
    try {
      call();
      return absl::OkStatus();
    } catch (const std::exception& e) {
      std::string message = e.what();
      if (aborted_.load()) {
        return absl::UnavailableError(
            absl::StrCat("aborted (CollectiveGroup::Abort); Gloo said: ", message));
      }
      std::string peer = PeerIn(message);
      bool timed_out = message.find("Timed out") != std::string::npos ||
                       message.find("timed out") != std::string::npos;
      std::string text = absl::StrCat(peer.empty() ? "" : absl::StrCat(peer, ": "), message);
      return timed_out ? absl::DeadlineExceededError(text) : absl::UnavailableError(text);
    }
  }

  std::string PeerIn(const std::string& message) {
    static const std::regex kAddress(R"(\[([0-9a-fA-F:.]+)\]:([0-9]+))");
    std::smatch m;
    if (!std::regex_search(message, m, kAddress)) return "";
    std::string address = absl::StrCat(m[1].str(), ":", m[2].str());
    if (peers_.empty()) LoadPeers();
    auto it = peers_.find(address);
    if (it != peers_.end()) return absl::StrCat("peer rank ", it->second, " (", address, ")");
    // The address is a peer's end of a connection it made (a port not published): the failed
    // peer is then the one on this machine whose process is gone, if one is.
    std::vector<std::string> gone;
    const std::string here = MachineId();
    for (const auto& [r, proc] : procs_) {
      if (proc.first == here && !ProcessAlive(proc.second)) {
        gone.push_back(
            absl::StrCat("peer rank ", r, " (pid ", proc.second, ", same machine, gone)"));
      }
    }
    if (gone.size() == 1) return absl::StrCat(gone[0], " (", address, ")");
    return absl::StrCat("the peer at ", address);
  }

  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  // Each peer's end of the pair it shares with us ("ip:port" → rank), from what they
  // published when the epoch formed.
  void LoadPeers() {
    static const std::regex kAddress(R"(\[([0-9a-fA-F:.]+)\]:([0-9]+))");
    auto all = store_.List("pairs/");
    if (!all.ok()) return;
    std::string prefix = absl::StrCat(rank_, "=");
    for (const auto& [key, value] : *all) {
      int r = -1;
      if (!absl::SimpleAtoi(key.substr(key.rfind('/') + 1), &r)) continue;
      for (absl::string_view entry : absl::StrSplit(value, ';', absl::SkipEmpty())) {
        if (absl::ConsumePrefix(&entry, "pid=")) {
          // "pid=<machine>/<pid>"
          size_t slash = entry.rfind('/');
          int pid = 0;
          if (slash != absl::string_view::npos && absl::SimpleAtoi(entry.substr(slash + 1), &pid)) {
            procs_[r] = {std::string(entry.substr(0, slash)), pid};
          }
          continue;
        }
        if (!absl::StartsWith(entry, prefix)) continue;
        std::string address(entry.substr(prefix.size()));
        std::smatch m;
        if (std::regex_search(address, m, kAddress)) {
          peers_[absl::StrCat(m[1].str(), ":", m[2].str())] = r;
        }
      }
    }
  }

  KvStore store_;
  int rank_;
  std::map<std::string, int> peers_;
  std::map<int, std::pair<std::string, pid_t>> procs_;  // rank → (machine, pid)
  std::map<int, uint64_t> send_seq_;
  std::map<int, uint64_t> recv_seq_;
  std::vector<int> sockets_;  // dup()s of the pairs' sockets
  std::atomic<bool> aborted_{false};
};

}  // namespace

namespace {

// Gloo waits up to this many times a pair's timeout for the pair to connect
// (tcp::Pair::waitUntilConnected); the pair's timeout is set from the bound we want.
constexpr int kGlooConnectTimeoutFactor = 5;
// The slot the members' proofs of the token travel in (far from every other slot).
constexpr uint64_t kProofSlot = 1ull << 41;

struct GlooMesh {
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::rendezvous::Context> context;
};

std::string ProofOf(const ConnectOptions& options, const std::string& keys, int from, int to) {
  return HmacSha256(options.secret, absl::StrCat("phalanx-gloo|", keys, "|", from, ">", to));
}

// One try at the mesh, with the keys under `store` (of this attempt alone). Every member
// says it is here first, so the connections that follow take milliseconds; Gloo then
// connects every pair within `connect_bound`; then every pair proves the token both ways
// (Gloo takes the first connection that reaches a pair's port for the peer, whoever made it).
absl::StatusOr<GlooMesh> TryMesh(KvStore store, const ConnectOptions& options,
                                 absl::Duration connect_bound, absl::Time deadline) {
  const int n = options.world_size, me = options.rank;
  auto left = [&] { return std::max(deadline - absl::Now(), absl::Milliseconds(1)); };
  if (auto s = store.Set(absl::StrCat("here/", me), ""); !s.ok()) return s;
  for (int r = 0; r < n; ++r) {
    if (r == me) continue;
    if (auto here = store.Get(absl::StrCat("here/", r), left()); !here.ok()) {
      return here.status();
    }
  }
  try {
    GlooMesh mesh;
    gloo::transport::tcp::attr attr;
    attr.hostname = options.host;
    mesh.device = gloo::transport::tcp::CreateDevice(attr);
    mesh.context = std::make_shared<gloo::rendezvous::Context>(me, n);
    absl::Duration bound = std::min(connect_bound, left());
    mesh.context->setTimeout(Ms(bound / kGlooConnectTimeoutFactor));
    GlooStore gloo_store(store, deadline);
    mesh.context->connectFullMesh(gloo_store, mesh.device);
    mesh.context->setTimeout(Ms(options.timeout));

    std::vector<std::string> mine(n), theirs(n, std::string(32, '\0'));
    std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> sends, recvs(n);
    for (int r = 0; r < n; ++r) {
      if (r == me) continue;
      mine[r] = ProofOf(options, store.prefix(), me, r);
      sends.push_back(mesh.context->createUnboundBuffer(mine[r].data(), mine[r].size()));
      sends.back()->send(r, kProofSlot);
      recvs[r] = mesh.context->createUnboundBuffer(theirs[r].data(), theirs[r].size());
      recvs[r]->recv(r, kProofSlot);
    }
    absl::Time proofs_by = absl::Now() + std::min(connect_bound, left());
    for (int r = 0; r < n; ++r) {
      if (r == me) continue;
      auto wait = Ms(std::max(proofs_by - absl::Now(), absl::Milliseconds(1)));
      if (!recvs[r]->waitRecv(wait)) {
        return absl::UnauthenticatedError(
            absl::StrCat("the connection to rank ", r, " sent no proof of the cluster token"));
      }
      if (!ConstantTimeEquals(theirs[r], ProofOf(options, store.prefix(), r, me))) {
        return absl::UnauthenticatedError(
            absl::StrCat("the connection to rank ", r, " did not prove the cluster token"));
      }
    }
    for (auto& send : sends) {
      if (!send->waitSend(Ms(std::max(proofs_by - absl::Now(), absl::Milliseconds(1))))) {
        return absl::DeadlineExceededError("sending this member's proof of the token timed out");
      }
    }
    return mesh;
  } catch (const std::exception& e) {
    return absl::UnavailableError(e.what());
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<CommBackend>> ConnectGloo(KvStore* store,
                                                         const ConnectOptions& options) {
  // A try fails for every member when it fails for one: a stranger took a pair's port, or a
  // connection was refused or did not prove the token. Each member says how its try went,
  // and all try again with fresh keys (and fresh ports), up to kGlooFormAttempts times
  // within the group's timeout.
  absl::Time deadline = absl::Now() + options.timeout;
  auto left = [&] { return std::max(deadline - absl::Now(), absl::Milliseconds(1)); };
  std::vector<std::string> failures;
  for (int attempt = 0; attempt < kGlooFormAttempts && absl::Now() < deadline; ++attempt) {
    KvStore keys = store->Child(absl::StrCat("gloo/a", attempt, "/"));
    auto mesh = TryMesh(keys, options, options.timeout / kGlooFormAttempts, deadline);
    std::string verdict = mesh.ok() ? "ok" : std::string(mesh.status().message());
    if (options.world_size > 1) {
      if (auto s = keys.Set(absl::StrCat("verdict/", options.rank), verdict); !s.ok()) return s;
    }
    std::vector<std::string> failed;
    if (!mesh.ok()) failed.push_back(absl::StrCat("rank ", options.rank, ": ", verdict));
    for (int r = 0; r < options.world_size; ++r) {
      if (r == options.rank) continue;
      auto theirs = keys.Get(absl::StrCat("verdict/", r), left());
      if (!theirs.ok()) {
        return absl::Status(theirs.status().code(),
                            absl::StrCat("forming the Gloo mesh (try ", attempt + 1,
                                         "): ", theirs.status().message(),
                                         mesh.ok() ? "" : absl::StrCat("; ", failed[0])));
      }
      if (*theirs != "ok") failed.push_back(absl::StrCat("rank ", r, ": ", *theirs));
    }
    if (failed.empty()) {
      // Every member publishes its own end of each pair, and its process, so that a member
      // whose connection to a peer fails later can name that peer (read only then: forming
      // the epoch never waits for it).
      std::string mine = absl::StrCat("pid=", MachineId(), "/", getpid(), ";");
      for (int r = 0; r < options.world_size; ++r) {
        if (r == options.rank) continue;
        absl::StrAppend(&mine, r, "=", mesh->context->getPair(r)->address().str(), ";");
      }
      if (auto s = store->Set(absl::StrCat("pairs/", options.rank), mine); !s.ok()) return s;
      return std::unique_ptr<CommBackend>(
          new GlooBackend(std::move(mesh->device), std::move(mesh->context), *store, options.rank));
    }
    std::string line = absl::StrJoin(failed, "; ");
    spdlog::warn("collective {}: Gloo mesh try {} of {} failed ({}); trying again", store->prefix(),
                 attempt + 1, kGlooFormAttempts, line);
    failures.push_back(absl::StrCat("try ", attempt + 1, ": ", line));
  }
  return absl::UnavailableError(absl::StrCat("forming the Gloo mesh failed within ",
                                             absl::FormatDuration(options.timeout), " (",
                                             absl::StrJoin(failures, " | "), ")"));
}

}  // namespace phalanx::collective
