#include "actors/internal/task_pool.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <map>
#include <set>
#include <thread>
#include <tuple>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "actors/api.h"
#include "actors/internal/functions.h"
#include "spdlog/spdlog.h"
#include "worker/actor_registry.h"
#include "worker/core_worker.h"
#include "worker/errors.h"
#include "worker/worker_host.h"

namespace phalanx::internal {
namespace {

// How long a task whose worker died waits for the GCS to learn the death's cause (the node
// reports it; the broken call usually arrives first), to name it in the task's error.
constexpr absl::Duration kDeathCauseWait = absl::Seconds(2);
// A pool whose leases failed this many times in a row, with no worker left, fails its queue.
constexpr int kMaxLeaseFailures = 3;
// ShutdownTaskPools waits this long at most for the pools' own threads (leases under way,
// the reaper, a death cause being read) to leave the runtime before it is torn down.
constexpr absl::Duration kBackgroundShutdownWait = absl::Seconds(10);

// The threads the pools start (each lease, the reaper, a death cause being read): counted, so
// that ShutdownTaskPools can wait until none is inside the runtime any more.
class Background {
 public:
  static Background& Get() {
    static auto* background = new Background();  // never destroyed: threads may outlive main
    return *background;
  }

  void Run(std::function<void()> fn) {
    {
      absl::MutexLock lock(&mu_);
      ++running_;
    }
    std::thread([this, fn = std::move(fn)] {
      fn();
      absl::MutexLock lock(&mu_);
      --running_;
    }).detach();
  }

  // True while ShutdownTaskPools waits: a thread stops what it can (a death-cause poll).
  bool stopping() {
    absl::MutexLock lock(&mu_);
    return stopping_;
  }

  // Waits until no thread runs (at most kBackgroundShutdownWait); false if some still do.
  bool Drain() {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return running_ == 0; };
    bool drained = mu_.AwaitWithTimeout(absl::Condition(&idle), kBackgroundShutdownWait);
    stopping_ = false;
    return drained;
  }

 private:
  absl::Mutex mu_;
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

class Pool;

struct Task {
  TaskSubmission spec;
  std::shared_ptr<worker::ObjectState> result;
  std::string payload;  // the call's arguments, once its dependencies are resolved
  int attempts = 0;     // sent again after a worker death or a retried error
  absl::Time sent;      // to its current worker
  std::weak_ptr<Pool> pool;
  std::string worker_id;               // the worker running it (guarded by its pool's mu_)
  std::atomic<bool> cancelled{false};  // CancelTask: never sent (again) or retried
};
using TaskPtr = std::shared_ptr<Task>;

// The tasks of this process not yet done, by their result slot (CancelTask finds them here).
class TaskRegistry {
 public:
  static TaskRegistry& Get() {
    static auto* registry = new TaskRegistry();  // never destroyed, as Pools
    return *registry;
  }
  void Add(const TaskPtr& task) {
    {
      absl::MutexLock lock(&mu_);
      tasks_[task->result.get()] = task;
    }
    const worker::ObjectState* key = task->result.get();
    task->result->OnDone([this, key] {
      absl::MutexLock lock(&mu_);
      tasks_.erase(key);
    });
  }
  TaskPtr Find(const worker::ObjectState* result) {
    absl::MutexLock lock(&mu_);
    auto it = tasks_.find(result);
    return it == tasks_.end() ? nullptr : it->second.lock();
  }

 private:
  absl::Mutex mu_;
  std::map<const worker::ObjectState*, std::weak_ptr<Task>> tasks_ ABSL_GUARDED_BY(mu_);
};

bool WorkerDied(const absl::Status& status) {
  std::string kind = worker::ErrorKind(status);
  return worker::IsActorDied(status) || kind == worker::error_kind::kActorUnavailable;
}

// The death cause of `actor_id` once the GCS has it, or "" after kDeathCauseWait.
std::string DeathCause(const std::string& actor_id) {
  absl::Time deadline = absl::Now() + kDeathCauseWait;
  while (true) {
    auto info = GetActorInfo(ActorId(actor_id));
    if (info.ok() && !info->death_cause.empty()) return info->death_cause;
    if (!info.ok() || absl::Now() >= deadline || Background::Get().stopping()) return "";
    absl::SleepFor(absl::Milliseconds(50));
  }
}

class Pool : public std::enable_shared_from_this<Pool> {
 public:
  explicit Pool(const TaskSubmission& shape) : shape_(shape) {
    shape_.deps.clear();
    shape_.assemble = nullptr;
    shape_.retryable = nullptr;
  }

