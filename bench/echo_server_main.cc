// bench_echo_server PORT [sync|callback|handoff]: a raw gRPC unary echo server, the floor for
// RPC benchmarks.
//   sync      gRPC's synchronous API (a pool of threads that each block in a call);
//   callback  gRPC's callback API (the reply finished in the handler, on gRPC's own thread);
//   handoff   the callback API, the reply finished from one other thread that takes the
//             calls in batches: the shape of a durable write's acknowledgement (the GCS
//             answers a write once its store's writer thread has it persisted), with no
//             store behind it. Not a floor: what the hand-off alone costs.
// The benchmarks take the faster of sync and callback as the floor, so that the peer is
// raw gRPC at its best.
#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "echo.grpc.pb.h"

namespace {

using phalanx::bench::EchoMessage;
using phalanx::bench::EchoService;

class SyncEcho final : public EchoService::Service {
  grpc::Status Echo(grpc::ServerContext*, const EchoMessage* request, EchoMessage* reply) override {
    reply->set_data(request->data());
    return grpc::Status::OK;
  }
};

// Finishes the reactors it is given, in batches, on a thread of its own.
class Finisher {
 public:
  Finisher() : thread_([this] { Run(); }) { thread_.detach(); }  // lives as long as the process
  void Add(grpc::ServerUnaryReactor* reactor) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(reactor);
    }
    cv_.notify_one();
  }

 private:
  void Run() {
    for (;;) {
      std::deque<grpc::ServerUnaryReactor*> batch;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return !queue_.empty(); });
        batch.swap(queue_);
      }
      for (auto* reactor : batch) reactor->Finish(grpc::Status::OK);
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<grpc::ServerUnaryReactor*> queue_;
  std::thread thread_;
};

class CallbackEcho final : public EchoService::CallbackService {
 public:
  explicit CallbackEcho(Finisher* finisher) : finisher_(finisher) {}

  grpc::ServerUnaryReactor* Echo(grpc::CallbackServerContext* context, const EchoMessage* request,
                                 EchoMessage* reply) override {
    reply->set_data(request->data());
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    if (finisher_ != nullptr) {
      finisher_->Add(reactor);
    } else {
      reactor->Finish(grpc::Status::OK);
    }
    return reactor;
  }

 private:
  Finisher* const finisher_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_echo_server PORT [sync|callback|handoff]\n");
    return 2;
  }
  std::string api = argc > 2 ? argv[2] : "sync";
  if (api != "sync" && api != "callback" && api != "handoff") {
    std::fprintf(stderr, "bench_echo_server: API '%s' is not sync, callback or handoff\n",
                 api.c_str());
    return 2;
  }
  SyncEcho sync_service;
  Finisher* finisher = api == "handoff" ? new Finisher : nullptr;
  CallbackEcho callback_service(finisher);
  // Plain gRPC, no token check: the floor that Phalanx's servers are compared with.
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat("127.0.0.1:", argv[1]), grpc::InsecureServerCredentials());
  if (api == "sync") {
    builder.RegisterService(&sync_service);
  } else {
    builder.RegisterService(&callback_service);
  }
  auto server = builder.BuildAndStart();
  if (!server) return 1;
  server->Wait();
  return 0;
}
