#include "worker/worker_host.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <map>
#include <optional>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "base/describe.h"
#include "base/ids.h"
#include "base/logging.h"
#include "base/node_lease.h"
#include "base/process.h"
#include "base/proto/node.grpc.pb.h"
#include "base/proto/worker.grpc.pb.h"
#include "base/rpc.h"
#include "base/signals.h"
#include "base/tls.h"
#include "base/worker_env.h"
#include "worker/actor_registry.h"
#include "worker/call_ledger.h"
#include "worker/core_worker.h"
#include "worker/errors.h"
#include "worker/executor.h"
#include "worker/fork_server.h"

namespace phalanx::worker {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// Sends stdout and stderr to `path` (a prestarted worker moves to its actor's log).
void RedirectOutput(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return;
  std::fflush(stdout);
  std::fflush(stderr);
  ::dup2(fd, 1);
  ::dup2(fd, 2);
  ::close(fd);
}

class Host;

class WorkerServiceImpl final : public rpc::WorkerService::Service {
 public:
  explicit WorkerServiceImpl(Host* host) : host_(host) {}
  grpc::Status PushCalls(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<rpc::ResultBatch, rpc::CallBatch>* stream) override;
  grpc::Status Exit(grpc::ServerContext* context, const rpc::WorkerExitRequest* request,
                    rpc::WorkerExitReply*) override;
  grpc::Status GetStats(grpc::ServerContext* context, const rpc::WorkerStatsRequest*,
                        rpc::WorkerStatsReply* reply) override;

 private:
  Host* host_;
};

// A worker outlives its node's membership only until its node manager fences it; if the
// node manager cannot (it is stopped), the worker fences itself once the node's lease is
// older than the node timeout plus this margin (the margin lets a live node manager act
// first, and say so in its log).
constexpr absl::Duration kSelfFenceMargin = absl::Milliseconds(500);
constexpr absl::Duration kLeaseCheckPeriod = absl::Milliseconds(50);

void WatchNodeLease(const std::string& path) {
  if (path.empty()) return;  // not started by a node manager (tests)
  auto lease = NodeLease::Open(path);
  if (!lease.ok()) {
    spdlog::warn("cannot watch the node's lease: {}", lease.status());
    return;
  }
  std::thread([lease = std::shared_ptr<NodeLease>(std::move(*lease))] {
    while (true) {
      absl::SleepFor(kLeaseCheckPeriod);
      if (lease->Age() > lease->timeout() + kSelfFenceMargin) {
        spdlog::error(
            "the node's lease is {} old (node timeout {}): this node is cut off from the GCS or "
            "its node manager is stopped, and the cluster has given this worker up; exiting "
            "(fenced)",
            absl::FormatDuration(lease->Age()), absl::FormatDuration(lease->timeout()));
        spdlog::default_logger()->flush();
        ::kill(::getpid(), SIGKILL);
      }
    }
  }).detach();
}

// CurrentCall(): the caller and seq of the call this thread runs (null: none), built into
// its string only when asked.
// How long the call of a plain method that ended its actor waits for the process to end
// (Host::WaitForExit): past phalanx.actor's EXIT_WAIT_S (10 s), after which it ends itself.
constexpr absl::Duration kExitingCallWait = absl::Seconds(15);

thread_local const std::string* current_caller = nullptr;
thread_local uint64_t current_seq = 0;

// How many calls of a concurrent (non-serial) executor are started and not yet done: an
// async method's call ends on its event loop, after its thread took the next call, so the
// actor's max_concurrency is kept by these counts rather than by the executor's threads.
class CallSlots {
 public:
  explicit CallSlots(int max) : max_(max) {}
  void Acquire() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &CallSlots::Free));
    ++used_;
  }
  void Release() {
    absl::MutexLock lock(&mu_);
    --used_;
  }

 private:
  bool Free() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return used_ < max_; }
  const int max_;
  absl::Mutex mu_;
  int used_ ABSL_GUARDED_BY(mu_) = 0;
};
absl::Mutex hosted_mu;
std::optional<HostedActor> hosted ABSL_GUARDED_BY(hosted_mu);

