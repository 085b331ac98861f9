// bench_echo_server PORT [sync|callback|handoff|persist REDIS_PORT REDIS_PASSWORD]: a raw
// gRPC unary echo server, the floor for RPC benchmarks.
//   sync      gRPC's synchronous API (a pool of threads that each block in a call);
//   callback  gRPC's callback API (the reply finished in the handler, on gRPC's own thread);
//   handoff   the callback API, the reply finished from one other thread that takes the
//             calls in batches: the shape of a durable write's acknowledgement (the GCS
//             answers a write once its store's writer thread has it persisted), with no
//             store behind it. Not a floor: what the hand-off alone costs;
//   persist   handoff, and that thread first writes each call's data to Redis (an HSET per
//             call into one hash, each batch pipelined, as the GCS's store writes): what an
//             acknowledgement after persisting costs, with nothing else of the GCS.
// The benchmarks take the faster of sync and callback as the floor, so that the peer is
// raw gRPC at its best.
#include <grpcpp/grpcpp.h>
#include <hiredis/hiredis.h>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "base/mutex_check.h"
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

// Finishes the calls it is given, in batches, on a thread of its own; with a Redis
// connection, once each call's data is written there.
class Finisher {
 public:
  // `redis`: null, or a connection this finisher owns.
  explicit Finisher(redisContext* redis) : redis_(redis), thread_([this] { Run(); }) {
    thread_.detach();  // lives as long as the process
  }
  void Add(grpc::ServerUnaryReactor* reactor, const std::string* data) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back({reactor, data});
    }
    cv_.notify_one();
  }

 private:
  struct Call {
    grpc::ServerUnaryReactor* reactor;
    const std::string* data;  // the request's, alive until the call is finished
  };

  void Run() {
    for (;;) {
      std::deque<Call> batch;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return !queue_.empty(); });
        batch.swap(queue_);
      }
      grpc::Status status = redis_ != nullptr ? Persist(batch) : grpc::Status::OK;
      for (const Call& call : batch) call.reactor->Finish(status);
    }
  }

  grpc::Status Persist(const std::deque<Call>& batch) {
    for (const Call& call : batch) {
      std::string field = std::to_string(next_field_++ % 1000);
      redisAppendCommand(redis_, "HSET bench:echo %b %b", field.data(), field.size(),
                         call.data->data(), call.data->size());
    }
    bool ok = true;
    for (size_t i = 0; i < batch.size(); ++i) {
      void* reply = nullptr;
      if (redisGetReply(redis_, &reply) != REDIS_OK) return {grpc::UNAVAILABLE, "redis is gone"};
      ok = ok && static_cast<redisReply*>(reply)->type == REDIS_REPLY_INTEGER;
      freeReplyObject(reply);
    }
    return ok ? grpc::Status::OK : grpc::Status(grpc::INTERNAL, "redis refused an HSET");
  }

  redisContext* const redis_;
  int64_t next_field_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Call> queue_;
  std::thread thread_;
};

// How long one read from or write to Redis may take before the calls of its batch fail.
constexpr timeval kRedisTimeout = {5, 0};

// A connection to Redis on 127.0.0.1:`port`, authenticated; null (and a message) if not.
redisContext* ConnectRedis(int port, const std::string& password) {
  redisContext* c = redisConnectWithTimeout("127.0.0.1", port, kRedisTimeout);
  if (c == nullptr || c->err != 0 || redisSetTimeout(c, kRedisTimeout) != REDIS_OK) {
    std::fprintf(stderr, "bench_echo_server: cannot reach Redis on port %d\n", port);
    if (c != nullptr) redisFree(c);
    return nullptr;
  }
  auto* reply = static_cast<redisReply*>(redisCommand(c, "AUTH %s", password.c_str()));
  bool ok = reply != nullptr && reply->type == REDIS_REPLY_STATUS;
  if (reply != nullptr) freeReplyObject(reply);
  if (!ok) {
    std::fprintf(stderr, "bench_echo_server: Redis on port %d refused the password\n", port);
    redisFree(c);
    return nullptr;
  }
  return c;
}

class CallbackEcho final : public EchoService::CallbackService {
 public:
  explicit CallbackEcho(Finisher* finisher) : finisher_(finisher) {}

  grpc::ServerUnaryReactor* Echo(grpc::CallbackServerContext* context, const EchoMessage* request,
                                 EchoMessage* reply) override {
    reply->set_data(request->data());
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    if (finisher_ != nullptr) {
      finisher_->Add(reactor, &reply->data());
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
  // The same as Phalanx's servers run with: the floor at its best.
  phalanx::ConfigureMutexDeadlockCheck();
  std::string api = argc > 2 ? argv[2] : "sync";
  bool persist = api == "persist";
  if (argc < 2 || (persist && argc < 5) ||
      (api != "sync" && api != "callback" && api != "handoff" && !persist)) {
    std::fprintf(stderr,
                 "usage: bench_echo_server PORT [sync|callback|handoff|persist REDIS_PORT "
                 "REDIS_PASSWORD]\n");
    return 2;
  }
  SyncEcho sync_service;
  Finisher* finisher = nullptr;
  if (persist) {
    redisContext* redis = ConnectRedis(std::atoi(argv[3]), argv[4]);
    if (redis == nullptr) return 1;
    finisher = new Finisher(redis);
  } else if (api == "handoff") {
    finisher = new Finisher(nullptr);
  }
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
