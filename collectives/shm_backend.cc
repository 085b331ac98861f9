// Shared memory for members on one machine (as NCCL does within a node): every call goes
// through one shared segment instead of loopback TCP, and forming an epoch needs no TCP mesh
// at all (a few key-value exchanges). Groups that span machines use it inside each machine
// (see hier_backend.cc).
//
// Segment: a control block (barrier counter and generation, an abort flag, each member's pid)
// and one slot of kChunk bytes per member. A buffer is processed chunk by chunk: each member
// copies its part into its slot, and after a barrier reduces (or reads) the others' slots.
// Waiting is a futex on the shared generation, in short slices; between slices a member
// checks that every peer process still lives, so a peer's death fails the call within a few
// milliseconds, and the abort flag tells the others at once.
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/ids.h"
#include "base/process.h"
#include "base/system.h"
#include "collectives/backend.h"
#include "collectives/reduce.h"

namespace phalanx::collective {
namespace {

constexpr size_t kChunk = 4 << 20;  // bytes per member slot
constexpr int kMaxMembers = 64;

struct Control {
  std::atomic<uint32_t> arrived;
  std::atomic<uint32_t> generation;
  std::atomic<uint32_t> aborted;  // set by the first member that fails
  std::atomic<int32_t> failed_rank;
  std::atomic<int32_t> pids[kMaxMembers];
  // Send/recv: the sender's slot carries one chunk at a time; sent[s][d] counts chunks put
  // there for d, taken[s][d] the ones d copied out. Every change bumps p2p_event (a futex).
  std::atomic<uint32_t> p2p_event;
  std::atomic<uint32_t> sent[kMaxMembers][kMaxMembers];
  std::atomic<uint32_t> taken[kMaxMembers][kMaxMembers];
  char pad[64];
};

long Futex(std::atomic<uint32_t>* addr, int op, uint32_t value, const timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op, value, timeout, nullptr, 0);
}

class ShmBackend final : public CommBackend {
 public:
  ShmBackend(void* base, size_t size, int rank, int world, std::vector<int> group_ranks)
      : group_ranks_(std::move(group_ranks)),
        base_(static_cast<uint8_t*>(base)),
        size_(size),
        rank_(rank),
        world_(world),
        control_(reinterpret_cast<Control*>(base_)),
        slots_(base_ + sizeof(Control)) {}

  ~ShmBackend() override { ::munmap(base_, size_); }

  absl::Status Allreduce(void* data, size_t count, DType dtype, ReduceOp op,
                         absl::Duration timeout) override {
    absl::Time deadline = absl::Now() + timeout;
    size_t elem = DTypeSize(dtype);
    size_t per_chunk = kChunk / elem;
    ReduceFn reduce = ReduceFunction(dtype, op);
    uint8_t* bytes = static_cast<uint8_t*>(data);
    for (size_t done = 0; done < count; done += per_chunk) {
      size_t n = std::min(per_chunk, count - done);
      std::memcpy(Slot(rank_), bytes + done * elem, n * elem);
      if (auto s = Barrier(deadline); !s.ok()) return s;
      // Each member reduces its share of the chunk across every slot, in place in slot 0…
      size_t share = (n + world_ - 1) / world_;
      size_t begin = std::min(n, share * rank_), end = std::min(n, begin + share);
      if (end > begin) {
        uint8_t* acc = bytes + (done + begin) * elem;  // reduce into our own output
        std::memcpy(acc, Slot(0) + begin * elem, (end - begin) * elem);
        for (int r = 1; r < world_; ++r) reduce(acc, acc, Slot(r) + begin * elem, end - begin);
        if (op == ReduceOp::kAvg) DivideInPlace(acc, end - begin, dtype, world_);
      }
      if (auto s = Barrier(deadline); !s.ok()) return s;
      // …published through our slot, then everyone collects the others' shares.
      if (end > begin)
        std::memcpy(Slot(rank_) + begin * elem, bytes + (done + begin) * elem,
                    (end - begin) * elem);
      if (auto s = Barrier(deadline); !s.ok()) return s;
      for (int r = 0; r < world_; ++r) {
        if (r == rank_) continue;
        size_t b = std::min(n, share * r), e = std::min(n, b + share);
        if (e > b) std::memcpy(bytes + (done + b) * elem, Slot(r) + b * elem, (e - b) * elem);
      }
      if (auto s = Barrier(deadline); !s.ok()) return s;  // slots free for the next chunk
    }
    return absl::OkStatus();
  }

