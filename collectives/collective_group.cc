#include "collectives/collective_group.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <deque>
#include <functional>
#include <map>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "base/logging.h"
#include "base/session.h"
#include "base/tls.h"
#include "client/gcs_client.h"
#include "collectives/backend.h"
#include "collectives/tcp_transport.h"

namespace phalanx::collective {

#ifdef PHALANX_WITH_NCCL
bool NcclBuiltImpl();
int NcclDeviceCountImpl();
bool NcclBuilt() { return NcclBuiltImpl(); }
int NcclDeviceCount() { return NcclDeviceCountImpl(); }
#else
bool NcclBuilt() { return false; }
int NcclDeviceCount() { return 0; }
absl::StatusOr<std::unique_ptr<CommBackend>> ConnectNccl(KvStore*, const ConnectOptions&,
                                                         CommBackend*, const std::vector<int>&) {
  return absl::FailedPreconditionError(
      "this build has no NCCL backend: rebuild where /usr/local/cuda has NCCL "
      "(-DPHALANX_WITH_NCCL=ON), or use the Gloo backend");
}
#endif

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
    case DType::kInt32:
      return 4;
    case DType::kFloat64:
    case DType::kInt64:
      return 8;
    case DType::kFloat16:
    case DType::kBFloat16:
      return 2;
  }
  return 1;
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat64:
      return "float64";
    case DType::kFloat16:
      return "float16";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
  }
  return "?";
}

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kProd:
      return "prod";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kAvg:
      return "avg";
  }
  return "?";
}

namespace {

// A call that failed without an abort of this member may have failed on a peer's abort (its
// connections closed) a moment before this member's own Abort, which the elastic controller
// sends every survivor with the reason, arrives: the error waits this long for that reason,
// and no longer once it came.
constexpr absl::Duration kAbortReasonWait = absl::Milliseconds(250);

class GroupImpl final : public CollectiveGroup {
 public:
  GroupImpl(GroupOptions options, std::shared_ptr<RendezvousStore> store)
      : options_(std::move(options)), store_(std::move(store)) {
    thread_ = std::thread([this] { Loop(); });
  }

  ~GroupImpl() override {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    thread_.join();
  }

  int rank() const override {
    absl::MutexLock lock(&mu_);
    return published_.rank;
  }
  int world_size() const override {
    absl::MutexLock lock(&mu_);
    return published_.world;
  }
  int64_t epoch() const override {
    absl::MutexLock lock(&mu_);
    return published_.epoch;
  }
  const std::string& name() const override { return options_.name; }
  Backend backend() const override { return options_.backend; }

  absl::Status Reconfigure(int64_t epoch, int rank, int world_size,
                           absl::Duration timeout) override {
    if (timeout == absl::ZeroDuration()) timeout = options_.timeout;
    // An Abort from here on (not one before this call) ends the formation's waits.
    int64_t aborts = aborts_.load();
    return Submit([=, this] {
             return ReconfigureNow(epoch, rank, world_size, timeout,
                                   [this, aborts] { return aborts_.load() != aborts; });
           })
        .Wait();
  }

