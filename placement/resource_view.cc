#include "placement/resource_view.h"

#include <utility>
#include <vector>

namespace phalanx::placement {

void ClusterResourceView::AddNode(const std::string& node_id, const Resources& total,
                                  std::map<std::string, std::string> labels) {
  Changed("");
  auto it = nodes_.find(node_id);
  if (it == nodes_.end()) {
    nodes_[node_id] = NodeResources{total, total, std::move(labels)};
    return;
  }
  // Keep the allocations: available = new total - (old total - old available).
  Resources used = it->second.total;
  used -= it->second.available;
  it->second.total = total;
  it->second.available = total;
  it->second.available -= used;
  it->second.labels = std::move(labels);
}

void ClusterResourceView::RemoveNode(const std::string& node_id) {
  if (nodes_.erase(node_id) > 0) Changed("");
}

bool ClusterResourceView::HasNode(const std::string& node_id) const {
  return nodes_.count(node_id) > 0;
}

bool ClusterResourceView::Allocate(const std::string& node_id, const Resources& request) {
  auto it = nodes_.find(node_id);
  if (it == nodes_.end() || !it->second.available.Contains(request)) return false;
  it->second.available -= request;
  Changed(node_id);
  return true;
}

void ClusterResourceView::Release(const std::string& node_id, const Resources& request) {
  auto it = nodes_.find(node_id);
  if (it == nodes_.end()) return;
  Changed(node_id);
  Resources& avail = it->second.available;
  avail += request;
  // Capped after the loop: capping at 0 erases the entry (a resource the node's total lost
  // when it re-registered), which must not happen while iterating.
  std::vector<std::pair<std::string, int64_t>> over;
  for (const auto& [name, amount] : avail.fixed()) {
    int64_t cap = it->second.total.GetFixed(name);
    if (amount > cap) over.emplace_back(name, cap);
  }
  for (const auto& [name, cap] : over) avail.SetFixed(name, cap);
}

const NodeResources* ClusterResourceView::Get(const std::string& node_id) const {
  auto it = nodes_.find(node_id);
  return it == nodes_.end() ? nullptr : &it->second;
}

bool ClusterResourceView::AnyNodeCouldFit(const Resources& request) const {
  for (const auto& [id, node] : nodes_) {
    if (node.total.Contains(request)) return true;
  }
  return false;
}

}  // namespace phalanx::placement
