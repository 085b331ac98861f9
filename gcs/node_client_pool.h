// NodeClientPool: the GCS's asynchronous clients to node managers, one channel per address.
// Callbacks run on gRPC threads. Thread-safe. Shutdown() (or destruction) cancels the calls in
// flight and waits for their callbacks, so that none runs once their owners are gone.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
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
  ~NodeClientPool();  // Shutdown()

  // Cancels every call in flight and waits until their callbacks ran (at most
  // kShutdownTimeout); a call made afterwards fails at once with Cancelled, its callback run
  // on the caller's thread.
  void Shutdown();
  static constexpr absl::Duration kShutdownTimeout = absl::Seconds(5);

  void StartActor(const std::string& address, const rpc::StartActorRequest& request, Done done);
  void KillActor(const std::string& address, const rpc::KillActorRequest& request, Done done);
  void PrepareBundle(const std::string& address, const rpc::BundleRequest& request, Done done);
  void CommitBundle(const std::string& address, const rpc::BundleRequest& request, Done done);
  void CancelBundle(const std::string& address, const rpc::BundleRequest& request, Done done);

 private:
  struct Stubs;
  struct Call;
  Stubs* StubsFor(const std::string& address);
  template <typename Request, typename Reply, typename Invoke>
  void Send(const std::string& address, const Request& request, Done done, Invoke invoke);

  const std::string token_;
  const absl::Duration timeout_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<Stubs>> stubs_ ABSL_GUARDED_BY(mu_);
  // The calls whose callbacks have not run yet (each removes itself after its callback).
  absl::Mutex calls_mu_;
  uint64_t next_call_ ABSL_GUARDED_BY(calls_mu_) = 0;
  std::map<uint64_t, std::shared_ptr<Call>> in_flight_ ABSL_GUARDED_BY(calls_mu_);
  bool shut_down_ ABSL_GUARDED_BY(calls_mu_) = false;
};

}  // namespace phalanx::gcs