  Work DoAllreduce(void* data, size_t count, DType dtype, ReduceOp op, absl::Duration timeout,
                   Dispatch dispatch) override {
    return Op("allreduce", timeout, dispatch, [=](CommBackend* b, absl::Duration t) {
      return b->Allreduce(data, count, dtype, op, t);
    });
  }
  Work DoAllgather(const void* in, void* out, size_t count, DType dtype, absl::Duration timeout,
                   Dispatch dispatch) override {
    return Op("allgather", timeout, dispatch, [=](CommBackend* b, absl::Duration t) {
      return b->Allgather(in, out, count, dtype, t);
    });
  }
  Work DoBroadcast(void* data, size_t count, DType dtype, int root, absl::Duration timeout,
                   Dispatch dispatch) override {
    return Op("broadcast", timeout, dispatch, [=, this](CommBackend* b, absl::Duration t) {
      if (root < 0 || root >= current_.world) {
        return absl::InvalidArgumentError(
            absl::StrCat("broadcast: root ", root, " is not a rank (0..", current_.world - 1, ")"));
      }
      return b->Broadcast(data, count, dtype, root, t);
    });
  }
  Work DoReduceScatter(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                       absl::Duration timeout, Dispatch dispatch) override {
    return Op("reduce-scatter", timeout, dispatch, [=](CommBackend* b, absl::Duration t) {
      return b->ReduceScatter(in, out, count, dtype, op, t);
    });
  }
  Work DoBarrier(absl::Duration timeout, Dispatch dispatch) override {
    return Op("barrier", timeout, dispatch,
              [](CommBackend* b, absl::Duration t) { return b->Barrier(t); });
  }
  Work DoSend(const void* data, size_t count, DType dtype, int dst, absl::Duration timeout,
              Dispatch dispatch) override {
    return Op("send", timeout, dispatch, [=, this](CommBackend* b, absl::Duration t) {
      if (dst < 0 || dst >= current_.world || dst == current_.rank) {
        return absl::InvalidArgumentError(
            absl::StrCat("send: destination ", dst, " is not another rank (0..", current_.world - 1,
                         ", not ", current_.rank, ")"));
      }
      return b->Send(data, count, dtype, dst, t);
    });
  }
  Work DoRecv(void* data, size_t count, DType dtype, int src, absl::Duration timeout,
              Dispatch dispatch) override {
    return Op("recv", timeout, dispatch, [=, this](CommBackend* b, absl::Duration t) {
      if (src < 0 || src >= current_.world || src == current_.rank) {
        return absl::InvalidArgumentError(
            absl::StrCat("recv: source ", src, " is not another rank (0..", current_.world - 1,
                         ", not ", current_.rank, ")"));
      }
      return b->Recv(data, count, dtype, src, t);
    });
  }

  absl::StatusOr<std::vector<LinkProbe>> ProbeLinks(const std::vector<int>& peers, size_t bytes,
                                                    absl::Duration timeout) override;

  void Abort(const std::string& reason) override {
    aborts_.fetch_add(1);  // an epoch forming now stops waiting for its members
    absl::MutexLock lock(&backend_mu_);
    if (forming_) forming_->Raise();  // and its connections between machines
    if (live_backend_ == nullptr) return;
    spdlog::warn("collective group '{}': aborting the call in flight ({})", options_.name, reason);
    abort_reason_ = reason;
    live_backend_->Abort();
  }

 private:
  using Task = std::function<absl::Status()>;
  // A task for the op thread and where its outcome goes.
  struct Queued {
    Task task;
    std::shared_ptr<std::promise<absl::Status>> outcome;
  };

  // Queues `task` for the op thread; or, for Dispatch::kHereIfIdle with no task queued or
  // running, runs it here and now (the caller holds the op role while it runs).
  template <typename F>
  Work Submit(F&& task, Dispatch dispatch = Dispatch::kQueue) {
    {
      absl::MutexLock lock(&mu_);
      if (dispatch == Dispatch::kQueue || running_ || !queue_.empty()) {
        auto outcome = std::make_shared<std::promise<absl::Status>>();
        queue_.push_back(Queued{Task(std::forward<F>(task)), outcome});
        return Work(outcome->get_future().share());
      }
      running_ = true;
    }
    // Given back even if the task throws (to the caller, here), or the group would stall.
    absl::Cleanup give_back = [this] {
      absl::MutexLock lock(&mu_);
      running_ = false;
    };
    return Work(task());
  }

