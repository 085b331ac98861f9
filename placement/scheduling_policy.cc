#include "placement/scheduling_policy.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace phalanx::placement {

absl::StatusOr<Strategy> ParseStrategy(const std::string& name) {
  if (name.empty() || name == "DEFAULT") return Strategy::kDefault;
  if (name == "SPREAD") return Strategy::kSpread;
  if (name == "NODE_AFFINITY") return Strategy::kNodeAffinity;
  return absl::InvalidArgumentError(absl::StrCat(
      "scheduling strategy '", name, "' is unknown; use DEFAULT, SPREAD or NODE_AFFINITY"));
}

double UtilizationAfter(const NodeResources& node, const Resources& request) {
  double worst = 0;
  for (const auto& [name, amount] : request.fixed()) {
    int64_t total = node.total.GetFixed(name);
    if (total <= 0) continue;
    int64_t used = total - node.available.GetFixed(name) + amount;
    worst = std::max(worst, static_cast<double>(used) / static_cast<double>(total));
  }
  return worst;
}

namespace {

std::string WhyPending(const ClusterResourceView& view, const Resources& request) {
  if (view.nodes().empty()) return "no alive node in the cluster yet";
  std::vector<std::string> avail;
  for (const auto& [id, node] : view.nodes()) {
    avail.push_back(absl::StrCat(id.substr(0, 8), " ", node.available.ToString()));
  }
  return absl::StrCat("waiting for resources: needs ", request.ToString(),
                      "; available: ", absl::StrJoin(avail, ", "));
}

std::string WhyInfeasible(const ClusterResourceView& view, const Resources& request) {
  std::vector<std::string> totals;
  for (const auto& [id, node] : view.nodes()) {
    totals.push_back(absl::StrCat(id.substr(0, 8), " ", node.total.ToString()));
  }
  return absl::StrCat("no node can ever hold ", request.ToString(),
                      "; node totals: ", absl::StrJoin(totals, ", "),
                      ". Ask for less, or add a node that has it");
}

}  // namespace

Placement NodeSelector::Select(const ClusterResourceView& view, const SchedulingRequest& request) {
  Placement out;
  if (request.strategy == Strategy::kNodeAffinity) {
    const NodeResources* node = view.Get(request.affinity_node_id);
    if (node != nullptr && node->available.Contains(request.resources)) {
      out.node_id = request.affinity_node_id;
      return out;
    }
    if (!request.affinity_soft) {
      if (node == nullptr) {
        out.infeasible = true;
        out.reason = absl::StrCat("node affinity: node ", request.affinity_node_id,
                                  " is not alive; use a live node id or soft affinity");
      } else if (!node->total.Contains(request.resources)) {
        out.infeasible = true;
        out.reason = absl::StrCat("node affinity: node ", request.affinity_node_id.substr(0, 8),
                                  " has only ", node->total.ToString(), ", never ",
                                  request.resources.ToString());
      } else {
        out.reason = absl::StrCat(
            "node affinity: waiting for node ", request.affinity_node_id.substr(0, 8), " to have ",
            request.resources.ToString(), " (available ", node->available.ToString(), ")");
      }
      return out;
    }
    // Soft: fall through to DEFAULT.
  }

  if (!view.AnyNodeCouldFit(request.resources)) {
    if (view.nodes().empty()) {
      out.reason = WhyPending(view, request.resources);
    } else {
      out.infeasible = true;
      out.reason = WhyInfeasible(view, request.resources);
    }
    return out;
  }

  std::vector<std::pair<std::string, double>> fits;  // node, utilization after placement
  for (const auto& [id, node] : view.nodes()) {
    if (std::find(request.avoid_node_ids.begin(), request.avoid_node_ids.end(), id) !=
        request.avoid_node_ids.end()) {
      continue;
    }
    if (node.available.Contains(request.resources)) {
      fits.emplace_back(id, UtilizationAfter(node, request.resources));
    }
  }
  if (fits.empty()) {
    out.reason = WhyPending(view, request.resources);
    return out;
  }

  if (request.strategy == Strategy::kSpread) {
    double best = std::numeric_limits<double>::max();
    for (const auto& [id, u] : fits) best = std::min(best, u);
    std::vector<std::string> ties;
    for (const auto& [id, u] : fits) {
      if (u <= best + 1e-9) ties.push_back(id);
    }
    out.node_id = ties[spread_cursor_++ % ties.size()];
    return out;
  }

  // DEFAULT (hybrid): pack below the threshold, else spread.
  const std::pair<std::string, double>* pack = nullptr;
  const std::pair<std::string, double>* least = nullptr;
  for (const auto& candidate : fits) {
    if (candidate.second <= options_.spread_threshold + 1e-9 &&
        (pack == nullptr || candidate.second > pack->second)) {
      pack = &candidate;
    }
    if (least == nullptr || candidate.second < least->second) least = &candidate;
  }
  out.node_id = pack != nullptr ? pack->first : least->first;
  return out;
}

}  // namespace phalanx::placement
