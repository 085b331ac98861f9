// Machinery of actors/api.h, not part of the contract: what ActorCreator collects, and the
// non-template entry points into the runtime that the API's templates call (actors/api.cc).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

// Declared (with their enumerators) in actors/api.h, which includes this header first.
namespace phalanx::worker {
class ObjectState;  // worker/object_state.h
}  // namespace phalanx::worker

namespace phalanx {
enum class SchedulingStrategy;
enum class Language;
struct ActorDescription;
}  // namespace phalanx

namespace phalanx::internal {

struct RefAccess;  // actors/internal/api_inl.h: the machinery's way into an ObjectRef

struct ActorOptions {
  std::map<std::string, double> resources;
  std::string name;
  int max_restarts = 0;
  int max_task_retries = 0;
  int max_concurrency = 1;
  SchedulingStrategy scheduling_strategy{};  // kDefault
  std::string affinity_node_id;
  bool affinity_soft = false;
  std::string placement_group_id;
  int bundle_index = -1;
  bool detached = false;
  std::map<std::string, std::string> env;
  // Kept with the actor's record (ActorDescription::labels): what a language's runtime
  // needs to call it from a handle found by name (Python: its methods' num_returns).
  std::map<std::string, std::string> labels;
  std::string code_path;
  Language language{};  // kCpp
  std::vector<std::string> avoid_node_ids;
  std::vector<std::string> allowed_node_ids;  // empty: any node
  std::string actor_namespace;                // for `name`; "": this process's namespace
};

absl::StatusOr<std::string> CreateActor(const std::string& class_name, const ActorOptions& options,
                                        std::string packed_args);
// Never null: a failure to submit is the returned slot's error.
// `concurrency_group`: the actor's group to run it in ("": the method's own).
std::shared_ptr<worker::ObjectState> SubmitCall(const std::string& actor_id,
                                                const std::string& method, std::string packed_args,
                                                const std::string& concurrency_group = "");
// The same for a call whose arguments wait for `deps` (other calls' results, none of them
// null): it is sent, `assemble`d from their values in order, once all are done, and fails
// with the first one's error if one failed. The caller's later calls to the actor go after
// it (worker::ActorClient::Reserve); the caller does not wait.
std::shared_ptr<worker::ObjectState> SubmitCallAfter(
    const std::string& actor_id, const std::string& method,
    std::vector<std::shared_ptr<worker::ObjectState>> deps,
    std::function<std::string(const std::vector<std::string>&)> assemble);
// CreatePlacementGroup, and the group's pending reason in the GCS's answer ("" when it was
// placed at once; "INFEASIBLE: ..." when no node could hold it now). `strategy`: its name,
// "PACK", ... (ToString).
absl::StatusOr<std::pair<std::string, std::string>> CreatePlacementGroupWithReason(
    const std::vector<std::map<std::string, double>>& bundles, const std::string& strategy,
    const std::string& name, bool detached, bool pend_if_infeasible);
// phalanx::Cancel: a task of this process (CancelTask) or an actor call of any of its
// clients (CoreWorker::CancelCall).
absl::Status CancelRef(const std::shared_ptr<worker::ObjectState>& result, bool force);
// Cancels an actor call (worker::ActorClient::Cancel); OK when it had finished.
absl::Status CancelActorCall(const std::string& actor_id,
                             const std::shared_ptr<worker::ObjectState>& result);
absl::StatusOr<std::string> LookupNamedActor(const std::string& name);
absl::Status KillActor(const std::string& actor_id, bool no_restart);
// NotFound when no live actor has the name in `ns` (GetActorInfo: by id).
absl::StatusOr<ActorDescription> DescribeNamedActor(const std::string& name, const std::string& ns);

}  // namespace phalanx::internal