  void Enqueue(TaskPtr task) {
    {
      absl::MutexLock lock(&mu_);
      if (shut_down_) {
        task->result->Set(ShutDownError());
        return;
      }
      if (task->cancelled) return;  // its result is set already
      queue_.push_back(std::move(task));
    }
    Pump();
  }

  // Takes a cancelled task out of the queue; returns the worker running it, if one does, and
  // whether the task is the only one that worker holds (so that it runs now).
  std::pair<std::string, bool> Cancel(const TaskPtr& task) {
    absl::MutexLock lock(&mu_);
    auto it = std::find(queue_.begin(), queue_.end(), task);
    if (it != queue_.end()) {
      queue_.erase(it);
      return {"", false};
    }
    auto w = workers_.find(task->worker_id);
    return {task->worker_id, w != workers_.end() && w->second.in_flight == 1};
  }

  // Whether this pool's workers raise KeyboardInterrupt in their running task (Python's do;
  // a C++ one has its task see IsCanceled()).
  bool Interruptible() const { return shape_.worker_class == worker::kPythonTaskWorkerClass; }

  // Returns the workers idle for longer than kTaskWorkerIdleTimeout, lends the CPU of those
  // idle for kTaskWorkerLendAfterIdle, and cancels the leases an empty queue no longer needs.
  void Reap(absl::Time now) {
    std::vector<std::string> kill, lend;
    {
      absl::MutexLock lock(&mu_);
      for (auto it = workers_.begin(); it != workers_.end();) {
        Worker& w = it->second;
        if (w.in_flight == 0 && now - w.idle_since > kTaskWorkerIdleTimeout) {
          kill.push_back(it->first);
          ++stats_.workers_returned;
          it = workers_.erase(it);
          continue;
        }
        if (w.in_flight == 0 && w.cpu == Cpu::kHeld &&
            now - w.idle_since >= kTaskWorkerLendAfterIdle) {
          w.cpu = Cpu::kLending;
          lend.push_back(it->first);
        }
        ++it;
      }
      if (queue_.empty()) {
        for (const auto& id : leasing_) {
          cancelled_.insert(id);
          kill.push_back(id);
        }
        leasing_.clear();
      }
    }
    for (const auto& id : kill) KillActor(id, /*no_restart=*/true).IgnoreError();
    for (const auto& id : lend) Lent(id, LendCpu(id, rpc::LendActorResourcesRequest::LEND));
  }

  void ShutDown() {
    std::deque<TaskPtr> queued;
    {
      absl::MutexLock lock(&mu_);
      shut_down_ = true;
      queued.swap(queue_);
    }
    for (auto& task : queued) task->result->Set(ShutDownError());
  }

  TaskPoolStats Stats() {
    absl::MutexLock lock(&mu_);
    TaskPoolStats s = stats_;
    s.worker_class = shape_.worker_class;
    s.workers = static_cast<int>(workers_.size());
    for (const auto& [id, w] : workers_) s.idle += w.in_flight == 0 ? 1 : 0;
    s.leases_in_flight = leases_in_flight_;
    s.queued = static_cast<int>(queue_.size());
    return s;
  }

 private:
  // Where an idle worker's CPU is: lent to the cluster after kTaskWorkerLendAfterIdle, and
  // taken back (only if free: TRY_RECLAIM) before it runs a task again.
  enum class Cpu { kHeld, kLending, kLent, kReclaiming };
  struct Worker {
    int in_flight = 0;
    int exclusive = 0;      // of those, TaskSubmission::exclusive ones: nothing goes behind
    absl::Time idle_since;  // when in_flight last fell to 0
    absl::Time last_done;   // its last completion
    Cpu cpu = Cpu::kHeld;   // tasks go only to kHeld workers
  };

  // Lends or takes back a worker's CPU: whether it holds it afterwards.
  static absl::StatusOr<bool> LendCpu(const std::string& worker_id,
                                      rpc::LendActorResourcesRequest::Action action) {
    worker::CoreWorker* core = worker::CoreWorker::Get();
    if (core == nullptr) return absl::CancelledError("phalanx was shut down");
    return core->gcs().LendActorResources(worker_id, /*attempt=*/-1, action,
                                          worker::kLendCallTimeout);
  }

