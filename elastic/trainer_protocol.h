// The trainer protocol: the methods of a rank (TrainerHost, trainer_host.h) that the elastic
// controller calls, named once for both sides, and TrainerClient, the controller's typed
// side of them (no method names or result types spelled at call sites).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "actors/api.h"

namespace phalanx::elastic {

namespace trainer_method {
inline constexpr char kSetup[] = "Setup";
inline constexpr char kStep[] = "Step";
inline constexpr char kReconfigure[] = "Reconfigure";
inline constexpr char kSyncState[] = "SyncState";
inline constexpr char kSaveCheckpoint[] = "SaveCheckpoint";
inline constexpr char kLoadCheckpoint[] = "LoadCheckpoint";
inline constexpr char kLoadSnapshot[] = "LoadSnapshot";
inline constexpr char kNetworkCheck[] = "NetworkCheck";
inline constexpr char kPing[] = "Ping";
inline constexpr char kAbort[] = "Abort";
inline constexpr char kQuery[] = "Query";
}  // namespace trainer_method

// Keys a rank answers Query with.
namespace trainer_query {
inline constexpr char kHeldStep[] = "held_step";  // the committed step it holds
inline constexpr char kResults[] = "results";     // what the trainer wants drivers to see
// The last network check's slowest rank over the median (what the straggler policy compares
// with straggler.factor); "0" before any.
inline constexpr char kNetworkCheckSkew[] = "network_check_skew";
// "reach:HOST:PORT,HOST:PORT,...": whether this rank's host completes a TCP handshake with each
// (or is refused by it: the host answered), within kReachTimeoutMs, all at once; the answer
// has a '1' or a '0' per address, in order. How the controller finds ranks that cannot reach
// each other while the GCS sees them all (a data-plane partition).
inline constexpr char kReachPrefix[] = "reach:";
inline constexpr int kReachTimeoutMs = 500;
}  // namespace trainer_query

// What every rank adds to its step's result, for the job's metrics.
namespace step_metric {
inline constexpr char kStepMs[] = "step_ms";        // the step's wall time on this rank
inline constexpr char kComputeMs[] = "compute_ms";  // of it, the time outside collectives
// A call may cover several steps: the steps it ran, and the two times above are per step
// (their mean over the call).
inline constexpr char kSteps[] = "steps";
}  // namespace step_metric

// A call's result, from its last step: {"loss", "data_epoch", "done" (Python loops),
// metrics…}, plus step_metric's.
using StepMetrics = std::map<std::string, double>;

// The controller's handle on one rank. Each call returns at once; Get the reference.
class TrainerClient {
 public:
  TrainerClient() = default;
  explicit TrainerClient(ActorHandle<AnyActor> handle) : handle_(std::move(handle)) {}

  const ActorHandle<AnyActor>& handle() const { return handle_; }

  // Builds the trainer for job `job_id` from its spec (YAML).
  ObjectRef<bool> Setup(const std::string& job_id, const std::string& spec_yaml) const {
    return Call<bool>(trainer_method::kSetup, job_id, spec_yaml);
  }
  // Runs steps `step` .. `step + count - 1` of epoch `epoch` once `agreed` steps are
  // committed everywhere; it may be sent while the call before still runs (it waits its turn).
  ObjectRef<StepMetrics> Step(int64_t step, int64_t agreed, int64_t epoch, int64_t count) const {
    return Call<StepMetrics>(trainer_method::kStep, step, agreed, epoch, count);
  }
  // Forms the group's epoch and rolls back to `agreed` steps; answers the steps it holds.
  ObjectRef<int64_t> Reconfigure(const std::string& group, int64_t epoch, int rank, int world,
                                 int64_t agreed) const {
    return Call<int64_t>(trainer_method::kReconfigure, group, epoch, rank, world, agreed);
  }
  // Every member calls it: `root` broadcasts its committed state; answers the steps it holds.
  ObjectRef<int64_t> SyncState(int root) const {
    return Call<int64_t>(trainer_method::kSyncState, root);
  }
  // Answers the step count the checkpoint holds: `agreed`, unless the rank no longer holds it.
  ObjectRef<int64_t> SaveCheckpoint(const std::string& path, int64_t agreed) const {
    return Call<int64_t>(trainer_method::kSaveCheckpoint, path, agreed);
  }
  // Answers the checkpoint's step count (-1: none at `path`).
  ObjectRef<int64_t> LoadCheckpoint(const std::string& path) const {
    return Call<int64_t>(trainer_method::kLoadCheckpoint, path);
  }
  // Loads this job's snapshot of step `step` from the store of the node at `node_address`
  // (node/snapshot_store.h); answers its step count (-1: that node no longer holds it).
  ObjectRef<int64_t> LoadSnapshot(const std::string& node_address, int64_t step) const {
    return Call<int64_t>(trainer_method::kLoadSnapshot, node_address, step);
  }
  // {straggler ranks…} then -1 then {faulty ranks…}.
  ObjectRef<std::vector<int>> NetworkCheck(double factor) const {
    return Call<std::vector<int>>(trainer_method::kNetworkCheck, factor);
  }
  // {phase (trainer_host.h's Phase), committed steps, step in progress}; answered on a lane
  // of its own, also while a step runs.
  ObjectRef<std::vector<int64_t>> Ping() const {
    return Call<std::vector<int64_t>>(trainer_method::kPing);
  }
  // Ends the collective in flight (the step fails; the rank stays). `reason` says why (which
  // rank was lost, and how): the aborted collectives' errors carry it to the user's code.
  ObjectRef<bool> Abort(const std::string& reason) const {
    return Call<bool>(trainer_method::kAbort, reason);
  }
  ObjectRef<std::string> Query(const std::string& key) const {
    return Call<std::string>(trainer_method::kQuery, key);
  }
  // Which of `addresses`' hosts this rank reaches (trainer_query::kReachPrefix): a '1' or a '0'
  // per address.
  ObjectRef<std::string> Reach(const std::vector<std::string>& addresses) const {
    std::string key = trainer_query::kReachPrefix;
    for (size_t i = 0; i < addresses.size(); ++i) key += (i ? "," : "") + addresses[i];
    return Query(key);
  }

 private:
  template <typename R, typename... Args>
  ObjectRef<R> Call(const char* method, const Args&... args) const {
    return handle_.template Call<R>(method, args...);
  }

  ActorHandle<AnyActor> handle_;
};

}  // namespace phalanx::elastic
