// Placing the bundles of a placement group, with Ray's strategies
// (docs: ray-core/scheduling/placement-group):
//   PACK           as few nodes as possible (one if it fits), best effort
//   SPREAD         distinct nodes where possible, best effort
//   STRICT_PACK    all bundles on one node, or not at all
//   STRICT_SPREAD  every bundle on a node of its own, or not at all
// Pure functions over a view: the caller allocates what the plan says.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "placement/resource_view.h"

namespace phalanx::placement {

enum class BundleStrategy { kPack, kSpread, kStrictPack, kStrictSpread };

absl::StatusOr<BundleStrategy> ParseBundleStrategy(const std::string& name);
const char* BundleStrategyName(BundleStrategy strategy);

// Checks a placement group request: at least one bundle; every bundle names at least one
// resource; every amount > 0. Errors name the bundle and the fix.
absl::Status ValidateBundles(const std::vector<std::map<std::string, double>>& bundles);

struct BundlePlan {
  std::vector<std::string> nodes;  // per bundle; all set when placed
  bool placed = false;
  bool infeasible = false;  // no cluster of these nodes' sizes can ever hold it
  std::string reason;       // why not placed
};

// Plans nodes for the bundles whose `fixed` entry is empty; the others stay where they are
// (a rescheduling after a node's death keeps the bundles on live nodes). Uses available
// resources; the plan fits all the bundles it places at once.
BundlePlan PlanBundles(const ClusterResourceView& view, BundleStrategy strategy,
                       const std::vector<Resources>& bundles,
                       const std::vector<std::string>& fixed);

}  // namespace phalanx::placement
