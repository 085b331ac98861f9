#include "runtime/worker/worker_host.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "runtime/common/logging.h"
#include "runtime/common/signals.h"
#include "runtime/proto/node.grpc.pb.h"
#include "runtime/proto/worker.grpc.pb.h"
#include "runtime/rpc/describe.h"
#include "runtime/rpc/rpc.h"
#include "runtime/worker/actor_registry.h"
#include "runtime/worker/core_worker.h"
#include "runtime/worker/errors.h"
#include "runtime/worker/executor.h"

namespace phalanx {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// Writes results to one caller's stream, batching those that arrive while a write is in
// flight, and lets the stream's handler wait until every call it dispatched has answered.
class ResultSink {
 public:
  explicit ResultSink(grpc::ServerReaderWriter<rpc::ResultBatch, rpc::CallBatch>* stream)
      : stream_(stream) {}

  void Expect(int n) {
    absl::MutexLock lock(&mu_);
    expected_ += n;
  }

  void Push(rpc::CallResult result) {
    absl::MutexLock lock(&mu_);
    queue_.push_back(std::move(result));
    if (writing_) return;
    writing_ = true;
    while (!queue_.empty()) {
      rpc::ResultBatch batch;
      for (auto& r : queue_) *batch.add_results() = std::move(r);
      size_t n = queue_.size();
      queue_.clear();
      mu_.Unlock();
      if (!broken_) broken_ = !stream_->Write(batch);
      mu_.Lock();
      answered_ += static_cast<int64_t>(n);
    }
    writing_ = false;
  }

  void WaitAllAnswered() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](ResultSink* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
          return !s->writing_ && s->answered_ >= s->expected_;
        },
        this));
  }

 private:
  grpc::ServerReaderWriter<rpc::ResultBatch, rpc::CallBatch>* const stream_;
  absl::Mutex mu_;
  std::vector<rpc::CallResult> queue_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> broken_{false};
  int64_t expected_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t answered_ ABSL_GUARDED_BY(mu_) = 0;
};

class Host;

class WorkerServiceImpl final : public rpc::WorkerService::Service {
 public:
  WorkerServiceImpl(Host* host, std::string token) : host_(host), token_(std::move(token)) {}
  grpc::Status PushCalls(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<rpc::ResultBatch, rpc::CallBatch>* stream) override;
  grpc::Status Exit(grpc::ServerContext* context, const rpc::WorkerExitRequest* request,
                    rpc::WorkerExitReply*) override;
  grpc::Status GetStats(grpc::ServerContext* context, const rpc::WorkerStatsRequest*,
                        rpc::WorkerStatsReply* reply) override;

 private:
  Host* host_;
  const std::string token_;
};

