#include "gcs/node_client_pool.h"

#include "runtime/proto/node.grpc.pb.h"
#include "runtime/rpc/rpc.h"

namespace phalanx::gcs {

struct NodeClientPool::Stubs {
  std::unique_ptr<rpc::NodeManagerService::Stub> stub;
};

NodeClientPool::NodeClientPool(std::string token, absl::Duration timeout)
    : token_(std::move(token)), timeout_(timeout) {}

NodeClientPool::~NodeClientPool() = default;

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
  // Owns what one asynchronous call needs until its callback ran.
  struct Call {
    grpc::ClientContext context;
    Request request;
    Reply reply;
    Done done;
  };
  auto* call = new Call();
  call->request = request;
  call->done = std::move(done);
  rpc::PrepareContext(&call->context, token_, timeout_, /*wait_for_ready=*/false);
  invoke(StubsFor(address)->stub->async(), &call->context, &call->request, &call->reply,
         [call, address](grpc::Status status) {
           if (call->done) call->done(rpc::FromGrpc(status, "node manager at " + address));
           delete call;
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
