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

// Whether `node` has `request` available now, and if so its UtilizationAfter the request:
// Contains and UtilizationAfter in one lookup per resource.
bool FitsNow(const NodeResources& node, const Resources& request, double* utilization) {
  double worst = 0;
  for (const auto& [name, amount] : request.fixed()) {
    int64_t available = node.available.GetFixed(name);
    if (available < amount) return false;
    int64_t total = node.total.GetFixed(name);
    if (total <= 0) continue;
    int64_t used = total - available + amount;
    worst = std::max(worst, static_cast<double>(used) / static_cast<double>(total));
  }
  *utilization = worst;
  return true;
}

}  // namespace

const std::vector<NodeSelector::NodeFit>& NodeSelector::Evaluate(const ClusterResourceView& view,
                                                                 const SchedulingRequest& request) {
  auto evaluate = [&](NodeFit& f) {
    auto named = [&](const std::vector<std::string>& ids) {
      return std::find(ids.begin(), ids.end(), *f.id) != ids.end();
    };
    f.fits = !named(request.avoid_node_ids) &&
             (request.allowed_node_ids.empty() || named(request.allowed_node_ids)) &&
             FitsNow(*f.node, request.resources, &f.utilization);
  };
  bool same_request = memo_.view == &view && memo_.resources == request.resources &&
                      memo_.avoid_node_ids == request.avoid_node_ids &&
                      memo_.allowed_node_ids == request.allowed_node_ids;
  if (same_request && memo_.version == view.version()) return memo_.nodes;
  if (same_request && memo_.version + 1 == view.version() && !view.last_changed().empty()) {
    // One change since, to one node's available resources: the node set is the same (so are
    // the pointers into it), and only that node's fit can differ.
    const std::string& changed = view.last_changed();
    auto it = std::lower_bound(memo_.nodes.begin(), memo_.nodes.end(), changed,
                               [](const NodeFit& f, const std::string& id) { return *f.id < id; });
    if (it != memo_.nodes.end() && *it->id == changed) evaluate(*it);
    memo_.version = view.version();
    return memo_.nodes;
  }
  memo_.view = &view;
  memo_.version = view.version();
  memo_.resources = request.resources;
  memo_.avoid_node_ids = request.avoid_node_ids;
  memo_.allowed_node_ids = request.allowed_node_ids;
  memo_.nodes.clear();
  memo_.nodes.reserve(view.nodes().size());
  for (const auto& [id, node] : view.nodes()) {
    memo_.nodes.push_back(NodeFit{&id, &node});
    evaluate(memo_.nodes.back());
  }
  return memo_.nodes;
}

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

  const std::vector<NodeFit>& nodes = Evaluate(view, request);
  if (std::none_of(nodes.begin(), nodes.end(), [](const NodeFit& f) { return f.fits; })) {
    out.reason = WhyPending(view, request.resources);
    if (!request.allowed_node_ids.empty()) {
      out.reason = absl::StrCat("none of the ", request.allowed_node_ids.size(),
                                " node(s) it may use has room: ", out.reason);
    }
    return out;
  }

  if (request.strategy == Strategy::kSpread) {
    double best = std::numeric_limits<double>::max();
    for (const NodeFit& f : nodes) {
      if (f.fits) best = std::min(best, f.utilization);
    }
    auto tie = [&](const NodeFit& f) { return f.fits && f.utilization <= best + 1e-9; };
    size_t ties = std::count_if(nodes.begin(), nodes.end(), tie);
    size_t pick = spread_cursor_++ % ties;
    for (const NodeFit& f : nodes) {
      if (tie(f) && pick-- == 0) {
        out.node_id = *f.id;
        break;
      }
    }
    return out;
  }

  // DEFAULT (hybrid): pack below the threshold, else spread.
  const NodeFit* pack = nullptr;
  const NodeFit* least = nullptr;
  for (const NodeFit& candidate : nodes) {
    if (!candidate.fits) continue;
    if (candidate.utilization <= options_.spread_threshold + 1e-9 &&
        (pack == nullptr || candidate.utilization > pack->utilization)) {
      pack = &candidate;
    }
    if (least == nullptr || candidate.utilization < least->utilization) least = &candidate;
  }
  out.node_id = pack != nullptr ? *pack->id : *least->id;
  return out;
}

}  // namespace phalanx::placement
