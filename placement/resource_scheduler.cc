#include "placement/resource_scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace phalanx::placement {

ResourceScheduler::ResourceScheduler(SchedulingOptions options) : selector_(options) {}

void ResourceScheduler::AddNode(const std::string& node_id, const Resources& total,
                                std::map<std::string, std::string> labels) {
  absl::MutexLock lock(&mu_);
  view_.AddNode(node_id, total, std::move(labels));
}

std::vector<std::pair<std::string, int>> ResourceScheduler::RemoveNode(const std::string& node_id) {
  absl::MutexLock lock(&mu_);
  view_.RemoveNode(node_id);
  std::vector<std::pair<std::string, int>> lost;
  for (auto& [pg, bundles] : bundles_) {
    for (auto it = bundles.begin(); it != bundles.end();) {
      if (it->second.node_id == node_id) {
        lost.emplace_back(pg, it->first);
        it = bundles.erase(it);
      } else {
        ++it;
      }
    }
  }
  return lost;
}

bool ResourceScheduler::HasNode(const std::string& node_id) const {
  absl::MutexLock lock(&mu_);
  return view_.HasNode(node_id);
}

ActorPlacement ResourceScheduler::SelectLocked(const ActorRequest& request) {
  ActorPlacement out;
  if (request.placement_group_id.empty()) {
    out.placement = selector_.Select(view_, request.scheduling);
    return out;
  }
  auto group = bundles_.find(request.placement_group_id);
  const Resources& need = request.scheduling.resources;
  if (group == bundles_.end() || group->second.empty()) {
    out.placement.reason = absl::StrCat("waiting for placement group ",
                                        request.placement_group_id.substr(0, 8), " to be placed");
    return out;
  }
  for (const auto& [index, bundle] : group->second) {
    if (request.bundle_index >= 0 && index != request.bundle_index) continue;
    if (bundle.available.Contains(need)) {
      out.placement.node_id = bundle.node_id;
      out.bundle_index = index;
      return out;
    }
  }
  out.placement.reason =
      absl::StrCat("waiting for room in placement group ", request.placement_group_id.substr(0, 8),
                   request.bundle_index >= 0 ? absl::StrCat(" bundle ", request.bundle_index) : "",
                   ": needs ", need.ToString());
  return out;
}

ActorPlacement ResourceScheduler::PlaceActor(const ActorRequest& request) {
  absl::MutexLock lock(&mu_);
  ActorPlacement out = SelectLocked(request);
  if (out.placement.node_id.empty()) return out;
  const Resources& need = request.scheduling.resources;
  if (request.placement_group_id.empty()) {
    view_.Allocate(out.placement.node_id, need);
  } else {
    bundles_[request.placement_group_id][out.bundle_index].available -= need;
  }
  return out;
}

ActorPlacement ResourceScheduler::Probe(const ActorRequest& request) {
  absl::MutexLock lock(&mu_);
  return SelectLocked(request);
}

bool ResourceScheduler::AllocateActor(const std::string& node_id, const std::string& pg_id,
                                      int bundle_index, const Resources& resources) {
  absl::MutexLock lock(&mu_);
  if (pg_id.empty()) return view_.Allocate(node_id, resources);
  auto group = bundles_.find(pg_id);
  if (group == bundles_.end()) return false;
  auto bundle = group->second.find(bundle_index);
  if (bundle == group->second.end() || bundle->second.node_id != node_id ||
      !bundle->second.available.Contains(resources)) {
    return false;
  }
  bundle->second.available -= resources;
  return true;
}

void ResourceScheduler::ReleaseActor(const std::string& node_id, const std::string& pg_id,
                                     int bundle_index, const Resources& resources) {
  absl::MutexLock lock(&mu_);
  if (pg_id.empty()) {
    view_.Release(node_id, resources);
    return;
  }
  auto group = bundles_.find(pg_id);
  if (group == bundles_.end()) return;
  auto bundle = group->second.find(bundle_index);
  if (bundle == group->second.end() || bundle->second.node_id != node_id) return;
  bundle->second.available += resources;
  for (const auto& [name, amount] : bundle->second.available.fixed()) {
    int64_t cap = bundle->second.total.GetFixed(name);
    if (amount > cap) bundle->second.available.SetFixed(name, cap);
  }
}

BundlePlan ResourceScheduler::ReserveBundles(const std::string& pg_id, BundleStrategy strategy,
                                             const std::vector<Resources>& bundles,
                                             const std::vector<std::string>& fixed) {
  absl::MutexLock lock(&mu_);
  BundlePlan plan = PlanBundles(view_, strategy, bundles, fixed);
  if (!plan.placed) return plan;
  for (size_t i = 0; i < bundles.size(); ++i) {
    bool already = i < fixed.size() && !fixed[i].empty();
    if (already) continue;
    view_.Allocate(plan.nodes[i], bundles[i]);
    bundles_[pg_id][static_cast<int>(i)] = Bundle{plan.nodes[i], bundles[i], bundles[i]};
  }
  return plan;
}

BundlePlan ResourceScheduler::ProbeBundles(BundleStrategy strategy,
                                           const std::vector<Resources>& bundles) {
  absl::MutexLock lock(&mu_);
  return PlanBundles(view_, strategy, bundles, {});
}

bool ResourceScheduler::ReserveBundleAt(const std::string& pg_id, int index,
                                        const std::string& node_id, const Resources& resources) {
  absl::MutexLock lock(&mu_);
  if (!view_.Allocate(node_id, resources)) return false;
  bundles_[pg_id][index] = Bundle{node_id, resources, resources};
  return true;
}

void ResourceScheduler::ReleaseBundles(const std::string& pg_id, const std::vector<int>& indices) {
  absl::MutexLock lock(&mu_);
  auto group = bundles_.find(pg_id);
  if (group == bundles_.end()) return;
  for (auto it = group->second.begin(); it != group->second.end();) {
    bool chosen =
        indices.empty() || std::find(indices.begin(), indices.end(), it->first) != indices.end();
    if (!chosen) {
      ++it;
      continue;
    }
    view_.Release(it->second.node_id, it->second.total);
    it = group->second.erase(it);
  }
  if (group->second.empty()) bundles_.erase(group);
}

std::string ResourceScheduler::BundleNode(const std::string& pg_id, int index) const {
  absl::MutexLock lock(&mu_);
  auto group = bundles_.find(pg_id);
  if (group == bundles_.end()) return "";
  auto bundle = group->second.find(index);
  return bundle == group->second.end() ? "" : bundle->second.node_id;
}

std::optional<Resources> ResourceScheduler::Available(const std::string& node_id) const {
  absl::MutexLock lock(&mu_);
  const NodeResources* node = view_.Get(node_id);
  if (node == nullptr) return std::nullopt;
  return node->available;
}

std::optional<Resources> ResourceScheduler::BundleAvailable(const std::string& pg_id,
                                                            int index) const {
  absl::MutexLock lock(&mu_);
  auto group = bundles_.find(pg_id);
  if (group == bundles_.end()) return std::nullopt;
  auto bundle = group->second.find(index);
  if (bundle == group->second.end()) return std::nullopt;
  return bundle->second.available;
}

}  // namespace phalanx::placement