  // Runs a collective in the op role, with the group's sticky failure and error naming.
  template <typename F>
  Work Op(const char* what, absl::Duration timeout, Dispatch dispatch, F&& call) {
    if (timeout == absl::ZeroDuration()) timeout = options_.timeout;
    return Submit(
        [this, what, timeout, call = std::forward<F>(call)]() -> absl::Status {
          if (!backend_) {
            return absl::FailedPreconditionError(absl::StrCat(
                "collective group '", options_.name, "' has no epoch: call Reconfigure first"));
          }
          if (!failure_.ok()) return failure_;
          absl::Status s = call(backend_.get(), timeout);
          if (s.ok() || absl::IsInvalidArgument(s)) return s;
          {
            // Aborted from outside in this epoch (during this call or before it): the abort's
            // reason is the cause (the controller's names the rank that was lost), what the
            // transport saw follows; recorded so, a member that failed on this one's closed
            // connections names it too.
            absl::MutexLock lock(&backend_mu_);
            backend_mu_.AwaitWithTimeout(
                absl::Condition(
                    +[](std::string* reason) { return !reason->empty(); }, &abort_reason_),
                kAbortReasonWait);
            if (!abort_reason_.empty()) {
              s = absl::Status(s.code(),
                               absl::StrCat("aborted: ", abort_reason_, " (", s.message(), ")"));
            }
          }
          std::string cause = RootCause(s);
          failure_ =
              absl::Status(s.code(), absl::StrCat("collective group '", options_.name, "' epoch ",
                                                  current_.epoch, " (rank ", current_.rank, " of ",
                                                  current_.world, "): ", what, " failed: ", cause,
                                                  "; form a new epoch with Reconfigure"));
          spdlog::warn("{}", failure_.message());
          return failure_;
        },
        dispatch);
  }

  // After a failed call: records what this member saw, closes its connections so that every
  // member blocked on it fails at once too, and names the first failure any member recorded
  // (the peer that actually died, rather than a survivor that gave up on it).
  std::string RootCause(const absl::Status& seen) {
    KvStore store(store_.get(), EpochPrefix(current_.epoch));
    std::string mine = std::string(seen.message());
    store
        .Set(absl::StrCat("failed/", current_.rank),
             absl::StrCat(absl::ToUnixMicros(absl::Now()), "|", mine))
        .IgnoreError();
    backend_->Abort();
    auto reports = store.List("failed/");
    if (!reports.ok()) return mine;
    int64_t first_time = INT64_MAX;
    std::string first;
    int first_rank = -1;
    for (const auto& [key, value] : *reports) {
      size_t bar = value.find('|');
      int64_t t = 0;
      int reporter = -1;
      if (bar == std::string::npos || !absl::SimpleAtoi(value.substr(0, bar), &t) ||
          !absl::SimpleAtoi(key.substr(key.rfind('/') + 1), &reporter)) {
        continue;
      }
      // A report about "connection closed" by a member that itself reported is an echo of
      // the abort, not the first failure.
      if (t < first_time) {
        first_time = t;
        first = value.substr(bar + 1);
        first_rank = reporter;
      }
    }
    if (first_rank < 0 || first_rank == current_.rank) return mine;
    return absl::StrCat(first, " (first seen by rank ", first_rank, "; here: ", mine, ")");
  }

  void Loop() {
    while (true) {
      Queued next;
      {
        absl::MutexLock lock(&mu_);
        // A caller running its blocking call here holds the op role (running_) until done.
        mu_.Await(absl::Condition(
            +[](GroupImpl* g) ABSL_EXCLUSIVE_LOCKS_REQUIRED(g->mu_) {
              return !g->running_ && (g->stopping_ || !g->queue_.empty());
            },
            this));
        if (queue_.empty()) return;
        next = std::move(queue_.front());
        queue_.pop_front();
        running_ = true;
      }
      absl::Status s = next.task();
      {
        absl::MutexLock lock(&mu_);
        running_ = false;
      }
      // Only now: a caller woken by it finds the op role free, and its next blocking call
      // runs on its own thread rather than behind this one (which kept every later call on
      // the queue once one was).
      next.outcome->set_value(std::move(s));
    }
  }

  std::string EpochPrefix(int64_t epoch) const {
    return absl::StrCat(options_.name, "/e", epoch, "/");
  }