  // A lend (from Reap) answered: the worker is kLent, or kHeld again if the GCS kept its CPU.
  void Lent(const std::string& id, const absl::StatusOr<bool>& held) {
    bool pump;
    {
      absl::MutexLock lock(&mu_);
      auto it = workers_.find(id);
      if (it == workers_.end() || it->second.cpu != Cpu::kLending) return;
      it->second.cpu = held.ok() && !*held ? Cpu::kLent : Cpu::kHeld;
      pump = !queue_.empty();
    }
    if (pump) Pump();
  }

  // Takes a lent idle worker's CPU back for the queue; when the cluster has none free, the
  // worker is returned instead and the pool leases again, in line with every other request.
  void Reclaim(const std::string& id) {
    auto held = LendCpu(id, rpc::LendActorResourcesRequest::TRY_RECLAIM);
    bool give_up = false;
    {
      absl::MutexLock lock(&mu_);
      --reclaims_in_flight_;
      auto it = workers_.find(id);
      if (it == workers_.end()) {
        // Returned meanwhile (by the reaper): the queue may need a lease instead.
      } else if (held.ok() && *held) {
        it->second.cpu = Cpu::kHeld;
      } else {
        workers_.erase(it);
        ++stats_.workers_returned;
        give_up = true;
      }
    }
    if (give_up) KillActor(id, /*no_restart=*/true).IgnoreError();
    Pump();
  }

  // How many tasks a worker may hold at once: more than one only while tasks are short.
  int PipelineDepth() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return task_time_ > absl::ZeroDuration() && task_time_ < kPipelineTaskTime
               ? kMaxTasksInFlightPerWorker
               : 1;
  }

  static absl::Status ShutDownError() {
    return absl::CancelledError("phalanx was shut down before the task ran");
  }

  // Gives queued tasks to idle workers and starts the leases the queue needs; sends outside
  // the lock (a send that fails at once completes on this thread).
  void Pump() {
    std::vector<std::pair<std::string, TaskPtr>> sends;
    std::vector<std::string> reclaims;
    int leases = 0;
    {
      absl::MutexLock lock(&mu_);
      if (shut_down_) return;
      // Each task to the least loaded worker with room: free workers first.
      const int depth = PipelineDepth();
      absl::Time now = absl::Now();
      while (!queue_.empty()) {
        auto best = workers_.end();
        // An exclusive task goes only to a free worker, and nothing goes behind one.
        const int room = queue_.front()->spec.exclusive ? 1 : depth;
        for (auto it = workers_.begin(); it != workers_.end(); ++it) {
          if (it->second.cpu == Cpu::kHeld && it->second.in_flight < room &&
              it->second.exclusive == 0 &&
              (best == workers_.end() || it->second.in_flight < best->second.in_flight)) {
            best = it;
          }
        }
        if (best == workers_.end()) break;
        ++best->second.in_flight;
        if (queue_.front()->spec.exclusive) ++best->second.exclusive;
        queue_.front()->sent = now;
        queue_.front()->worker_id = best->first;
        sends.emplace_back(best->first, std::move(queue_.front()));
        queue_.pop_front();
      }
      // Lent idle workers first (their CPU back, if free), then new leases.
      for (auto& [id, w] : workers_) {
        if (reclaims_in_flight_ >= static_cast<int>(queue_.size())) break;
        if (w.cpu != Cpu::kLent) continue;
        w.cpu = Cpu::kReclaiming;
        ++reclaims_in_flight_;
        reclaims.push_back(id);
      }
      int wanted = std::min<int>(static_cast<int>(queue_.size()), kMaxLeasesInFlight) -
                   leases_in_flight_ - reclaims_in_flight_;
      int room = kMaxTaskWorkersPerPool - static_cast<int>(workers_.size()) - leases_in_flight_;
      leases = std::max(0, std::min(wanted, room));
      leases_in_flight_ += leases;
    }
    for (auto& [id, task] : sends) Send(id, std::move(task));
    for (auto& id : reclaims) {
      Background::Get().Run([self = shared_from_this(), id] { self->Reclaim(id); });
    }
    for (int i = 0; i < leases; ++i) {
      Background::Get().Run([self = shared_from_this()] { self->Lease(); });
    }
  }

