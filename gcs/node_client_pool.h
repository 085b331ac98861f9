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
  explicit NodeClientPool(std::string token, absl::Duration timeout = absl::Seconds(10));
  ~NodeClientPool();

  void StartActor(const std::string& address, const rpc::StartActorRequest& request,
                  std::function<void(absl::Status)> done);
  void KillActor(const std::string& address, const rpc::KillActorRequest& request,
                 std::function<void(absl::Status)> done);

 private:
  struct Stubs;
  Stubs* StubsFor(const std::string& address);

  const std::string token_;
  const absl::Duration timeout_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<Stubs>> stubs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace phalanx::gcs