  absl::Status Allgather(const void* in, void* out, size_t count, DType dtype,
                         absl::Duration timeout) override {
    absl::Time deadline = absl::Now() + timeout;
    size_t total = count * DTypeSize(dtype);
    const uint8_t* src = static_cast<const uint8_t*>(in);
    uint8_t* dst = static_cast<uint8_t*>(out);
    for (size_t done = 0; done < total; done += kChunk) {
      size_t n = std::min(kChunk, total - done);
      std::memcpy(Slot(rank_), src + done, n);
      if (auto s = Barrier(deadline); !s.ok()) return s;
      for (int r = 0; r < world_; ++r) std::memcpy(dst + r * total + done, Slot(r), n);
      if (auto s = Barrier(deadline); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  absl::Status Broadcast(void* data, size_t count, DType dtype, int root,
                         absl::Duration timeout) override {
    absl::Time deadline = absl::Now() + timeout;
    size_t total = count * DTypeSize(dtype);
    uint8_t* bytes = static_cast<uint8_t*>(data);
    for (size_t done = 0; done < total; done += kChunk) {
      size_t n = std::min(kChunk, total - done);
      if (rank_ == root) std::memcpy(Slot(root), bytes + done, n);
      if (auto s = Barrier(deadline); !s.ok()) return s;
      if (rank_ != root) std::memcpy(bytes + done, Slot(root), n);
      if (auto s = Barrier(deadline); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  absl::Status ReduceScatter(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                             absl::Duration timeout) override {
    // Member r's result is element block r: reduce it straight out of everyone's input,
    // staged through the slots a chunk of each block at a time.
    absl::Time deadline = absl::Now() + timeout;
    size_t elem = DTypeSize(dtype);
    size_t per_member = kChunk / elem / world_;  // elements of each block per round
    ReduceFn reduce = ReduceFunction(dtype, op);
    const uint8_t* src = static_cast<const uint8_t*>(in);
    uint8_t* dst = static_cast<uint8_t*>(out);
    for (size_t done = 0; done < count; done += per_member) {
      size_t n = std::min(per_member, count - done);
      for (int r = 0; r < world_; ++r) {
        std::memcpy(Slot(rank_) + r * per_member * elem, src + (r * count + done) * elem, n * elem);
      }
      if (auto s = Barrier(deadline); !s.ok()) return s;
      uint8_t* acc = dst + done * elem;
      std::memcpy(acc, Slot(0) + rank_ * per_member * elem, n * elem);
      for (int r = 1; r < world_; ++r) reduce(acc, acc, Slot(r) + rank_ * per_member * elem, n);
      if (op == ReduceOp::kAvg) DivideInPlace(acc, n, dtype, world_);
      if (auto s = Barrier(deadline); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  // Every member reduces its share of each chunk across the slots, in place in slot 0; the
  // root copies the chunk out.
  absl::Status Reduce(void* data, size_t count, DType dtype, ReduceOp op, int root,
                      absl::Duration timeout) override {
    absl::Time deadline = absl::Now() + timeout;
    size_t elem = DTypeSize(dtype);
    size_t per_chunk = kChunk / elem;
    ReduceFn reduce = ReduceFunction(dtype, op);
    uint8_t* bytes = static_cast<uint8_t*>(data);
    for (size_t done = 0; done < count; done += per_chunk) {
      size_t n = std::min(per_chunk, count - done);
      std::memcpy(Slot(rank_), bytes + done * elem, n * elem);
      if (auto s = Barrier(deadline); !s.ok()) return s;
      size_t share = (n + world_ - 1) / world_;
      size_t begin = std::min(n, share * rank_), end = std::min(n, begin + share);
      if (end > begin) {
        uint8_t* acc = Slot(0) + begin * elem;
        for (int r = 1; r < world_; ++r) reduce(acc, acc, Slot(r) + begin * elem, end - begin);
        if (op == ReduceOp::kAvg) DivideInPlace(acc, end - begin, dtype, world_);
      }
      if (auto s = Barrier(deadline); !s.ok()) return s;
      if (rank_ == root) std::memcpy(bytes + done * elem, Slot(0), n * elem);
      if (auto s = Barrier(deadline); !s.ok()) return s;  // slots free for the next chunk
    }
    return absl::OkStatus();
  }

  absl::Status Barrier(absl::Duration timeout) override { return Barrier(absl::Now() + timeout); }

  // One chunk at a time through our slot; each waits until the receiver took it, so the
  // slot is free again when Send returns.
  absl::Status Send(const void* data, size_t count, DType dtype, int dst,
                    absl::Duration timeout) override {
    absl::Time deadline = absl::Now() + timeout;
    size_t total = count * DTypeSize(dtype);
    const uint8_t* src = static_cast<const uint8_t*>(data);
    auto& sent = control_->sent[rank_][dst];
    auto& taken = control_->taken[rank_][dst];
    for (size_t done = 0; done < total || total == 0; done += kChunk) {
      size_t n = std::min(kChunk, total - done);
      std::memcpy(Slot(rank_), src + done, n);
      uint32_t mine = sent.fetch_add(1, std::memory_order_acq_rel) + 1;
      Signal();
      if (auto s = WaitUntil([&] { return taken.load(std::memory_order_acquire) >= mine; },
                             deadline, dst);
          !s.ok()) {
        return s;
      }
      if (total == 0) break;
    }
    return absl::OkStatus();
  }

  absl::Status Recv(void* data, size_t count, DType dtype, int src,
                    absl::Duration timeout) override {
    absl::Time deadline = absl::Now() + timeout;
    size_t total = count * DTypeSize(dtype);
    uint8_t* dst = static_cast<uint8_t*>(data);
    auto& sent = control_->sent[src][rank_];
    auto& taken = control_->taken[src][rank_];
    for (size_t done = 0; done < total || total == 0; done += kChunk) {
      uint32_t next = taken.load(std::memory_order_acquire) + 1;
      if (auto s = WaitUntil([&] { return sent.load(std::memory_order_acquire) >= next; }, deadline,
                             src);
          !s.ok()) {
        return s;
      }
      size_t n = std::min(kChunk, total - done);
      std::memcpy(dst + done, Slot(src), n);
      taken.store(next, std::memory_order_release);
      Signal();
      if (total == 0) break;
    }
    return absl::OkStatus();
  }

  // Tells every member that this group failed: they stop waiting at once. (A normal
  // shutdown only unmaps; see the destructor.)
  void Abort() override {
    control_->aborted.store(1);
    Futex(&control_->generation, FUTEX_WAKE, INT32_MAX, nullptr);
    Signal();
  }

 private:
  uint8_t* Slot(int r) { return slots_ + static_cast<size_t>(r) * kChunk; }

  void Signal() {
    control_->p2p_event.fetch_add(1, std::memory_order_acq_rel);
    Futex(&control_->p2p_event, FUTEX_WAKE, INT32_MAX, nullptr);
  }

  // Waits until `ready()`, in futex slices; fails when the group aborted, `peer` died, or the
  // deadline passed.
  template <typename Ready>
  absl::Status WaitUntil(Ready ready, absl::Time deadline, int peer) {
    int spins = 0;
    while (true) {
      uint32_t event = control_->p2p_event.load(std::memory_order_acquire);
      if (ready()) return absl::OkStatus();
      if (control_->aborted.load()) return Aborted();
      if (++spins < 200) continue;
      timespec slice{0, 5 * 1000 * 1000};
      Futex(&control_->p2p_event, FUTEX_WAIT, event, &slice);
      if (ready()) return absl::OkStatus();
      pid_t pid = control_->pids[peer].load();
      if (pid > 0 && !ProcessAlive(pid)) {
        int32_t none = -1;
        control_->failed_rank.compare_exchange_strong(none, peer);
        Abort();
        return absl::UnavailableError(
            absl::StrCat("peer rank ", GroupRank(peer), " (pid ", pid, ", same machine) died"));
      }
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("timed out waiting for rank ", GroupRank(peer)));
      }
    }
  }

  // Sense-reversing barrier on the shared generation counter.
  absl::Status Barrier(absl::Time deadline) {
    uint32_t gen = control_->generation.load(std::memory_order_acquire);
    if (control_->aborted.load()) return Aborted();
    if (control_->arrived.fetch_add(1, std::memory_order_acq_rel) + 1 ==
        static_cast<uint32_t>(world_)) {
      control_->arrived.store(0, std::memory_order_relaxed);
      control_->generation.fetch_add(1, std::memory_order_acq_rel);
      Futex(&control_->generation, FUTEX_WAKE, INT32_MAX, nullptr);
      return absl::OkStatus();
    }
    int spins = 0;
    while (control_->generation.load(std::memory_order_acquire) == gen) {
      if (control_->aborted.load()) return Aborted();
      if (++spins < 200) continue;  // a short spin: the peer is usually just behind
      timespec slice{0, 5 * 1000 * 1000};
      Futex(&control_->generation, FUTEX_WAIT, gen, &slice);
      if (control_->generation.load(std::memory_order_acquire) != gen) break;
      for (int r = 0; r < world_; ++r) {
        pid_t pid = control_->pids[r].load();
        if (r != rank_ && pid > 0 && !ProcessAlive(pid)) {  // a zombie counts as dead
          int32_t none = -1;
          control_->failed_rank.compare_exchange_strong(none, r);
          Abort();
          return absl::UnavailableError(
              absl::StrCat("peer rank ", GroupRank(r), " (pid ", pid, ", same machine) died"));
        }
      }
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError("timed out waiting for the other members");
      }
    }
    return absl::OkStatus();  // the generation moved: every member arrived
  }

  absl::Status Aborted() const {
    int failed = control_->failed_rank.load();
    return absl::UnavailableError(
        failed >= 0
            ? absl::StrCat("peer rank ", GroupRank(failed), " died (shared-memory group aborted)")
            : std::string("another member aborted the shared-memory group"));
  }

  // The rank in the whole group of each member here (errors name those), when this segment
  // serves one machine's members of a larger group.
  int GroupRank(int r) const {
    return r < static_cast<int>(group_ranks_.size()) ? group_ranks_[r] : r;
  }

  const std::vector<int> group_ranks_;
  uint8_t* base_;
  size_t size_;
  int rank_;
  int world_;
  Control* control_;
  uint8_t* slots_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<CommBackend>> ConnectShm(KvStore* store,
                                                        const ConnectOptions& options,
                                                        std::vector<int> group_ranks) {
  if (options.world_size < 2 || options.world_size > kMaxMembers) {
    return absl::FailedPreconditionError(absl::StrCat("shared memory serves 2..", kMaxMembers,
                                                      " members on one machine, not ",
                                                      options.world_size));
  }
  size_t size = sizeof(Control) + kChunk * options.world_size;
  std::string name;
  if (options.rank == 0) {
    name = absl::StrCat("/phalanx-", RandomHex(8));
    int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(size)) != 0) {
      if (fd >= 0) ::close(fd);
      name = "";  // no /dev/shm: TCP it is
    } else {
      ::close(fd);
    }
    if (auto s = store->Set("shm/name", name.empty() ? "-" : name); !s.ok()) return s;
  } else {
    auto value = store->Get("shm/name", options.timeout);
    if (!value.ok()) return value.status();
    name = *value == "-" ? "" : *value;
  }
  void* base = MAP_FAILED;
  if (!name.empty()) {
    int fd = ::shm_open(name.c_str(), O_RDWR, 0600);
    if (fd >= 0) {
      base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      ::close(fd);
    }
  }
  bool mapped = base != MAP_FAILED;
  if (mapped) {
    auto* control = static_cast<Control*>(base);
    // Rank 0 initializes the control block before it says it mapped; the others use it only
    // after reading that.
    if (options.rank == 0) control->failed_rank.store(-1);
    control->pids[options.rank].store(getpid());
  }
  // Everyone says whether it mapped the segment; all use it, or none.
  if (auto s = store->Set(absl::StrCat("mapped/", options.rank), mapped ? "1" : "0"); !s.ok()) {
    if (mapped) ::munmap(base, size);
    return s;
  }
  bool all = true;
  for (int r = 0; r < options.world_size; ++r) {
    auto m = store->Get(absl::StrCat("mapped/", r), options.timeout);
    if (!m.ok()) {
      if (mapped) ::munmap(base, size);
      return m.status();
    }
    all &= *m == "1";
  }
  if (options.rank == 0 && !name.empty()) ::shm_unlink(name.c_str());  // gone with the last map
  if (!all) {
    if (mapped) ::munmap(base, size);
    return absl::FailedPreconditionError(
        "a member could not map the shared-memory segment (is /dev/shm mounted and writable?)");
  }
  return std::unique_ptr<CommBackend>(
      new ShmBackend(base, size, options.rank, options.world_size, std::move(group_ranks)));
}

}  // namespace phalanx::collective