  void Send(const std::string& worker_id, TaskPtr task) {
    auto attempt = SubmitCall(worker_id, task->spec.method, task->payload);
    std::weak_ptr<Pool> weak = weak_from_this();
    attempt->OnDone([weak, worker_id, task, attempt] {
      if (auto self = weak.lock()) {
        self->Completed(worker_id, task, *attempt);
      } else {
        task->result->Set(ShutDownError());
      }
    });
  }

  void Completed(const std::string& worker_id, const TaskPtr& task,
                 const worker::ObjectState& attempt) {
    const absl::Status& status = attempt.status();
    const TaskSubmission& spec = task->spec;
    bool can_retry = spec.max_retries < 0 || task->attempts < spec.max_retries;
    if (task->cancelled) can_retry = false;
    if (!status.ok() && WorkerDied(status)) {
      {
        absl::MutexLock lock(&mu_);
        workers_.erase(worker_id);
        if (can_retry && !shut_down_) {
          ++task->attempts;
          ++stats_.retries;
          queue_.push_front(task);
        }
      }
      if (!can_retry) FailWithDeathCause(task, worker_id, status);
      Pump();
      return;
    }
    std::string detail = attempt.value();
    bool retry = !status.ok() && worker::IsTaskError(status) && spec.retryable &&
                 spec.retryable(status, &detail) && can_retry;
    {
      absl::MutexLock lock(&mu_);
      if (auto it = workers_.find(worker_id); it != workers_.end()) {
        Worker& w = it->second;
        absl::Time now = absl::Now();
        // The time the worker spent on this task: from when it could start it (sent, or its
        // previous task done) to now.
        absl::Duration spent = now - std::max(task->sent, w.last_done);
        task_time_ = task_time_ == absl::ZeroDuration() ? spent : (task_time_ * 4 + spent) / 5;
        w.last_done = now;
        if (task->spec.exclusive) --w.exclusive;
        if (--w.in_flight == 0) w.idle_since = now;
      }
      if (retry && !shut_down_) {
        ++task->attempts;
        ++stats_.retries;
        queue_.push_front(task);
      } else {
        ++stats_.tasks_done;
      }
    }
    if (!retry) task->result->Set(status, std::move(detail));
    Pump();
  }

  // Fails `task` with its worker's death, naming the cause (waiting for it on a thread of its
  // own: this runs where the reply was read).
  void FailWithDeathCause(const TaskPtr& task, const std::string& worker_id,
                          const absl::Status& status) {
    bool shut_down;
    {
      absl::MutexLock lock(&mu_);
      shut_down = shut_down_;
    }
    if (shut_down) {  // the runtime may be going away: no GCS call
      task->result->Set(status, "");
      return;
    }
    Background::Get().Run([task, worker_id, status] {
      std::string cause = DeathCause(worker_id);
      const TaskSubmission& spec = task->spec;
      // The node names an OOM kill's cause by its kind first (rpc::DeathCause).
      const char* kind = absl::StartsWith(cause, "OOM_KILLED") ? worker::error_kind::kOutOfMemory
                                                               : worker::error_kind::kWorkerCrashed;
      task->result->Set(worker::MakeError(
          status.code(), kind,
          absl::StrCat("task ", spec.function, ": its worker died",
                       spec.max_retries > 0
                           ? absl::StrCat(" on each of ", task->attempts + 1,
                                          " tries (max_retries=", spec.max_retries, ")")
                           : " (max_retries=0)",
                       ": ", cause.empty() ? status.message() : cause)));
    });
  }

  // Creates a worker actor and waits (by callback) for it to answer its ready call.
  void Lease() {
    auto id = CreateActor(shape_.worker_class, shape_.worker, shape_.worker_init_args);
    if (!id.ok()) {
      LeaseFailed(id.status());
      return;
    }
    {
      absl::MutexLock lock(&mu_);
      if (shut_down_) {  // the actor dies with its owner; the runtime may be going away
        --leases_in_flight_;
        return;
      }
      leasing_.insert(*id);
    }
    auto ready = SubmitCall(*id, shape_.ready_method, shape_.ready_args);
    std::weak_ptr<Pool> weak = weak_from_this();
    ready->OnDone([weak, id = *id, ready] {
      if (auto self = weak.lock()) self->LeaseAnswered(id, *ready);
    });
  }

