// ClusterResourceView: total and available resources per alive node, as the GCS sees them.
// The scheduler allocates from it when it places an actor (or a placement-group bundle) and
// releases when the actor ends, so "available" is exact (fixed point, see Resources). Not
// thread-safe: its owner holds a lock around every call.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/resources.h"

namespace phalanx::placement {

struct NodeResources {
  Resources total;
  Resources available;
  std::map<std::string, std::string> labels;
};

class ClusterResourceView {
 public:
  // Adds a node with everything available, or updates its total (keeping what is allocated).
  void AddNode(const std::string& node_id, const Resources& total,
               std::map<std::string, std::string> labels = {});
  void RemoveNode(const std::string& node_id);
  bool HasNode(const std::string& node_id) const;

  // Takes `request` from the node's available resources; false (and nothing taken) when the
  // node is unknown or has too little.
  bool Allocate(const std::string& node_id, const Resources& request);
  // Gives `request` back (never above the node's total).
  void Release(const std::string& node_id, const Resources& request);

  const NodeResources* Get(const std::string& node_id) const;
  const std::map<std::string, NodeResources>& nodes() const { return nodes_; }

  // True when some node's total could hold `request` (ignoring what is in use).
  bool AnyNodeCouldFit(const Resources& request) const;

  // Moves on every change, so that state derived from the view (the node selector's memo)
  // is known current while it has not moved.
  uint64_t version() const { return version_; }
  // The node whose available resources the latest change was to (an allocation or a
  // release), or empty when that change added, updated or removed a node.
  const std::string& last_changed() const { return last_changed_; }

 private:
  void Changed(const std::string& node_id) {
    ++version_;
    last_changed_ = node_id;
  }

  std::map<std::string, NodeResources> nodes_;  // ordered: placement is deterministic
  uint64_t version_ = 0;
  std::string last_changed_;
};

}  // namespace phalanx::placement