class Host {
 public:
  int Run() {
    BlockTerminationSignals();
    // SIGUSR1: the node's warning that this worker nears its memory limit.
    sigset_t warn;
    sigemptyset(&warn);
    sigaddset(&warn, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &warn, nullptr);
    std::thread([warn] {
      while (true) {
        int sig = 0;
        if (sigwait(&warn, &sig) == 0 && sig == SIGUSR1) {
          spdlog::warn("near the memory limit: dying gasp");
          RunDyingGaspHooks("memory warning", 5000);
        }
      }
    }).detach();
    actor_id_ = Env("PHALANX_WORKER_ACTOR_ID");
    if (!absl::SimpleAtoi(Env("PHALANX_WORKER_ATTEMPT"), &attempt_)) attempt_ = 0;  // unset: first
    WatchNodeLease(Env(kNodeLeaseEnv));
    token_ = Env("PHALANX_TOKEN");
    std::string node_address = Env("PHALANX_NODE_ADDRESS");
    InitLogging(absl::StrCat("worker ", actor_id_.substr(0, 8)));
    // The node's TLS dir (empty: plaintext); a worker that cannot read it cannot serve.
    absl::Status tls = rpc::UseTls(Env("PHALANX_TLS_DIR"));
    node_ = rpc::NodeManagerService::NewStub(rpc::MakeChannel(node_address));

    // Everything that does not depend on the actor happens first, so that a prestarted
    // worker has it done before an actor is placed on it: the server, the GCS connection.
    service_ = std::make_unique<WorkerServiceImpl>(this);
    auto server = tls.ok() ? rpc::StartServer("0.0.0.0:0", {service_.get()},
                                              {token_, rpc::kMaxCallMessageBytes})
                           : absl::StatusOr<rpc::StartedServer>(tls);
    if (server.ok()) {
      server_ = std::move(server->server);
      std::string host = node_address.substr(0, node_address.rfind(':'));
      address_ = absl::StrCat(host, ":", server->port);
    } else {
      server_error_ = std::string(server.status().message());
    }
    CoreWorkerOptions core;
    core.address = Env("PHALANX_ADDRESS");
    core.token = token_;
    if (auto s = CoreWorker::Init(core); !s.ok()) {
      spdlog::warn("no GCS connection for nested calls: {}", s);
    }

    rpc::WorkerStartedRequest started;
    started.set_actor_id(actor_id_);
    started.set_attempt(attempt_);
    started.set_pid(getpid());
    rpc::WorkerStartedReply info;
    // A prestarted worker asks until the node gives it an actor.
    do {
      grpc::ClientContext ctx;
      rpc::PrepareContext(&ctx, token_, absl::Seconds(60));
      info.Clear();
      auto s = node_->WorkerStarted(&ctx, started, &info);
      if (!s.ok()) {
        spdlog::error("the node manager at {} does not know this worker: {}", node_address,
                      s.error_message());
        return 1;
      }
    } while (info.keep_waiting());
    actor_ = info.actor();
    if (actor_id_.empty()) {
      actor_id_ = actor_.actor_id();
      attempt_ = info.attempt();
      if (!info.log_path().empty()) RedirectOutput(info.log_path());
      InitLogging(absl::StrCat("worker ", actor_id_.substr(0, 8)));
      // The one variable a prestarted worker takes on late (see base/worker_env.h);
      // set before the actor exists, while nothing else reads the environment.
      if (auto job = actor_.env().find(kJobIdEnv); job != actor_.env().end()) {
        ::setenv(kJobIdEnv, job->second.c_str(), 1);
      }
    }

    if (CoreWorker* cw = CoreWorker::Get()) {
      cw->Adopt(actor_.job_id(), actor_.namespace_(), actor_.code_path());
    }
    if (!server_) {
      return Ready(absl::StrCat("cannot start the worker's server: ", server_error_));
    }

    // The owner's process is found while the constructor runs, and before the actor reports
    // ready: no call can come before the owner check is in place.
    auto owner_lookup = std::async(std::launch::async, [this] { FindOwner(); });
    const ActorClass* cls = ActorRegistry::Global().Find(actor_.class_name());
    if (cls == nullptr) {
      return Ready(
          absl::StrCat("class ", actor_.class_name(), " is not registered in ", actor_.code_path(),
                       " (registered: ", absl::StrJoin(ActorRegistry::Global().Names(), ", "),
                       "); register it with PHALANX_ACTOR"));
    }
    {
      absl::MutexLock lock(&hosted_mu);
      hosted = HostedActor{actor_id_, attempt_, actor_.class_name()};
    }
    absl::StatusOr<std::unique_ptr<ActorInstance>> instance;
    try {
      instance = cls->create(actor_.init_args());
    } catch (const std::exception& e) {
      instance = absl::InternalError(e.what());
    } catch (...) {
      instance = absl::InternalError("the constructor threw a non-standard exception");
    }
    if (!instance.ok()) return Ready(std::string(instance.status().message()));
    instance_ = std::move(*instance);

    int default_concurrency = std::max(1, actor_.max_concurrency());
    default_serial_ = default_concurrency == 1;
    auto make = [&](const std::string& name, int concurrency) {
      if (concurrency <= 1) return MakeSerialExecutor(name);
      return cls->threaded ? MakeThreadPoolExecutor(name, concurrency)
                           : MakeFiberExecutor(name, concurrency);
    };
    default_executor_ = make("actor-default", default_concurrency);
    slots_[default_executor_.get()] = std::make_unique<CallSlots>(default_concurrency);
    std::map<std::string, int> group_concurrency = cls->group_concurrency;
    method_group_ = cls->method_group;
    instance_->ConcurrencyGroups(&group_concurrency, &method_group_);
    for (const auto& [group, concurrency] : group_concurrency) {
      group_serial_[group] = concurrency <= 1;
      group_executors_[group] = make("actor-" + group, concurrency);
      slots_[group_executors_[group].get()] = std::make_unique<CallSlots>(concurrency);
    }
    owner_lookup.wait();
    if (int rc = Ready(""); rc != 0) return rc;
    spdlog::info("{} ready at {}", rpc::DescribeActor(actor_), address_);

    std::thread exit_watch([this] {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(&exit_requested_));
      RequestTermination();
    });
    int sig = WaitForTerminationSignal();
    bool asked;
    {
      absl::MutexLock lock(&mu_);
      asked = exit_requested_;
      exit_requested_ = true;
    }
    if (!asked) {
      // Told to end from outside (SIGTERM): the actor's last words first.
      spdlog::info("signal {}: dying gasp", sig);
      RunDyingGaspHooks(sig == SIGTERM ? "SIGTERM" : absl::StrCat("signal ", sig), 5000);
    }
    exit_watch.join();
    spdlog::info("exiting");
    spdlog::default_logger()->flush();
    // Skip static destructors of the user's program: the actor's process simply ends.
    std::_Exit(0);
  }

  void RequestExit() {
    absl::MutexLock lock(&mu_);
    exit_requested_ = true;
  }

  // Reports the constructor's outcome to the node; returns the exit code if it failed.
  int Ready(const std::string& error) {
    rpc::WorkerReadyRequest ready;
    ready.set_actor_id(actor_id_);
    ready.set_attempt(attempt_);
    ready.set_address(address_);
    ready.set_error(error);
    grpc::ClientContext ctx;
    rpc::PrepareContext(&ctx, token_, absl::Seconds(30));
    rpc::WorkerReadyReply reply;
    auto s = node_->WorkerReady(&ctx, ready, &reply);
    if (!s.ok()) spdlog::error("cannot tell the node manager: {}", s.error_message());
    if (!error.empty()) {
      spdlog::error("creating {} failed: {}", rpc::DescribeActor(actor_), error);
      spdlog::default_logger()->flush();
      return 1;
    }
    return s.ok() ? 0 : 1;
  }

  // Runs a batch of calls from one caller. Consecutive calls for the same serial executor
  // go to it as one task whose results are written together (flushed at least every
  // millisecond, so a slow call does not hold back the answers before it); calls for a fiber
  // executor are posted one by one so that they can overlap.
  void Dispatch(const std::string& caller, std::vector<rpc::ActorCall> calls) {
    if (std::string gone = OwnerGone(); !gone.empty()) {
      std::vector<rpc::CallResult> results;
      for (const auto& call : calls) {
        rpc::CallResult& r = results.emplace_back();
        r.set_seq(call.seq());
        r.set_code(static_cast<int>(absl::StatusCode::kAborted));
        r.set_error(absl::StrCat(rpc::DescribeActor(actor_), " is dead: ", gone));
        r.set_error_kind(error_kind::kActorDied);
        r.set_value(absl::StrCat("OWNER_DIED: ", gone));  // the cause, till the GCS has one
      }
      ledger_.Done(caller, std::move(results));
      return;
    }
    size_t i = 0;
    while (i < calls.size()) {
      if (calls[i].method() == kInterruptMethod || calls[i].method() == kCancelMethod) {
        rpc::CallResult result;
        result.set_seq(calls[i].seq());
        const bool yes = calls[i].method() == kInterruptMethod ? instance_->Interrupt()
                                                               : CancelCall(caller, calls[i]);
        result.set_value(yes ? "\xc3" : "\xc2");  // msgpack true, false
        std::vector<rpc::CallResult> one;
        one.push_back(std::move(result));
        ledger_.Done(caller, std::move(one));
        ++i;
        continue;
      }
      auto [executor, serial] = ExecutorFor(calls[i]);
      if (!serial) {
        CallSlots* slots = slots_.at(executor).get();
        executor->Post([this, call = std::move(calls[i]), caller, slots] {
          RunAsync(caller, call, slots, [this, caller](rpc::CallResult result) {
            std::vector<rpc::CallResult> one;
            one.push_back(std::move(result));
            ledger_.Done(caller, std::move(one));
          });
        });
        ++i;
        continue;
      }
      std::vector<rpc::ActorCall> run;
      while (i < calls.size() && calls[i].method() != kInterruptMethod &&
             calls[i].method() != kCancelMethod && ExecutorFor(calls[i]).first == executor) {
        run.push_back(std::move(calls[i]));
        ++i;
      }
      executor->Post([this, run = std::move(run), caller] {
        std::vector<rpc::CallResult> results;
        absl::Time last_flush = absl::Now();
        for (const auto& call : run) {
          rpc::CallResult result = Run(caller, call);
          if (result.error_kind() == error_kind::kActorExiting) {
            ledger_.Done(caller, std::move(results));  // the answers before it go out first
            results.clear();
            WaitForExit(&result);
          }
          results.push_back(std::move(result));
          if (absl::Now() - last_flush > absl::Milliseconds(1)) {
            ledger_.Done(caller, std::move(results));
            results.clear();
            last_flush = absl::Now();
          }
        }
        ledger_.Done(caller, std::move(results));
      });
    }
  }

  CallLedger& ledger() { return ledger_; }

  // Ray's ownership: an actor that is not detached dies with the actor that created it. The
  // GCS kills it once the owner's death is reported, which takes a moment; an owner on this
  // machine is also looked at before each batch of calls, so that a call made just after the
  // owner's SIGKILL fails as well. Finds the owner's process, once, before the actor is ready.
  void FindOwner() {
    if (actor_.detached() || actor_.owner_address().empty()) return;
    CoreWorker* cw = CoreWorker::Get();
    if (cw == nullptr) return;
    auto owner = cw->gcs().GetActor(actor_.owner_address());  // NotFound: a driver owns it
    if (!owner.ok() || owner->node_id() != actor_.node_id() || owner->pid() <= 0) return;
    std::string start = ProcessStartTime(owner->pid());
    absl::MutexLock lock(&owner_mu_);
    owner_pid_ = owner->pid();
    owner_start_ = start;  // "" (already gone): ProcessEnding says so
    owner_name_ = absl::StrCat("its owner, actor ", ShortId(owner->actor_id()), " (pid ",
                               owner->pid(), "), died");
  }

  // Why the actor is dead with its owner; "" while the owner runs (or is not on this machine).
  std::string OwnerGone() {
    absl::MutexLock lock(&owner_mu_);
    if (owner_pid_ <= 0) return "";
    if (!owner_gone_ && ProcessEnding(owner_pid_, owner_start_)) {
      owner_gone_ = true;
      spdlog::info("{}: this actor dies with it", owner_name_);
    }
    return owner_gone_ ? owner_name_ : "";
  }

  // The executor of `call`'s concurrency group: the one the call names, else its method's,
  // else the default one.
  std::pair<Executor*, bool> ExecutorFor(const rpc::ActorCall& call) {
    std::string group = call.concurrency_group();
    if (group.empty()) {
      auto g = method_group_.find(call.method());
      if (g != method_group_.end()) group = g->second;
    }
    auto e = group.empty() ? group_executors_.end() : group_executors_.find(group);
    if (e != group_executors_.end()) return {e->second.get(), group_serial_[group]};
    return {default_executor_.get(), default_serial_};
  }

  // Marks a call of `caller` cancelled (kCancelMethod): it will not start, and if it runs
  // now, the actor is told.
  bool CancelCall(const std::string& caller, const rpc::ActorCall& cancel) {
    uint64_t seq = 0;
    if (!absl::SimpleAtoi(cancel.args(), &seq)) return false;
    {
      absl::MutexLock lock(&cancel_mu_);
      const absl::Time now = absl::Now();
      for (auto it = cancelled_.begin(); it != cancelled_.end();) {  // long finished
        it = now - it->second > kCallResultKeep ? cancelled_.erase(it) : std::next(it);
      }
      cancelled_[{caller, seq}] = now;
      cancelled_count_.store(cancelled_.size(), std::memory_order_release);
    }
    MarkCallCancelled(absl::StrCat(caller, "/", seq));
    instance_->Cancel(absl::StrCat(caller, "/", seq));
    return true;
  }

  // The result of a call cancelled before it ran, if `call` is one.
  std::optional<rpc::CallResult> CancelledBeforeRun(const std::string& caller,
                                                    const rpc::ActorCall& call) {
    if (cancelled_count_.load(std::memory_order_acquire) == 0) return std::nullopt;
    absl::MutexLock lock(&cancel_mu_);
    if (cancelled_.erase({caller, call.seq()}) == 0) return std::nullopt;
    cancelled_count_.store(cancelled_.size(), std::memory_order_release);
    rpc::CallResult result;
    result.set_seq(call.seq());
    result.set_code(static_cast<int>(absl::StatusCode::kCancelled));
    result.set_error(absl::StrCat("the call of ", call.method(), " was cancelled before it ran"));
    result.set_error_kind(error_kind::kTaskCancelled);
    return result;
  }

  rpc::CallResult Finished(uint64_t seq, CallOutcome outcome) {
    rpc::CallResult result;
    result.set_seq(seq);
    if (outcome.status.ok()) {
      result.set_value(std::move(outcome.value));
    } else {
      result.set_code(static_cast<int>(outcome.status.code()));
      result.set_error(std::string(outcome.status.message()));
      result.set_error_kind(ErrorKind(outcome.status));
      result.set_value(std::move(outcome.value));  // the error's detail, if any
    }
    calls_done_.fetch_add(1, std::memory_order_relaxed);
    return result;
  }

  rpc::CallResult Run(const std::string& caller, const rpc::ActorCall& call) {
    if (auto cancelled = CancelledBeforeRun(caller, call)) return *std::move(cancelled);
    current_caller = &caller;
    current_seq = call.seq();
    CallOutcome outcome = instance_->Call(call.method(), call.args());
    current_caller = nullptr;
    return Finished(call.seq(), std::move(outcome));
  }

  // Run for a concurrent executor: `done` gets the result, perhaps later and from another
  // thread (an async method's). At most the executor's concurrency run at once (`slots`).
  void RunAsync(const std::string& caller, const rpc::ActorCall& call, CallSlots* slots,
                std::function<void(rpc::CallResult)> done) {
    if (auto cancelled = CancelledBeforeRun(caller, call)) {
      done(*std::move(cancelled));
      return;
    }
    slots->Acquire();
    const uint64_t seq = call.seq();
    current_caller = &caller;
    current_seq = seq;
    instance_->CallAsync(call.method(), call.args(),
                         [this, seq, slots, done = std::move(done)](CallOutcome outcome) {
                           slots->Release();
                           rpc::CallResult result = Finished(seq, std::move(outcome));
                           if (result.error_kind() == error_kind::kActorExiting) {
                             WaitForExit(&result);
                           }
                           done(std::move(result));
                         });
    current_caller = nullptr;
  }

  // A plain method ended the actor (kActorExiting), and the answers before it are written:
  // the instance ends the actor now, so the kill cannot overtake them. Its caller gets no
  // answer but the ActorDiedError of the kill (phalanx.actor's EXIT_WAIT_S, 10 s, at most);
  // if the process still runs after kExitingCallWait, the call fails as a TaskError.
  void WaitForExit(rpc::CallResult* result) {
    instance_->End();
    absl::SleepFor(kExitingCallWait);
    result->set_error_kind(error_kind::kTaskError);
  }

  const std::string& actor_id() const { return actor_id_; }
  int attempt() const { return attempt_; }
  int64_t calls_done() const { return calls_done_.load(); }

 private:
  std::string actor_id_;
  int attempt_ = 0;
  std::string token_;
  std::string address_;
  rpc::ActorInfo actor_;
  std::unique_ptr<rpc::NodeManagerService::Stub> node_;
  std::unique_ptr<WorkerServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string server_error_;
  std::unique_ptr<ActorInstance> instance_;
  std::unique_ptr<Executor> default_executor_;
  bool default_serial_ = true;
  std::map<std::string, std::unique_ptr<Executor>> group_executors_;
  std::map<std::string, bool> group_serial_;
  std::map<std::string, std::string> method_group_;
  std::atomic<int64_t> calls_done_{0};
  CallLedger ledger_;
  absl::Mutex mu_;
  bool exit_requested_ ABSL_GUARDED_BY(mu_) = false;
  // Calls cancelled (caller, seq) before they ran, and when: kept kCallResultKeep at most.
  absl::Mutex cancel_mu_;
  std::map<std::pair<std::string, uint64_t>, absl::Time> cancelled_ ABSL_GUARDED_BY(cancel_mu_);
  std::atomic<size_t> cancelled_count_{0};  // cancelled_.size(), read without the lock
  std::map<Executor*, std::unique_ptr<CallSlots>> slots_;  // per concurrent executor
  absl::Mutex owner_mu_;
  pid_t owner_pid_ ABSL_GUARDED_BY(owner_mu_) = 0;  // 0: none on this machine, or not known
  std::string owner_start_ ABSL_GUARDED_BY(owner_mu_);
  std::string owner_name_ ABSL_GUARDED_BY(owner_mu_);
  bool owner_gone_ ABSL_GUARDED_BY(owner_mu_) = false;
};