  // Runs where the ready call's reply was read: a worker that did not come up is killed on a
  // background thread (a GCS call), and not at all once the pools shut down (it dies with its
  // owner, and the runtime may be going away).
  void LeaseAnswered(const std::string& id, const worker::ObjectState& ready) {
    bool shut_down;
    bool cancelled = false;
    {
      absl::MutexLock lock(&mu_);
      if (cancelled_.erase(id) > 0) {
        // The reaper cancelled it while the queue was empty. A task queued since counted on
        // this lease, so the queue is pumped again, or it would wait with no lease at all.
        --leases_in_flight_;
        if (queue_.empty() || shut_down_) return;
        cancelled = true;
      } else {
        leasing_.erase(id);
      }
      shut_down = shut_down_;
      if (!cancelled && ready.status().ok()) {
        --leases_in_flight_;
        lease_failures_ = 0;
        ++stats_.workers_leased;
        if (!shut_down) workers_[id] = Worker{0, 0, absl::Now(), absl::Now()};
      }
    }
    if (shut_down) return;
    if (!cancelled && !ready.status().ok()) {
      Background::Get().Run([id] { KillActor(id, true).IgnoreError(); });
      LeaseFailed(ready.status());
      return;
    }
    Pump();
  }

  // A lease that failed: after kMaxLeaseFailures in a row with no worker to fall back on, the
  // queue fails with the reason (a worker that cannot start: a missing program, an import
  // error in Python, resources no node has).
  void LeaseFailed(const absl::Status& why) {
    std::deque<TaskPtr> failed;
    {
      absl::MutexLock lock(&mu_);
      --leases_in_flight_;
      ++lease_failures_;
      if (lease_failures_ >= kMaxLeaseFailures && workers_.empty() && leases_in_flight_ == 0) {
        failed.swap(queue_);
        lease_failures_ = 0;
      }
    }
    for (auto& task : failed) {
      task->result->Set(worker::MakeError(
          why.code(),
          worker::ErrorKind(why).empty() ? worker::error_kind::kCreationFailed
                                         : worker::ErrorKind(why),
          absl::StrCat("task ", task->spec.function, ": no worker could start for it (",
                       kMaxLeaseFailures, " tries): ", why.message())));
    }
    if (failed.empty()) Pump();
  }

  TaskSubmission shape_;  // what every worker of the pool is created with
  absl::Mutex mu_;
  std::deque<TaskPtr> queue_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Worker> workers_ ABSL_GUARDED_BY(mu_);  // answering
  std::set<std::string> leasing_ ABSL_GUARDED_BY(mu_);          // created, not answering yet
  std::set<std::string> cancelled_ ABSL_GUARDED_BY(mu_);        // leases the reaper cancelled
  int leases_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  int reclaims_in_flight_ ABSL_GUARDED_BY(mu_) = 0;  // lent idle workers being taken back
  int lease_failures_ ABSL_GUARDED_BY(mu_) = 0;
  // A moving average of the time a worker spends on one task (0: none done yet).
  absl::Duration task_time_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  TaskPoolStats stats_ ABSL_GUARDED_BY(mu_);
};

// The pools of this process, by shape, and the thread that reaps them.
class Pools {
 public:
  static Pools& Get() {
    static auto* pools = new Pools();  // never destroyed: detached threads may still use it
    return *pools;
  }

  std::shared_ptr<Pool> For(const TaskSubmission& task) {
    std::string key = Key(task);
    absl::MutexLock lock(&mu_);
    auto& pool = pools_[key];
    if (!pool) pool = std::make_shared<Pool>(task);
    if (!stop_reaper_) {
      stop_reaper_ = std::make_shared<bool>(false);
      Background::Get().Run([this, stop = stop_reaper_] { ReapLoop(stop); });
    }
    return pool;
  }

  void ShutDown() {
    std::map<std::string, std::shared_ptr<Pool>> pools;
    {
      absl::MutexLock lock(&mu_);
      pools.swap(pools_);
      if (stop_reaper_) *stop_reaper_ = true;
      stop_reaper_ = nullptr;
    }
    for (auto& [key, pool] : pools) pool->ShutDown();
  }

