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

namespace {
// Owns what one asynchronous call needs until its callback ran.
template <typename Request, typename Reply>
struct AsyncCall {
  grpc::ClientContext context;
  Request request;
  Reply reply;
  std::function<void(absl::Status)> done;
};
}  // namespace

void NodeClientPool::StartActor(const std::string& address, const rpc::StartActorRequest& request,
                                std::function<void(absl::Status)> done) {
  auto* call = new AsyncCall<rpc::StartActorRequest, rpc::StartActorReply>();
  call->request = request;
  call->done = std::move(done);
  rpc::PrepareContext(&call->context, token_, timeout_, /*wait_for_ready=*/false);
  StubsFor(address)->stub->async()->StartActor(
      &call->context, &call->request, &call->reply, [call, address](grpc::Status status) {
        call->done(rpc::FromGrpc(status, "node manager at " + address));
        delete call;
      });
}

void NodeClientPool::KillActor(const std::string& address, const rpc::KillActorRequest& request,
                               std::function<void(absl::Status)> done) {
  auto* call = new AsyncCall<rpc::KillActorRequest, rpc::KillActorReply>();
  call->request = request;
  call->done = std::move(done);
  rpc::PrepareContext(&call->context, token_, timeout_, /*wait_for_ready=*/false);
  StubsFor(address)->stub->async()->KillActor(
      &call->context, &call->request, &call->reply, [call, address](grpc::Status status) {
        call->done(rpc::FromGrpc(status, "node manager at " + address));
        delete call;
      });
}

}  // namespace phalanx::gcs
