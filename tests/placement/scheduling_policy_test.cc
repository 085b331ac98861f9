// NodeSelector on a resource view, without a cluster.
#include "placement/scheduling_policy.h"

#include <map>
#include <string>

#include "gtest/gtest.h"
#include "placement/resource_view.h"

namespace phalanx::placement {
namespace {

Resources Cpus(double n) {
  Resources r;
  if (n > 0) r.Set("CPU", n);
  return r;
}

SchedulingRequest Ask(double cpus) {
  SchedulingRequest request;
  request.resources = Cpus(cpus);
  return request;
}

TEST(NodeSelectorTest, DefaultPacksOntoTheBusiestNodeBelowTheThreshold) {
  ClusterResourceView view;
  for (const char* id : {"a", "b", "c"}) view.AddNode(id, Cpus(4));
  ASSERT_TRUE(view.Allocate("b", Cpus(1)));
  NodeSelector selector;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(selector.Select(view, Ask(1)).node_id, "b");  // 2/4 after: still packs
  }
}

TEST(NodeSelectorTest, EquallyGoodNodesTakeTurnsSoActorsThatAskForNothingSpread) {
  ClusterResourceView view;
  for (const char* id : {"a", "b", "c"}) view.AddNode(id, Cpus(2));
  NodeSelector selector;
  std::map<std::string, int> chosen;
  for (int i = 0; i < 6; ++i) ++chosen[selector.Select(view, Ask(0)).node_id];
  EXPECT_EQ(chosen, (std::map<std::string, int>{{"a", 2}, {"b", 2}, {"c", 2}}));
}

TEST(NodeSelectorTest, AvoidedNodesAreNeverChosen) {
  ClusterResourceView view;
  for (const char* id : {"a", "b"}) view.AddNode(id, Cpus(2));
  NodeSelector selector;
  SchedulingRequest request = Ask(0);
  request.avoid_node_ids = {"a"};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(selector.Select(view, request).node_id, "b");
}

}  // namespace
}  // namespace phalanx::placement