  std::vector<TaskPoolStats> Stats() {
    std::vector<std::shared_ptr<Pool>> pools;
    {
      absl::MutexLock lock(&mu_);
      for (auto& [key, pool] : pools_) pools.push_back(pool);
    }
    std::vector<TaskPoolStats> out;
    for (auto& pool : pools) out.push_back(pool->Stats());
    return out;
  }

 private:
  // Everything a pool's workers are created with.
  static std::string Key(const TaskSubmission& t) {
    const ActorOptions& o = t.worker;
    std::vector<std::string> resources, env;
    for (const auto& [k, v] : o.resources) resources.push_back(absl::StrCat(k, "=", v));
    for (const auto& [k, v] : o.env) env.push_back(absl::StrCat(k, "=", v));
    return absl::StrJoin(
        {t.worker_class, t.worker_init_args, std::string(ToString(o.language)), o.code_path,
         absl::StrJoin(resources, ","), std::string(ToString(o.scheduling_strategy)),
         o.affinity_node_id, absl::StrCat(o.affinity_soft), o.placement_group_id,
         absl::StrCat(o.bundle_index), absl::StrJoin(env, ","), o.actor_namespace},
        "\x1f");
  }

  // Reaps every kTaskPoolReapInterval until *stop (set under mu_ by ShutDown).
  void ReapLoop(std::shared_ptr<bool> stop) {
    while (true) {
      std::vector<std::shared_ptr<Pool>> pools;
      {
        absl::MutexLock lock(&mu_);
        mu_.AwaitWithTimeout(absl::Condition(stop.get()), kTaskPoolReapInterval);
        if (*stop) return;
        for (auto& [key, pool] : pools_) pools.push_back(pool);
      }
      absl::Time now = absl::Now();
      for (auto& pool : pools) pool->Reap(now);
    }
  }

  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Pool>> pools_ ABSL_GUARDED_BY(mu_);
  // The running reaper's stop flag (read and set under mu_); null while none runs.
  std::shared_ptr<bool> stop_reaper_ ABSL_GUARDED_BY(mu_);
};

// The C++ task worker: hosts the functions this program registered with PHALANX_FUNCTION. A
// cancel of the task it runs (Interrupt) marks that call cancelled: C++ code cannot be
// interrupted, so the function sees it in IsCanceled() and may stop early.
class CppTaskWorker final : public worker::ActorInstance {
 public:
  worker::CallOutcome Call(const std::string& method, const std::string& args) override {
    if (method == kTaskWorkerReadyMethod) return {absl::OkStatus(), PackValue(true)};
    {
      absl::MutexLock lock(&mu_);
      running_ = worker::CurrentCall();
    }
    worker::CallOutcome outcome = Run(method, args);
    absl::MutexLock lock(&mu_);
    running_.clear();
    return outcome;
  }

  bool Interrupt() override {
    absl::MutexLock lock(&mu_);
    if (running_.empty()) return false;
    worker::MarkCallCancelled(running_);
    return true;
  }

 private:
  static worker::CallOutcome Run(const std::string& method, const std::string& args) {
    const auto& table = FunctionTable();
    auto it = table.find(method);
    if (it == table.end()) {
      std::vector<std::string> known;
      for (const auto& [name, fn] : table) known.push_back(name);
      return {
          worker::MakeError(absl::StatusCode::kInvalidArgument, worker::error_kind::kInvalidCall,
                            absl::StrCat("this program registers no function '", method,
                                         "' (registered: ", absl::StrJoin(known, ", "),
                                         "): add PHALANX_FUNCTION(", method, ")")),
          ""};
    }
    return it->second(args);
  }

  absl::Mutex mu_;
  std::string running_ ABSL_GUARDED_BY(mu_);  // CurrentCall() of the task it runs ("": none)
};

}  // namespace

void RegisterTaskWorkerClass() {
  static bool registered = [] {
    worker::ActorClass cls;
    cls.name = kCppTaskWorkerClass;
    cls.create = [](const std::string&) -> absl::StatusOr<std::unique_ptr<worker::ActorInstance>> {
      return std::unique_ptr<worker::ActorInstance>(new CppTaskWorker());
    };
    worker::ActorRegistry::Global().Register(std::move(cls));
    return true;
  }();
  (void)registered;
}