  absl::Status ReconfigureNow(int64_t epoch, int rank, int world_size, absl::Duration timeout,
                              std::function<bool()> aborted) {
    std::string who = absl::StrCat("collective group '", options_.name, "': epoch ", epoch,
                                   " (rank ", rank, " of ", world_size, ")");
    if (world_size < 1 || rank < 0 || rank >= world_size) {
      return absl::InvalidArgumentError(
          absl::StrCat(who, ": rank must be in 0..world_size-1 and world_size >= 1"));
    }
    if (epoch <= current_.epoch) {
      return absl::FailedPreconditionError(absl::StrCat(
          who, ": this member is already at epoch ", current_.epoch, "; epochs only move forward"));
    }
    // A member may not go back to an epoch older than one the group reached.
    KvStore group_store(store_.get(), options_.name + "/");
    auto markers = group_store.List("epochs/");
    if (!markers.ok()) return markers.status();
    int64_t newest = 0;
    for (const auto& [key, value] : *markers) {
      int64_t e = 0;
      if (absl::SimpleAtoi(key.substr(key.rfind('/') + 1), &e)) newest = std::max(newest, e);
    }
    if (newest > epoch) {
      return absl::FailedPreconditionError(
          absl::StrCat(who, ": refused, the group already reached epoch ", newest,
                       "; a stale member cannot join (ask the controller for the current epoch)"));
    }
    if (auto s = group_store.Set(absl::StrCat("epochs/", epoch), ""); !s.ok()) return s;

    KvStore store(store_.get(), EpochPrefix(epoch), aborted);
    // Which old rank each member was (NCCL shrinks when the epoch only lost members).
    std::vector<int> kept;
    if (options_.backend == Backend::kNccl) {
      if (auto s = store.Set(absl::StrCat("prev/", rank),
                             absl::StrCat(current_.epoch, ":", current_.rank));
          !s.ok()) {
        return s;
      }
      kept.assign(current_.world, -1);
      bool shrinkable = backend_ != nullptr && failure_.ok() && current_.world > world_size;
      int last_old = -1;
      for (int r = 0; r < world_size && shrinkable; ++r) {
        auto prev = store.Get(absl::StrCat("prev/", r), timeout);
        if (!prev.ok()) return prev.status();
        std::vector<std::string> parts = absl::StrSplit(*prev, ':');
        int64_t old_epoch = 0;
        int old_rank = -1;
        if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &old_epoch) ||
            !absl::SimpleAtoi(parts[1], &old_rank) || old_epoch != current_.epoch ||
            old_rank <= last_old || old_rank >= current_.world) {
          shrinkable = false;
          break;
        }
        kept[old_rank] = r;
        last_old = old_rank;
      }
      if (!shrinkable) kept.clear();
    }

