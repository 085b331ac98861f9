#include "gcs/node_client_pool.h"

#include "runtime/proto/node.grpc.pb.h"
#include "runtime/rpc/rpc.h"

namespace phalanx::gcs {

struct NodeClientPool::Stubs {
  std::unique_ptr<rpc::NodeManagerService::Stub> stub;
};

// What one asynchronous call needs until its callback ran (its request and reply are owned by
// the typed holder that Send makes; this is the part Shutdown cancels).
struct NodeClientPool::Call {
  grpc::ClientContext context;
  virtual ~Call() = default;
};

NodeClientPool::NodeClientPool(std::string token, absl::Duration timeout)
    : token_(std::move(token)), timeout_(timeout) {}

NodeClientPool::~NodeClientPool() { Shutdown(); }

void NodeClientPool::Shutdown() {
  std::vector<std::shared_ptr<Call>> calls;
  {
    absl::MutexLock lock(&calls_mu_);
    shut_down_ = true;
    for (auto& [id, call] : in_flight_) calls.push_back(call);
  }
  // Outside the lock: a callback may run from within TryCancel, and takes the lock.
  for (auto& call : calls) call->context.TryCancel();
  calls.clear();
  absl::MutexLock lock(&calls_mu_);
  calls_mu_.AwaitWithTimeout(
      absl::Condition(
          +[](std::map<uint64_t, std::shared_ptr<Call>>* m) { return m->empty(); }, &in_flight_),
      kShutdownTimeout);
}

NodeClientPool::Stubs* NodeClientPool::StubsFor(const std::string& address) {
  absl::MutexLock lock(&mu_);
  auto& slot = stubs_[address];
  if (!slot) {
    slot = std::make_unique<Stubs>();
    slot->stub = rpc::NodeManagerService::NewStub(rpc::MakeChannel(address));
  }
  return slot.get();
}

template <typename Request, typename Reply, typename Invoke>
void NodeClientPool::Send(const std::string& address, const Request& request, Done done,
                          Invoke invoke) {
  struct TypedCall : Call {
    Request request;
    Reply reply;
    Done done;
  };
  auto call = std::make_shared<TypedCall>();
  uint64_t id = 0;
  {
    absl::MutexLock lock(&calls_mu_);
    if (!shut_down_) {
      id = ++next_call_;
      in_flight_.emplace(id, call);
    }
  }
  if (id == 0) {
    if (done) done(absl::CancelledError("the GCS is shutting down"));
    return;
  }
  call->request = request;
  call->done = std::move(done);
  rpc::PrepareContext(&call->context, token_, timeout_, /*wait_for_ready=*/false);
  TypedCall* raw = call.get();
  invoke(StubsFor(address)->stub->async(), &raw->context, &raw->request, &raw->reply,
         [this, raw, id, address](grpc::Status status) {
           if (raw->done) raw->done(rpc::FromGrpc(status, "node manager at " + address));
           // Last: Shutdown waits for this, and the call's memory goes with its entry.
           absl::MutexLock lock(&calls_mu_);
           in_flight_.erase(id);
         });
}

void NodeClientPool::StartActor(const std::string& address, const rpc::StartActorRequest& request,
                                Done done) {
  Send<rpc::StartActorRequest, rpc::StartActorReply>(
      address, request, std::move(done), [](auto* a, auto... args) { a->StartActor(args...); });
}

void NodeClientPool::KillActor(const std::string& address, const rpc::KillActorRequest& request,
                               Done done) {
  Send<rpc::KillActorRequest, rpc::KillActorReply>(
      address, request, std::move(done), [](auto* a, auto... args) { a->KillActor(args...); });
}

void NodeClientPool::PrepareBundle(const std::string& address, const rpc::BundleRequest& request,
                                   Done done) {
  Send<rpc::BundleRequest, rpc::BundleReply>(
      address, request, std::move(done), [](auto* a, auto... args) { a->PrepareBundle(args...); });
}

void NodeClientPool::CommitBundle(const std::string& address, const rpc::BundleRequest& request,
                                  Done done) {
  Send<rpc::BundleRequest, rpc::BundleReply>(
      address, request, std::move(done), [](auto* a, auto... args) { a->CommitBundle(args...); });
}

void NodeClientPool::CancelBundle(const std::string& address, const rpc::BundleRequest& request,
                                  Done done) {
  Send<rpc::BundleRequest, rpc::BundleReply>(
      address, request, std::move(done), [](auto* a, auto... args) { a->CancelBundle(args...); });
}

}  // namespace phalanx::gcs
