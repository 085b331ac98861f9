// NodeClientPool: the GCS's asynchronous clients to node managers, one channel per address.
// Callbacks run on gRPC threads. Thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "runtime/proto/node.pb.h"

namespace phalanx::gcs {

class NodeClientPool {
 public:
  using Done = std::function<void(absl::Status)>;

  explicit NodeClientPool(std::string token, absl::Duration timeout = absl::Seconds(10));
  ~NodeClientPool();

  void StartActor(const std::string& address, const rpc::StartActorRequest& request, Done done);
  void KillActor(const std::string& address, const rpc::KillActorRequest& request, Done done);
  void PrepareBundle(const std::string& address, const rpc::BundleRequest& request, Done done);
  void CommitBundle(const std::string& address, const rpc::BundleRequest& request, Done done);
  void CancelBundle(const std::string& address, const rpc::BundleRequest& request, Done done);

 private:
  struct Stubs;
  Stubs* StubsFor(const std::string& address);
  template <typename Request, typename Reply, typename Invoke>
  void Send(const std::string& address, const Request& request, Done done, Invoke invoke);

  const std::string token_;
  const absl::Duration timeout_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<Stubs>> stubs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace phalanx::gcs