    ConnectOptions connect{rank,
                           world_size,
                           options_.host,
                           timeout,
                           options_.cuda_device,
                           options_.cuda_stream,
                           options_.token,
                           std::make_shared<AbortSignal>()};
    // The formation's TCP waits end on an Abort too: from now on through forming_, and one
    // that came since the Reconfigure call (counted by `aborted`) raises it here.
    {
      absl::MutexLock lock(&backend_mu_);
      forming_ = connect.abort;
    }
    if (aborted()) connect.abort->Raise();
    absl::StatusOr<std::unique_ptr<CommBackend>> formed =
        options_.backend == Backend::kGloo
            ? ConnectHost(&store, connect, options_.shared_memory, options_.gloo_mesh)
            : ConnectNccl(&store, connect, backend_.get(), kept);
    // The old epoch ends here: released, not aborted (peers may still be leaving its last
    // call; a failed epoch was aborted when it failed).
    {
      absl::MutexLock lock(&backend_mu_);
      live_backend_ = nullptr;
      forming_ = nullptr;
    }
    // Formed while an Abort came: that epoch is not used (its streams were told to end).
    if (formed.ok() && connect.abort->raised()) {
      formed = absl::AbortedError("the group was aborted while it formed");
    }
    backend_.reset();
    int64_t previous_epoch = current_.epoch;
    current_ = Membership{epoch, rank, world_size};
    {
      absl::MutexLock lock(&mu_);
      published_ = current_;
    }
    if (!formed.ok()) {
      failure_ = absl::Status(
          formed.status().code(),
          absl::StrCat(who, ": forming the group failed: ", formed.status().message()));
      return failure_;
    }
    backend_ = std::move(*formed);
    {
      absl::MutexLock lock(&backend_mu_);
      live_backend_ = backend_.get();
      abort_reason_.clear();
    }
    failure_ = absl::OkStatus();
    if (rank == 0 && previous_epoch > 0) {
      KvStore(store_.get(), EpochPrefix(previous_epoch)).DeletePrefix("").IgnoreError();
    }
    return absl::OkStatus();
  }

  std::vector<LinkProbe> ProbeLinksNow(const std::vector<int>& peers, size_t bytes,
                                       absl::Duration timeout);
  // Exchanges `count` int32 with partner `p`, the lower rank sending first.
  absl::Status Exchange(int p, size_t count, std::vector<char>* send, std::vector<char>* recv,
                        absl::Duration timeout);

  const GroupOptions options_;
  const std::shared_ptr<RendezvousStore> store_;

  // Who this member is in the current epoch.
  struct Membership {
    int64_t epoch = 0;
    int rank = 0;
    int world = 0;
  };

  // Touched only by the task holding the op role (running_, taken and given back under mu_),
  // so read without a lock; Abort reaches the backend through live_backend_.
  std::unique_ptr<CommBackend> backend_;
  Membership current_;
  absl::Status failure_;
  absl::Mutex backend_mu_;
  CommBackend* live_backend_ ABSL_GUARDED_BY(backend_mu_) = nullptr;
  // The abort signal of the epoch forming now (ConnectOptions::abort); null between epochs.
  std::shared_ptr<AbortSignal> forming_ ABSL_GUARDED_BY(backend_mu_);
  // Aborts so far: a Reconfigure's rendezvous gives up when one comes after it started.
  std::atomic<int64_t> aborts_{0};
  // The reason of the last Abort that reached this epoch (the failure's message says it);
  // cleared when an epoch forms.
  std::string abort_reason_ ABSL_GUARDED_BY(backend_mu_);

  mutable absl::Mutex mu_;
  // current_ as other threads see it (rank(), world_size(), epoch()): the op thread publishes
  // it when it forms an epoch.
  Membership published_ ABSL_GUARDED_BY(mu_);
  std::deque<Queued> queue_ ABSL_GUARDED_BY(mu_);
  // A task is running, on the op thread or on a blocking caller's (the op role: one at a time).
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// ---------------------------------------------------------------------------------------
// Link probes

absl::StatusOr<std::vector<LinkProbe>> GroupImpl::ProbeLinks(const std::vector<int>& peers,
                                                             size_t bytes, absl::Duration timeout) {
  if (timeout == absl::ZeroDuration()) timeout = options_.timeout;
  absl::StatusOr<std::vector<LinkProbe>> out;
  absl::Status s =
      Submit([&]() -> absl::Status {
        if (!backend_) {
          return absl::FailedPreconditionError(absl::StrCat(
              "collective group '", options_.name, "' has no epoch: call Reconfigure first"));
        }
        if (!failure_.ok()) return failure_;
        for (int p : peers) {
          if (p < 0 || p >= current_.world || p == current_.rank) {
            return absl::InvalidArgumentError(
                absl::StrCat("probe: peer ", p, " is not another rank (0..", current_.world - 1,
                             ", not ", current_.rank, ")"));
          }
        }
        out = ProbeLinksNow(peers, bytes, timeout);
        return absl::OkStatus();
      }).Wait();
  if (!s.ok()) return s;
  return out;
}

