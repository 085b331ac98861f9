// The resource scheduler on its own (no cluster): its choices, and that remembering the last
// request's look at the nodes never changes them.
#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "placement/resource_scheduler.h"

namespace phalanx::placement {
namespace {

Resources R(std::map<std::string, double> amounts) { return *Resources::FromMap(amounts); }

ActorRequest Request(Strategy strategy, std::map<std::string, double> amounts,
                     std::vector<std::string> avoid = {}) {
  ActorRequest r;
  r.scheduling.strategy = strategy;
  r.scheduling.resources = R(std::move(amounts));
  r.scheduling.avoid_node_ids = std::move(avoid);
  return r;
}

TEST(SchedulerTest, SpreadRotatesAmongTheLeastUtilizedNodes) {
  ResourceScheduler scheduler;
  for (const char* id : {"a", "b", "c"}) scheduler.AddNode(id, R({{"CPU", 4}}));
  std::vector<std::string> placed;
  for (int i = 0; i < 6; ++i) {
    placed.push_back(
        scheduler.PlaceActor(Request(Strategy::kSpread, {{"CPU", 1}})).placement.node_id);
  }
  // Each round of three fills every node once before any gets a second.
  for (int round = 0; round < 2; ++round) {
    std::vector<std::string> three(placed.begin() + 3 * round, placed.begin() + 3 * round + 3);
    std::sort(three.begin(), three.end());
    EXPECT_EQ(three, (std::vector<std::string>{"a", "b", "c"})) << "round " << round;
  }
  // A release makes its node the least utilized: the next one goes there.
  scheduler.ReleaseActor("b", "", -1, R({{"CPU", 1}}));
  EXPECT_EQ(scheduler.PlaceActor(Request(Strategy::kSpread, {{"CPU", 1}})).placement.node_id, "b");
}

TEST(SchedulerTest, AnActorLimitedToSomeNodesGoesOnlyThereAndWaitsWhileTheyAreFull) {
  ResourceScheduler scheduler;
  for (const char* id : {"a", "b", "c"}) scheduler.AddNode(id, R({{"CPU", 2}}));
  auto limited = [](Strategy strategy) {
    ActorRequest r = Request(strategy, {{"CPU", 1}});
    r.scheduling.allowed_node_ids = {"b", "c"};
    return r;
  };
  std::vector<std::string> placed;
  for (int i = 0; i < 4; ++i) {
    placed.push_back(scheduler.PlaceActor(limited(i % 2 ? Strategy::kSpread : Strategy::kDefault))
                         .placement.node_id);
  }
  std::sort(placed.begin(), placed.end());
  EXPECT_EQ(placed, (std::vector<std::string>{"b", "b", "c", "c"}));
  // b and c are full; a has room but is not allowed: pending (not infeasible), saying why.
  auto waiting = scheduler.PlaceActor(limited(Strategy::kDefault)).placement;
  EXPECT_TRUE(waiting.node_id.empty());
  EXPECT_FALSE(waiting.infeasible);
  EXPECT_NE(waiting.reason.find("2 node(s) it may use"), std::string::npos) << waiting.reason;
  // The same look, unlimited, takes a (the remembered look is not reused across the lists).
  EXPECT_EQ(scheduler.PlaceActor(Request(Strategy::kDefault, {{"CPU", 1}})).placement.node_id, "a");
}

TEST(SchedulerTest, AReleaseOfAResourceTheNodeNoLongerHasLeavesNoneOfIt) {
  ResourceScheduler scheduler;
  scheduler.AddNode("a", R({{"CPU", 4}, {"GPU", 1}}));
  ASSERT_EQ(
      scheduler.PlaceActor(Request(Strategy::kDefault, {{"CPU", 1}, {"GPU", 1}})).placement.node_id,
      "a");
  scheduler.AddNode("a", R({{"CPU", 4}}));  // registered again, without its GPU
  scheduler.ReleaseActor("a", "", -1, R({{"CPU", 1}, {"GPU", 1}}));
  EXPECT_EQ(scheduler.Available("a")->ToString(), R({{"CPU", 4}}).ToString());
}

// Two schedulers get the same operations; before each placement the second looks at another
// request, so that it never places from a remembered look. Every choice must be the same.
TEST(SchedulerTest, ARunOfLikeRequestsPlacesAsAFreshLookAtEveryNodeWould) {
  ResourceScheduler remembered, fresh;
  std::vector<std::string> nodes;
  for (int i = 0; i < 40; ++i) {
    std::string id = absl::StrCat("node-", 100 + i);
    Resources total = i % 5 == 0 ? R({{"CPU", 8}, {"GPU", 2}}) : R({{"CPU", 4 + i % 3}});
    remembered.AddNode(id, total);
    fresh.AddNode(id, total);
    nodes.push_back(id);
  }
  std::vector<ActorRequest> kinds = {
      Request(Strategy::kSpread, {{"CPU", 0.5}}),
      Request(Strategy::kDefault, {{"CPU", 1}}),
      Request(Strategy::kSpread, {{"CPU", 0.1}, {"GPU", 1}}),
      Request(Strategy::kDefault, {{"CPU", 0.5}}, {"node-101", "node-102"}),
  };
  ActorRequest other = Request(Strategy::kDefault, {{"CPU", 0.25}});
  struct Placed {
    std::string node_id;
    Resources resources;
  };
  std::vector<Placed> live;
  std::mt19937 random(7);
  int placements = 0, pending = 0, removed = 0;
  for (int step = 0; step < 3000; ++step) {
    int what = random() % 100;
    if (what < 70) {
      // A run of one kind, as a scheduling pass over like pending actors makes.
      const ActorRequest& request = kinds[random() % kinds.size()];
      int run = 1 + random() % 20;
      for (int i = 0; i < run; ++i) {
        fresh.Probe(other);
        auto a = remembered.PlaceActor(request).placement;
        auto b = fresh.PlaceActor(request).placement;
        ASSERT_EQ(a.node_id, b.node_id) << "step " << step << ", placement " << i;
        ASSERT_EQ(a.reason, b.reason);
        if (a.node_id.empty()) {
          ++pending;
          break;
        }
        live.push_back({a.node_id, request.scheduling.resources});
        ++placements;
      }
    } else if (what < 95 && !live.empty()) {
      size_t k = random() % live.size();
      remembered.ReleaseActor(live[k].node_id, "", -1, live[k].resources);
      fresh.ReleaseActor(live[k].node_id, "", -1, live[k].resources);
      live.erase(live.begin() + k);
    } else if (what < 98) {
      const std::string& id = nodes[random() % nodes.size()];
      remembered.RemoveNode(id);
      fresh.RemoveNode(id);
      ++removed;
    } else {
      const std::string& id = nodes[random() % nodes.size()];
      remembered.AddNode(id, R({{"CPU", 6}}));
      fresh.AddNode(id, R({{"CPU", 6}}));
    }
  }
  EXPECT_GT(placements, 1000);
  EXPECT_GT(pending, 10);
  EXPECT_GT(removed, 10);
}

}  // namespace
}  // namespace phalanx::placement
