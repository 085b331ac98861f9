// Choosing a node for one actor (or one bundle): Ray's policies.
//   DEFAULT (hybrid): pack onto the busiest node that fits while its utilization after
//     placement stays at or below `spread_threshold`; once no such node exists, spread to the
//     least utilized node that fits.
//   SPREAD: the least utilized node that fits, rotating among equals.
//   NODE_AFFINITY: the named node; hard = only there (pending while it is busy, infeasible
//     when it can never fit or is gone), soft = there if it fits now, else DEFAULT.
#pragma once

#include <cstdint>
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
  std::vector<std::string> avoid_node_ids;    // never these nodes
  std::vector<std::string> allowed_node_ids;  // only these nodes (empty: any)
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
  // Picks a node (does not allocate). Costs a look at every node of the view, except in a
  // run of like requests where the view changed only by what the last one took (below).
  Placement Select(const ClusterResourceView& view, const SchedulingRequest& request);

 private:
  // Whether a node fits a request's resources now, and its utilization after placement.
  struct NodeFit {
    const std::string* id;  // the view's key
    const NodeResources* node;
    bool fits = false;
    double utilization = 0;
  };
  // Every node's fit for `request`, in the view's order. Remembered for the last request's
  // resources and avoided and allowed nodes, as of the view's version: when the view moved by one
  // change to one node's available resources since (typically the allocation that placed the last
  // request), only that node is looked at again; any other change, or another request,
  // starts afresh. So a pass that places thousands of like actors (after a storm of node
  // deaths) looks at each node once, not once per actor.
  const std::vector<NodeFit>& Evaluate(const ClusterResourceView& view,
                                       const SchedulingRequest& request);

  SchedulingOptions options_;
  size_t spread_cursor_ = 0;
  struct Memo {
    const ClusterResourceView* view = nullptr;  // none yet
    uint64_t version = 0;
    Resources resources;
    std::vector<std::string> avoid_node_ids;
    std::vector<std::string> allowed_node_ids;
    std::vector<NodeFit> nodes;
  };
  Memo memo_;
};

// Utilization of a node after taking `request`: the largest used/total over the resources
// the request names (0 for an empty request).
double UtilizationAfter(const NodeResources& node, const Resources& request);

}  // namespace phalanx::placement
