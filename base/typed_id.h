// Typed ids at the public APIs' boundaries: an actor's, a node's or a placement group's hex
// string, as `phalanx list` prints it, and a job's id (the name it was submitted under). One
// kind is never taken for another, and a string becomes one only explicitly: ActorId(hex).
// str() gives the string back (Hex() too, for the hex ones).
#pragma once

#include <compare>
#include <ostream>
#include <string>
#include <utility>

namespace phalanx {

template <typename Tag>
class TypedId {
 public:
  TypedId() = default;
  explicit TypedId(std::string id) : id_(std::move(id)) {}
  const std::string& str() const { return id_; }
  const std::string& Hex() const { return id_; }
  // The default id: no actor, node, group or job.
  bool IsNil() const { return id_.empty(); }
  bool operator==(const TypedId& other) const = default;
  auto operator<=>(const TypedId& other) const = default;
  template <typename H>
  friend H AbslHashValue(H h, const TypedId& id) {
    return H::combine(std::move(h), id.id_);
  }
  friend std::ostream& operator<<(std::ostream& os, const TypedId& id) { return os << id.id_; }

 private:
  std::string id_;
};
using ActorId = TypedId<struct ActorIdTag>;
using NodeId = TypedId<struct NodeIdTag>;
using PlacementGroupId = TypedId<struct PlacementGroupIdTag>;
using JobId = TypedId<struct JobIdTag>;

}  // namespace phalanx
