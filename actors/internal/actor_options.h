// Machinery of actors/api.h, not part of the contract: what ActorCreator collects, and the
// non-template entry points into the runtime that the API's templates call (actors/api.cc).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/worker/object_state.h"

namespace phalanx::internal {

struct ActorOptions {
  std::map<std::string, double> resources;
  std::string name;
  int max_restarts = 0;
  int max_task_retries = 0;
  int max_concurrency = 1;
  std::string scheduling_strategy;  // DEFAULT, SPREAD, NODE_AFFINITY
  std::string affinity_node_id;
  bool affinity_soft = false;
  std::string placement_group_id;
  int bundle_index = -1;
  bool detached = false;
  std::map<std::string, std::string> env;
  std::string code_path;
  std::string language;  // "" / "cpp"; "python": hosted by a Python worker
  std::vector<std::string> avoid_node_ids;
  std::string namespace_;  // for `name`; "": this process's namespace
};

// What the GCS knows of an actor (the Python module's actor_info).
struct ActorSummary {
  std::string actor_id;
  std::string class_name;
  std::string language;
  std::string name;
  std::string state;  // DEPENDENCIES_UNREADY, PENDING_CREATION, ALIVE, RESTARTING, DEAD
  int pid = 0;
  std::string node_id;
  int num_restarts = 0;
  std::string death_cause;  // "" while not DEAD, else e.g. "OOM_KILLED: peak 1.9 GiB > ..."
};

absl::StatusOr<std::string> CreateActor(const std::string& class_name, const ActorOptions& options,
                                        std::string packed_args);
// Never null: a failure to submit is the returned slot's error.
std::shared_ptr<ObjectState> SubmitCall(const std::string& actor_id, const std::string& method,
                                        std::string packed_args);
absl::StatusOr<std::string> LookupNamedActor(const std::string& name);
absl::Status KillActor(const std::string& actor_id, bool no_restart);
// NotFound when the GCS does not know the actor (or no live actor has the name in `ns`).
absl::StatusOr<ActorSummary> DescribeActor(const std::string& actor_id);
absl::StatusOr<ActorSummary> DescribeNamedActor(const std::string& name, const std::string& ns);

}  // namespace phalanx::internal
