// ResourceScheduler: the one place where the GCS decides who gets which resources. It owns
// the cluster resource view (per node total/available), the reserved bundles of placement
// groups (per bundle total/available), and the node-selection policies. Actors take from a
// node, or from a bundle of their placement group; bundles take from nodes. Every decision is
// made and recorded under one lock, so two placements never count the same resources.
// Thread-safe.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "placement/bundle_policy.h"
#include "placement/resource_view.h"
#include "placement/scheduling_policy.h"

namespace phalanx::placement {

struct ActorRequest {
  SchedulingRequest scheduling;
  std::string placement_group_id;  // empty: not in a group
  int bundle_index = -1;           // -1: any bundle of the group
};

struct ActorPlacement {
  Placement placement;    // node_id, or why not
  int bundle_index = -1;  // the bundle it took from (group actors)
};

class ResourceScheduler {
 public:
  explicit ResourceScheduler(SchedulingOptions options = {});

  void AddNode(const std::string& node_id, const Resources& total,
               std::map<std::string, std::string> labels = {});
  // Forgets a node and what was allocated on it. Returns the bundles that lived there.
  std::vector<std::pair<std::string, int>> RemoveNode(const std::string& node_id);
  bool HasNode(const std::string& node_id) const;

  // Chooses a node (or bundle) for an actor and takes its resources there.
  ActorPlacement PlaceActor(const ActorRequest& request);
  // Chooses without taking (is it feasible at all? where would it go?).
  ActorPlacement Probe(const ActorRequest& request);
  // Takes an actor's resources where it already is (a GCS reloading its tables).
  bool AllocateActor(const std::string& node_id, const std::string& pg_id, int bundle_index,
                     const Resources& resources);
  void ReleaseActor(const std::string& node_id, const std::string& pg_id, int bundle_index,
                    const Resources& resources);

  // Plans the group's bundles whose `fixed` entry is empty and reserves them on their nodes.
  BundlePlan ReserveBundles(const std::string& pg_id, BundleStrategy strategy,
                            const std::vector<Resources>& bundles,
                            const std::vector<std::string>& fixed);
  // Plans without reserving (is it feasible at all?).
  BundlePlan ProbeBundles(BundleStrategy strategy, const std::vector<Resources>& bundles);
  // Reserves one bundle where it already is (reload).
  bool ReserveBundleAt(const std::string& pg_id, int index, const std::string& node_id,
                       const Resources& resources);
  // Gives the bundles back to their nodes (indices empty: all of the group).
  void ReleaseBundles(const std::string& pg_id, const std::vector<int>& indices = {});
  // The node bundle `index` of the group is reserved on; empty when it is not reserved.
  std::string BundleNode(const std::string& pg_id, int index) const;

  std::optional<Resources> Available(const std::string& node_id) const;
  std::optional<Resources> BundleAvailable(const std::string& pg_id, int index) const;

 private:
  struct Bundle {
    std::string node_id;
    Resources total;
    Resources available;
  };
  ActorPlacement SelectLocked(const ActorRequest& request) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  ClusterResourceView view_ ABSL_GUARDED_BY(mu_);
  NodeSelector selector_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::map<int, Bundle>> bundles_ ABSL_GUARDED_BY(mu_);
};

}  // namespace phalanx::placement
