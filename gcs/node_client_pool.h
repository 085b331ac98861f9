// NodeClientPool: the GCS's asynchronous clients to node managers, one channel per address.
// Callbacks run on gRPC threads. Thread-safe. Shutdown() (or destruction) cancels the calls in
// flight and waits for their callbacks, so that none runs once their owners are gone.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/proto/node.pb.h"

namespace phalanx::gcs {

class NodeClientPool {
 public:
  using Done = std::function<void(absl::Status)>;

  explicit NodeClientPool(std::string token, absl::Duration timeout = absl::Seconds(10));
  ~NodeClientPool();  // Shutdown()

  // Cancels every call in flight and waits until their callbacks ran (at most
  // kShutdownTimeout); a call made afterwards fails at once with Cancelled, its callback run
  // on the caller's thread.
  void Shutdown();
  static constexpr absl::Duration kShutdownTimeout = absl::Seconds(5);

  void StartActor(const std::string& address, const rpc::StartActorRequest& request, Done done);
  void KillActor(const std::string& address, const rpc::KillActorRequest& request, Done done);

  // Placement-group bundles, applied by each node in the order asked. One UpdateBundles call
  // is in flight per node at a time; what is asked meanwhile waits and goes in the next, so a
  // burst of groups costs each node a few calls, not one per bundle. A call that
  // fails fails the operations waiting behind it with its error, so that each is answered
  // within the pool's timeout.
  void ReserveBundle(const std::string& address, const rpc::BundleRequest& request, Done done);
  void CancelBundle(const std::string& address, const rpc::BundleRequest& request, Done done);

 private:
  struct Stubs;
  struct Call;
  // A node's bundle operations that wait for its call in flight.
  struct BundleQueue {
    std::vector<rpc::BundleOp> ops;
    std::vector<Done> dones;
    bool in_flight = false;
  };
  Stubs* StubsFor(const std::string& address);
  template <typename Request, typename Reply, typename Invoke>
  void Send(const std::string& address, const Request& request,
            std::function<void(absl::Status, const Reply&)> done, Invoke invoke);
  template <typename Request, typename Reply, typename Invoke>
  void SendForStatus(const std::string& address, const Request& request, Done done, Invoke invoke);
  void QueueBundleOp(const std::string& address, rpc::BundleOp::Kind kind,
                     const rpc::BundleRequest& request, Done done);
  // Sends what waits for `address` as one call; when it is answered, the next.
  void SendBundleOps(const std::string& address);

  const std::string token_;
  const absl::Duration timeout_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<Stubs>> stubs_ ABSL_GUARDED_BY(mu_);
  // The calls whose callbacks have not run yet (each removes itself after its callback).
  absl::Mutex calls_mu_;
  uint64_t next_call_ ABSL_GUARDED_BY(calls_mu_) = 0;
  std::map<uint64_t, std::shared_ptr<Call>> in_flight_ ABSL_GUARDED_BY(calls_mu_);
  bool shut_down_ ABSL_GUARDED_BY(calls_mu_) = false;
  absl::Mutex bundles_mu_;
  absl::flat_hash_map<std::string, BundleQueue> bundle_queues_ ABSL_GUARDED_BY(bundles_mu_);
};

}  // namespace phalanx::gcs