grpc::Status WorkerServiceImpl::PushCalls(
    grpc::ServerContext*, grpc::ServerReaderWriter<rpc::ResultBatch, rpc::CallBatch>* stream) {
  auto sink = std::make_shared<ResultSink>(stream);
  rpc::CallBatch batch;
  std::string caller;
  bool first = true;
  while (stream->Read(&batch)) {
    if (first) {
      first = false;
      if ((!batch.actor_id().empty() && batch.actor_id() != host_->actor_id()) ||
          batch.attempt() != host_->attempt()) {
        return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                            absl::StrCat("this worker hosts attempt ", host_->attempt(),
                                         " of actor ", host_->actor_id(), ", not attempt ",
                                         batch.attempt(), " of ", batch.actor_id()));
      }
      caller = batch.caller_id();
      host_->ledger().Attach(caller, sink);
    }
    sink->Expect(batch);
    host_->Dispatch(caller, host_->ledger().Admit(caller, &batch));
  }
  sink->WaitAllAnswered();
  host_->ledger().Detach(caller, sink);
  sink->Close();
  return grpc::Status::OK;
}

grpc::Status WorkerServiceImpl::Exit(grpc::ServerContext*, const rpc::WorkerExitRequest*,
                                     rpc::WorkerExitReply*) {
  host_->RequestExit();
  return grpc::Status::OK;
}