absl::Status GroupImpl::Exchange(int p, size_t count, std::vector<char>* send,
                                 std::vector<char>* recv, absl::Duration timeout) {
  const bool first = current_.rank < p;
  absl::Status e = first ? backend_->Send(send->data(), count, DType::kInt32, p, timeout)
                         : backend_->Recv(recv->data(), count, DType::kInt32, p, timeout);
  if (!e.ok()) return e;
  return first ? backend_->Recv(recv->data(), count, DType::kInt32, p, timeout)
               : backend_->Send(send->data(), count, DType::kInt32, p, timeout);
}

std::vector<LinkProbe> GroupImpl::ProbeLinksNow(const std::vector<int>& peers, size_t bytes,
                                                absl::Duration timeout) {
  std::vector<LinkProbe> probes;
  const size_t count = std::max<size_t>(bytes / 4, 1);
  std::vector<char> send(count * 4, 1), recv(count * 4);
  absl::Status first_failure;
  for (size_t i = 0; i < peers.size(); ++i) {
    const int p = peers[i];
    LinkProbe probe;
    probe.peer = p;
    // Meet first (untimed), so that a partner slow to arrive does not count as a slow link;
    // it may still be in its own probes before this one (ProbeLinks' comment).
    const int64_t before = static_cast<int64_t>(i);
    probe.status = Exchange(p, 1, &send, &recv, (before * (before + 1) + 1) * timeout);
    absl::Time t0 = absl::Now();
    if (probe.status.ok()) probe.status = Exchange(p, count, &send, &recv, timeout);
    probe.took = absl::Now() - t0;
    // The exchange's streams may be left mid-message: the epoch cannot be used again, but the
    // probes after this one still run (their peers are other members).
    if (!probe.status.ok() && first_failure.ok()) {
      first_failure = absl::UnavailableError(
          absl::StrCat("collective group '", options_.name, "' epoch ", current_.epoch,
                       ": probing the link to rank ", p, " failed: ", probe.status.message(),
                       "; form a new epoch with Reconfigure"));
    }
    probes.push_back(std::move(probe));
  }
  if (!first_failure.ok()) failure_ = first_failure;
  return probes;
}

}  // namespace

absl::StatusOr<ClusterRendezvous> ConnectClusterRendezvous(const std::string& gcs_address,
                                                           const std::string& token) {
  auto cluster = rpc::FindCluster(gcs_address, token);
  if (!cluster.ok()) return cluster.status();
  auto gcs = gcs::GcsClient::Connect({cluster->address, cluster->token});
  if (!gcs.ok()) return gcs.status();
  return ClusterRendezvous{std::make_shared<GcsRendezvous>(std::move(*gcs)), cluster->token};
}

absl::StatusOr<std::unique_ptr<CollectiveGroup>> CollectiveGroup::Create(
    const GroupOptions& options) {
  if (options.name.empty() || options.name.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(
        "collective group: name must be non-empty and without '/' (e.g. the job's name)");
  }
  if (options.backend == Backend::kNccl && !NcclBuilt()) {
    return absl::FailedPreconditionError(
        "collective group: NCCL asked for, but this build has no NCCL backend (rebuild where "
        "/usr/local/cuda has NCCL) — use Backend::kGloo");
  }
  // A peer's death must not end this process: writing to its closed socket raises SIGPIPE,
  // whose default action is to terminate. A handler the program installed is left alone.
  struct sigaction pipe_action {};
  if (sigaction(SIGPIPE, nullptr, &pipe_action) == 0 && pipe_action.sa_handler == SIG_DFL) {
    signal(SIGPIPE, SIG_IGN);
  }
  GroupOptions resolved = options;
  std::shared_ptr<RendezvousStore> store = options.rendezvous;
  if (store == nullptr) {
    auto cluster = ConnectClusterRendezvous(options.gcs_address, options.token);
    if (!cluster.ok()) return cluster.status();
    store = std::move(cluster->store);
    resolved.token = cluster->token;  // members prove it to each other on every connection
  }
  return std::unique_ptr<CollectiveGroup>(new GroupImpl(std::move(resolved), std::move(store)));
}

}  // namespace phalanx::collective
