#include "placement/bundle_policy.h"

#include <algorithm>
#include <numeric>
#include <set>

#include "absl/strings/str_cat.h"

namespace phalanx::placement {

absl::StatusOr<BundleStrategy> ParseBundleStrategy(const std::string& name) {
  if (name == "PACK" || name.empty()) return BundleStrategy::kPack;
  if (name == "SPREAD") return BundleStrategy::kSpread;
  if (name == "STRICT_PACK") return BundleStrategy::kStrictPack;
  if (name == "STRICT_SPREAD") return BundleStrategy::kStrictSpread;
  return absl::InvalidArgumentError(
      absl::StrCat("placement group strategy '", name,
                   "' is unknown; use PACK, SPREAD, STRICT_PACK or STRICT_SPREAD"));
}

const char* BundleStrategyName(BundleStrategy strategy) {
  switch (strategy) {
    case BundleStrategy::kPack:
      return "PACK";
    case BundleStrategy::kSpread:
      return "SPREAD";
    case BundleStrategy::kStrictPack:
      return "STRICT_PACK";
    case BundleStrategy::kStrictSpread:
      return "STRICT_SPREAD";
  }
  return "PACK";
}

absl::Status ValidateBundles(const std::vector<std::map<std::string, double>>& bundles) {
  if (bundles.empty()) {
    return absl::InvalidArgumentError(
        "placement group: no bundles; give at least one, e.g. [{\"CPU\": 1}]");
  }
  for (size_t i = 0; i < bundles.size(); ++i) {
    std::string what = absl::StrCat("placement group bundle ", i);
    if (bundles[i].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " is empty; every bundle needs a resource, e.g. {\"CPU\": 1}"));
    }
    for (const auto& [name, amount] : bundles[i]) {
      if (!(amount > 0)) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": resource '", name, "' has amount ",
                                                       amount, "; amounts must be > 0"));
      }
    }
    if (auto r = Resources::FromMap(bundles[i], what); !r.ok()) return r.status();
  }
  return absl::OkStatus();
}

namespace {

std::string Describe(const std::vector<Resources>& bundles, const std::vector<size_t>& which) {
  std::string out;
  for (size_t i : which) absl::StrAppend(&out, out.empty() ? "" : ", ", bundles[i].ToString());
  return out;
}

}  // namespace

BundlePlan PlanBundles(const ClusterResourceView& view, BundleStrategy strategy,
                       const std::vector<Resources>& bundles,
                       const std::vector<std::string>& fixed) {
  BundlePlan plan;
  plan.nodes = fixed;
  plan.nodes.resize(bundles.size());
  std::vector<size_t> todo;
  for (size_t i = 0; i < bundles.size(); ++i) {
    if (plan.nodes[i].empty()) todo.push_back(i);
  }
  if (todo.empty()) {
    plan.placed = true;
    return plan;
  }
  if (view.nodes().empty()) {
    plan.reason = "no alive node in the cluster yet";
    return plan;
  }
  // Never: a bundle bigger than every node, or a STRICT_PACK group bigger than every node.
  for (size_t i : todo) {
    if (!view.AnyNodeCouldFit(bundles[i])) {
      plan.infeasible = true;
      plan.reason =
          absl::StrCat("bundle ", i, " ", bundles[i].ToString(), " is bigger than every node");
      return plan;
    }
  }
  if (strategy == BundleStrategy::kStrictPack) {
    Resources sum;
    for (const auto& b : bundles) sum += b;
    if (!view.AnyNodeCouldFit(sum)) {
      plan.infeasible = true;
      plan.reason =
          absl::StrCat("STRICT_PACK needs one node with ", sum.ToString(), "; no node is that big");
      return plan;
    }
  }

  // Work on a copy: take what each bundle needs as we go.
  std::map<std::string, Resources> avail;
  for (const auto& [id, node] : view.nodes()) avail[id] = node.available;
  std::map<std::string, int> used;  // bundles of this group per node
  for (size_t i = 0; i < bundles.size(); ++i) {
    if (!plan.nodes[i].empty()) ++used[plan.nodes[i]];
  }
  // Biggest first: the hard ones get the room.
  std::sort(todo.begin(), todo.end(), [&](size_t a, size_t b) {
    double sa = 0, sb = 0;
    for (const auto& [n, v] : bundles[a].fixed()) sa += static_cast<double>(v);
    for (const auto& [n, v] : bundles[b].fixed()) sb += static_cast<double>(v);
    return sa > sb;
  });
  auto take = [&](size_t i, const std::string& node) {
    avail[node] -= bundles[i];
    ++used[node];
    plan.nodes[i] = node;
  };
  auto free_room = [&](const std::string& node) {
    double room = 0;
    for (const auto& [n, v] : avail[node].fixed()) room += static_cast<double>(v);
    return room;
  };

  if (strategy == BundleStrategy::kStrictPack) {
    Resources sum;
    for (size_t i : todo) sum += bundles[i];
    std::string target;
    for (const auto& [node, count] : used) {
      if (count > 0) target = node;  // the group already lives there
    }
    if (target.empty()) {
      // The node left with the least room that still fits everything (pack tightly).
      for (const auto& [id, a] : avail) {
        if (a.Contains(sum) && (target.empty() || free_room(id) < free_room(target))) target = id;
      }
    }
    if (target.empty() || !avail[target].Contains(sum)) {
      plan.reason = absl::StrCat("STRICT_PACK: no node has ", sum.ToString(), " available now");
      return plan;
    }
    for (size_t i : todo) take(i, target);
    plan.placed = true;
    return plan;
  }

  for (size_t i : todo) {
    std::string best;
    for (const auto& [id, a] : avail) {
      if (!a.Contains(bundles[i])) continue;
      if (strategy == BundleStrategy::kStrictSpread && used[id] > 0) continue;
      if (best.empty()) {
        best = id;
        continue;
      }
      bool better;
      switch (strategy) {
        case BundleStrategy::kPack:
          // Prefer nodes the group already uses, then the fullest.
          better = used[id] != used[best] ? used[id] > used[best] : free_room(id) < free_room(best);
          break;
        default:  // SPREAD, STRICT_SPREAD: fewest bundles of the group, then the emptiest
          better = used[id] != used[best] ? used[id] < used[best] : free_room(id) > free_room(best);
          break;
      }
      if (better) best = id;
    }
    if (best.empty()) {
      std::vector<size_t> rest(todo.begin(), todo.end());
      if (strategy == BundleStrategy::kStrictSpread) {
        size_t distinct = avail.size();
        plan.reason = absl::StrCat(
            "STRICT_SPREAD needs ", bundles.size(), " nodes with room for one bundle each; ",
            distinct, " node(s) alive, not enough with room for ", Describe(bundles, rest));
      } else {
        plan.reason = absl::StrCat("waiting for resources: bundles ", Describe(bundles, rest),
                                   " do not all fit what is available");
      }
      plan.nodes = fixed;
      plan.nodes.resize(bundles.size());
      return plan;
    }
    take(i, best);
  }
  plan.placed = true;
  return plan;
}

}  // namespace phalanx::placement
