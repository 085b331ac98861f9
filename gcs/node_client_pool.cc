#include "gcs/node_client_pool.h"

#include "absl/strings/str_cat.h"
#include "base/proto/node.grpc.pb.h"
#include "base/rpc.h"

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
void NodeClientPool::Send(const std::string& address, const Request& request,
                          std::function<void(absl::Status, const Reply&)> done, Invoke invoke) {
  struct TypedCall : Call {
    Request request;
    Reply reply;
    std::function<void(absl::Status, const Reply&)> done;
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
    if (done) done(absl::CancelledError("the GCS is shutting down"), call->reply);
    return;
  }
  call->request = request;
  call->done = std::move(done);
  rpc::PrepareContext(&call->context, token_, timeout_, /*wait_for_ready=*/false);
  TypedCall* raw = call.get();
  invoke(StubsFor(address)->stub->async(), &raw->context, &raw->request, &raw->reply,
         [this, raw, id, address](grpc::Status status) {
           if (raw->done)
             raw->done(rpc::FromGrpc(status, "node manager at " + address), raw->reply);
           // Last: Shutdown waits for this, and the call's memory goes with its entry.
           absl::MutexLock lock(&calls_mu_);
           in_flight_.erase(id);
         });
}

template <typename Request, typename Reply, typename Invoke>
void NodeClientPool::SendForStatus(const std::string& address, const Request& request, Done done,
                                   Invoke invoke) {
  Send<Request, Reply>(
      address, request,
      [done = std::move(done)](absl::Status s, const Reply&) {
        if (done) done(std::move(s));
      },
      invoke);
}

void NodeClientPool::StartActor(const std::string& address, const rpc::StartActorRequest& request,
                                Done done) {
  SendForStatus<rpc::StartActorRequest, rpc::StartActorReply>(
      address, request, std::move(done), [](auto* a, auto... args) { a->StartActor(args...); });
}

void NodeClientPool::KillActor(const std::string& address, const rpc::KillActorRequest& request,
                               Done done) {
  SendForStatus<rpc::KillActorRequest, rpc::KillActorReply>(
      address, request, std::move(done), [](auto* a, auto... args) { a->KillActor(args...); });
}

void NodeClientPool::ReserveBundle(const std::string& address, const rpc::BundleRequest& request,
                                   Done done) {
  QueueBundleOp(address, rpc::BundleOp::RESERVE, request, std::move(done));
}

void NodeClientPool::CancelBundle(const std::string& address, const rpc::BundleRequest& request,
                                  Done done) {
  QueueBundleOp(address, rpc::BundleOp::CANCEL, request, std::move(done));
}

void NodeClientPool::QueueBundleOp(const std::string& address, rpc::BundleOp::Kind kind,
                                   const rpc::BundleRequest& request, Done done) {
  {
    absl::MutexLock lock(&bundles_mu_);
    BundleQueue& queue = bundle_queues_[address];
    rpc::BundleOp& op = queue.ops.emplace_back();
    op.set_kind(kind);
    *op.mutable_bundle() = request;
    queue.dones.push_back(std::move(done));
    if (queue.in_flight) return;  // goes with the next call, when this one is answered
    queue.in_flight = true;
  }
  SendBundleOps(address);
}

void NodeClientPool::SendBundleOps(const std::string& address) {
  rpc::UpdateBundlesRequest request;
  std::vector<Done> dones;
  {
    absl::MutexLock lock(&bundles_mu_);
    BundleQueue& queue = bundle_queues_[address];
    if (queue.ops.empty()) {
      queue.in_flight = false;
      return;
    }
    request.mutable_ops()->Reserve(static_cast<int>(queue.ops.size()));
    for (auto& op : queue.ops) *request.add_ops() = std::move(op);
    queue.ops.clear();
    dones.swap(queue.dones);
  }
  Send<rpc::UpdateBundlesRequest, rpc::UpdateBundlesReply>(
      address, request,
      [this, address, dones = std::move(dones)](absl::Status s,
                                                const rpc::UpdateBundlesReply& reply) {
        // A call that failed (the node did not answer in time, or is gone) fails what waited
        // behind it too, so that no operation waits for more than one call's timeout.
        std::vector<Done> behind;
        if (!s.ok()) {
          absl::MutexLock lock(&bundles_mu_);
          BundleQueue& queue = bundle_queues_[address];
          queue.ops.clear();
          behind.swap(queue.dones);
          queue.in_flight = false;
        }
        for (size_t i = 0; i < dones.size(); ++i) {
          absl::Status result = s;
          if (s.ok() && static_cast<int>(i) >= reply.results_size()) {
            result = absl::InternalError(absl::StrCat("node manager at ", address, " answered ",
                                                      reply.results_size(), " of ", dones.size(),
                                                      " bundle operations"));
          } else if (s.ok()) {
            const rpc::BundleOpResult& r = reply.results(static_cast<int>(i));
            result = absl::Status(static_cast<absl::StatusCode>(r.code()), r.message());
          }
          if (dones[i]) dones[i](std::move(result));
        }
        for (Done& done : behind) {
          if (done) done(s);
        }
        if (s.ok()) SendBundleOps(address);
      },
      [](auto* a, auto... args) { a->UpdateBundles(args...); });
}

}  // namespace phalanx::gcs
