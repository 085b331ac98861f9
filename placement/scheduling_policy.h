// Choosing a node for one actor (or one bundle): Ray's policies.
//   DEFAULT (hybrid): pack onto the busiest node that fits while its utilization after
//     placement stays at or below `spread_threshold`; once no such node exists, spread to the
//     least utilized node that fits.
//   SPREAD: the least utilized node that fits, rotating among equals.
//   NODE_AFFINITY: the named node; hard = only there (pending while it is busy, infeasible
//     when it can never fit or is gone), soft = there if it fits now, else DEFAULT.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "placement/resource_view.h"

namespace phalanx::placement {

enum class Strategy { kDefault, kSpread, kNodeAffinity };

// Parses "DEFAULT", "SPREAD" or "NODE_AFFINITY" (empty = DEFAULT).
absl::StatusOr<Strategy> ParseStrategy(const std::string& name);

struct SchedulingRequest {
  Resources resources;
  Strategy strategy = Strategy::kDefault;
  std::string affinity_node_id;
  bool affinity_soft = false;
  std::vector<std::string> avoid_node_ids;  // never these nodes
};

struct SchedulingOptions {
  double spread_threshold = 0.5;
};

// The outcome: a node, or why not. `infeasible` means no node of the cluster can ever hold
// the request (fail it); otherwise it may fit later (keep it pending with `reason`).
struct Placement {
  std::string node_id;  // empty: not placed
  bool infeasible = false;
  std::string reason;
};

class NodeSelector {
 public:
  explicit NodeSelector(SchedulingOptions options = {}) : options_(options) {}
  // Picks a node (does not allocate).
  Placement Select(const ClusterResourceView& view, const SchedulingRequest& request);

 private:
  SchedulingOptions options_;
  size_t spread_cursor_ = 0;
};

// Utilization of a node after taking `request`: the largest used/total over the resources
// the request names (0 for an empty request).
double UtilizationAfter(const NodeResources& node, const Resources& request);

}  // namespace phalanx::placement