class Host {
 public:
  int Run() {
    BlockTerminationSignals();
    actor_id_ = Env("PHALANX_WORKER_ACTOR_ID");
    absl::SimpleAtoi(Env("PHALANX_WORKER_ATTEMPT"), &attempt_);
    token_ = Env("PHALANX_TOKEN");
    std::string node_address = Env("PHALANX_NODE_ADDRESS");
    InitLogging(absl::StrCat("worker ", actor_id_.substr(0, 8)));
    node_ = rpc::NodeManagerService::NewStub(rpc::MakeChannel(node_address));

    rpc::WorkerStartedRequest started;
    started.set_actor_id(actor_id_);
    started.set_attempt(attempt_);
    started.set_pid(getpid());
    rpc::WorkerStartedReply info;
    {
      grpc::ClientContext ctx;
      rpc::PrepareContext(&ctx, token_, absl::Seconds(30));
      auto s = node_->WorkerStarted(&ctx, started, &info);
      if (!s.ok()) {
        spdlog::error("the node manager at {} does not know this worker: {}", node_address,
                      s.error_message());
        return 1;
      }
    }
    actor_ = info.actor();

    CoreWorkerOptions core;
    core.address = Env("PHALANX_ADDRESS");
    core.token = token_;
    core.job_id = actor_.job_id();
    core.namespace_ = actor_.namespace_();
    core.code_path = actor_.code_path();
    if (auto s = CoreWorker::Init(core); !s.ok()) {
      spdlog::warn("no GCS connection for nested calls: {}", s);
    }

    service_ = std::make_unique<WorkerServiceImpl>(this, token_);
    auto server = rpc::StartServer("0.0.0.0:0", {service_.get()});
    if (!server.ok())
      return Ready(absl::StrCat("cannot start the worker's server: ", server.status().message()));
    server_ = std::move(server->server);
    std::string host = node_address.substr(0, node_address.rfind(':'));
    address_ = absl::StrCat(host, ":", server->port);

    const ActorClass* cls = ActorRegistry::Global().Find(actor_.class_name());
    if (cls == nullptr) {
      return Ready(
          absl::StrCat("class ", actor_.class_name(), " is not registered in ", actor_.code_path(),
                       " (registered: ", absl::StrJoin(ActorRegistry::Global().Names(), ", "),
                       "); register it with PHALANX_ACTOR"));
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
    default_executor_ = default_concurrency == 1
                            ? MakeSerialExecutor("actor-default")
                            : MakeFiberExecutor("actor-default", default_concurrency);
    for (const auto& [group, concurrency] : cls->group_concurrency) {
      group_executors_[group] = concurrency <= 1 ? MakeSerialExecutor("actor-" + group)
                                                 : MakeFiberExecutor("actor-" + group, concurrency);
    }
    method_group_ = cls->method_group;
    if (int rc = Ready(""); rc != 0) return rc;
    spdlog::info("{} ready at {}", rpc::DescribeActor(actor_), address_);

    std::thread exit_watch([this] {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(&exit_requested_));
      RequestTermination();
    });
    WaitForTerminationSignal();
    {
      absl::MutexLock lock(&mu_);
      exit_requested_ = true;
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

  void Dispatch(const rpc::ActorCall& call, const std::shared_ptr<ResultSink>& sink) {
    Executor* executor = default_executor_.get();
    auto g = method_group_.find(call.method());
    if (g != method_group_.end()) {
      auto e = group_executors_.find(g->second);
      if (e != group_executors_.end()) executor = e->second.get();
    }
    executor->Post([this, call, sink] {
      CallOutcome outcome = instance_->Call(call.method(), call.args());
      rpc::CallResult result;
      result.set_seq(call.seq());
      if (outcome.status.ok()) {
        result.set_value(std::move(outcome.value));
      } else {
        result.set_code(static_cast<int>(outcome.status.code()));
        result.set_error(std::string(outcome.status.message()));
        result.set_error_kind(ErrorKind(outcome.status));
      }
      calls_done_.fetch_add(1, std::memory_order_relaxed);
      sink->Push(std::move(result));
    });
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
  std::unique_ptr<ActorInstance> instance_;
  std::unique_ptr<Executor> default_executor_;
  std::map<std::string, std::unique_ptr<Executor>> group_executors_;
  std::map<std::string, std::string> method_group_;
  std::atomic<int64_t> calls_done_{0};
  absl::Mutex mu_;
  bool exit_requested_ ABSL_GUARDED_BY(mu_) = false;
};

grpc::Status WorkerServiceImpl::PushCalls(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<rpc::ResultBatch, rpc::CallBatch>* stream) {
  if (auto auth = rpc::CheckToken(*context, token_); !auth.ok()) return auth;
  auto sink = std::make_shared<ResultSink>(stream);
  rpc::CallBatch batch;
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
    }
    sink->Expect(batch.calls_size());
    for (const auto& call : batch.calls()) host_->Dispatch(call, sink);
  }
  sink->WaitAllAnswered();
  return grpc::Status::OK;
}

grpc::Status WorkerServiceImpl::Exit(grpc::ServerContext* context, const rpc::WorkerExitRequest*,
                                     rpc::WorkerExitReply*) {
  if (auto auth = rpc::CheckToken(*context, token_); !auth.ok()) return auth;
  host_->RequestExit();
  return grpc::Status::OK;
}

grpc::Status WorkerServiceImpl::GetStats(grpc::ServerContext* context,
                                         const rpc::WorkerStatsRequest*,
                                         rpc::WorkerStatsReply* reply) {
  if (auto auth = rpc::CheckToken(*context, token_); !auth.ok()) return auth;
  reply->set_actor_id(host_->actor_id());
  reply->set_calls_done(host_->calls_done());
  return grpc::Status::OK;
}

}  // namespace

bool InWorkerMode() { return !Env("PHALANX_WORKER_ACTOR_ID").empty(); }

int RunWorker() {
  static Host* host = new Host();  // lives until the process ends
  return host->Run();
}

}  // namespace phalanx