grpc::Status WorkerServiceImpl::GetStats(grpc::ServerContext*, const rpc::WorkerStatsRequest*,
                                         rpc::WorkerStatsReply* reply) {
  reply->set_actor_id(host_->actor_id());
  reply->set_calls_done(host_->calls_done());
  return grpc::Status::OK;
}

}  // namespace

bool InWorkerMode() {
  return !Env("PHALANX_WORKER_ACTOR_ID").empty() || Env("PHALANX_WORKER_POOLED") == "1" ||
         Env(kForkServerEnv) == "1";
}

std::string CurrentCall() {
  return current_caller == nullptr ? "" : absl::StrCat(*current_caller, "/", current_seq);
}

namespace {
absl::Mutex cancelled_calls_mu;
std::map<std::string, absl::Time> cancelled_calls ABSL_GUARDED_BY(cancelled_calls_mu);
}  // namespace

void MarkCallCancelled(const std::string& call) {
  absl::MutexLock lock(&cancelled_calls_mu);
  const absl::Time now = absl::Now();
  for (auto it = cancelled_calls.begin(); it != cancelled_calls.end();) {  // long finished
    it = now - it->second > kCallResultKeep ? cancelled_calls.erase(it) : std::next(it);
  }
  cancelled_calls[call] = now;
}

bool CurrentCallCancelled() {
  if (current_caller == nullptr) return false;
  const std::string call = CurrentCall();
  absl::MutexLock lock(&cancelled_calls_mu);
  return cancelled_calls.count(call) > 0;
}

std::optional<HostedActor> CurrentHostedActor() {
  absl::MutexLock lock(&hosted_mu);
  return hosted;
}

int RunWorker() {
  // A fork server returns here only in a worker it forked, set up as the node asked.
  if (Env(kForkServerEnv) == "1") ServeForks();
  static Host* host = new Host();  // lives until the process ends
  return host->Run();
}

}  // namespace phalanx::worker