std::shared_ptr<worker::ObjectState> SubmitTask(TaskSubmission spec) {
  auto task = std::make_shared<Task>();
  task->result = std::make_shared<worker::ObjectState>();
  auto result = task->result;
  if (worker::CoreWorker::Get() == nullptr) {
    result->Set(
        absl::FailedPreconditionError("phalanx is not initialized: call phalanx::Init() first"));
    return result;
  }
  std::shared_ptr<Pool> pool = Pools::Get().For(spec);
  std::vector<std::shared_ptr<worker::ObjectState>> deps = std::move(spec.deps);
  spec.deps.clear();
  task->spec = std::move(spec);
  task->pool = pool;
  TaskRegistry::Get().Add(task);
  if (deps.empty()) {
    task->payload = task->spec.assemble({});
    pool->Enqueue(std::move(task));
    return result;
  }
  // Resolved when the last dependency completes (on the thread that completes it).
  auto left = std::make_shared<std::atomic<int>>(static_cast<int>(deps.size()));
  for (const auto& dep : deps) {
    dep->OnDone([task, deps, left, pool] {
      if (left->fetch_sub(1) != 1 || task->cancelled) return;
      std::vector<std::string> values;
      for (const auto& d : deps) {
        if (!d->status().ok()) {
          task->result->Set(d->status(), d->value());
          return;
        }
        values.push_back(d->value());
      }
      task->payload = task->spec.assemble(values);
      pool->Enqueue(task);
    });
  }
  return result;
}

void RunInBackground(std::function<void()> fn) { Background::Get().Run(std::move(fn)); }

absl::Status CancelTask(const std::shared_ptr<worker::ObjectState>& result, bool force) {
  TaskPtr task = TaskRegistry::Get().Find(result.get());
  if (task == nullptr) {
    if (result->done()) return absl::OkStatus();  // finished: it keeps its result
    return absl::InvalidArgumentError(
        "not a task of this process (an actor call is stopped with phalanx::Kill)");
  }
  task->cancelled = true;
  std::string running;
  bool alone = false, interruptible = false;
  if (auto pool = task->pool.lock()) {
    std::tie(running, alone) = pool->Cancel(task);
    interruptible = pool->Interruptible();
  }
  const bool killed = force && !running.empty();
  // Not forced: a Python task that runs now gets KeyboardInterrupt, as in Ray, and a C++ one
  // sees IsCanceled() (one that waits behind another on its worker, pipelined, is only
  // dropped).
  const bool interrupt = !force && !running.empty() && alone;
  result->Set(worker::MakeError(
      absl::StatusCode::kCancelled, worker::error_kind::kTaskCancelled,
      absl::StrCat("task ", task->spec.function, " was cancelled",
                   killed            ? " (its worker was killed)"
                   : running.empty() ? " before it ran"
                   : !interrupt      ? " (it runs on, and its result is dropped)"
                   : interruptible   ? " while it ran (KeyboardInterrupt was raised in it)"
                                     : " while it ran (it sees IsCanceled(); its result is "
                                       "dropped)")));
  if (killed) {
    Background::Get().Run([running] { KillActor(running, /*no_restart=*/true).IgnoreError(); });
  }
  if (interrupt) SubmitCall(running, worker::kInterruptMethod, "");  // answered at once
  return absl::OkStatus();
}

bool WaitForResult(const std::shared_ptr<worker::ObjectState>& state, absl::Duration timeout) {
  if (state->done()) return true;
  worker::BlockedScope blocked;
  return state->Wait(timeout);
}

std::vector<bool> WaitForResults(const std::vector<std::shared_ptr<worker::ObjectState>>& states,
                                 int num_ready, absl::Duration timeout) {
  std::vector<bool> done;
  for (const auto& s : states) done.push_back(s->done());
  if (std::count(done.begin(), done.end(), true) >= num_ready) return done;
  worker::BlockedScope blocked;
  return worker::WaitAny(states, num_ready, timeout);
}

void ShutdownTaskPools() {
  Pools::Get().ShutDown();
  if (!Background::Get().Drain()) {
    spdlog::warn(
        "task pools: a lease or the reaper was still inside the runtime after {}; "
        "shutting down anyway",
        absl::FormatDuration(kBackgroundShutdownWait));
  }
}

std::vector<TaskPoolStats> GetTaskPoolStats() { return Pools::Get().Stats(); }

}  // namespace phalanx::internal
