// Placement groups and scheduling on several node managers with declared resources.
#include <signal.h>

#include <atomic>
#include <set>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_join.h"
#include "actors/api.h"
#include "base/describe.h"
#include "base/proto/node.grpc.pb.h"
#include "base/rpc.h"
#include "client/gcs_client.h"
#include "gtest/gtest.h"
#include "tests/actors/test_actors.h"
#include "tests/testing/cluster_test.h"
#include "tests/testing/test_util.h"

namespace phalanx {
namespace {

using testing::Counter;

class PlacementTest : public testing::ClusterTest {
 protected:
  void SetUp() override {
    ClusterTest::SetUp();
    if (HasFatalFailure()) return;
  }

  void TearDown() override {
    ClusterTest::TearDown();
    for (auto& [id, n] : nodes_) n.Terminate();
  }

  void AddNode(const std::string& id, double cpus, int reserve_delay_ms = 0) {
    testing::NodeOptions options;
    options.num_cpus = cpus;
    options.debug_reserve_delay_ms = reserve_delay_ms;
    nodes_[id] = testing::StartNode(*gcs_, id, options);
  }

  rpc::PlacementGroupInfo Info(const PlacementGroup& pg) {
    return *client_->GetPlacementGroup(pg.id().Hex());
  }

  // The GCS's view of a node's available CPUs.
  double AvailableCpu(const std::string& node_id) {
    auto nodes = client_->GetAllNodes();
    if (!nodes.ok()) return -1;
    for (const auto& n : *nodes) {
      if (n.node_id() == node_id) return rpc::FromProto(n.available()).Get("CPU");
    }
    return -1;
  }

  // The node manager's address, as the GCS has it (empty if unknown).
  std::string Address(const std::string& node_id) {
    auto nodes = client_->GetAllNodes();
    if (!nodes.ok()) return "";
    for (const auto& n : *nodes) {
      if (n.node_id() == node_id) return n.address();
    }
    return "";
  }

  // The node manager's own ledger of reserved bundles.
  rpc::GetNodeStatsReply NodeStats(const std::string& node_id) {
    auto stub = rpc::NodeManagerService::NewStub(rpc::MakeChannel(Address(node_id)));
    grpc::ClientContext ctx;
    rpc::PrepareContext(&ctx, gcs_->token(), absl::Seconds(5));
    rpc::GetNodeStatsReply reply;
    stub->GetNodeStats(&ctx, rpc::GetNodeStatsRequest(), &reply);
    return reply;
  }

  std::vector<std::string> Nodes(const PlacementGroup& pg) {
    absl::StatusOr<std::vector<NodeId>> nodes = pg.BundleNodes();
    EXPECT_TRUE(nodes.ok()) << nodes.status();
    std::vector<std::string> out;
    if (nodes.ok()) {
      for (const NodeId& node : *nodes) out.push_back(node.Hex());
    }
    return out;
  }

  std::map<std::string, testing::ChildProcess> nodes_;
};

std::vector<std::map<std::string, double>> Cpus(int n, double each) {
  return std::vector<std::map<std::string, double>>(n, {{"CPU", each}});
}

TEST_F(PlacementTest, EachStrategyPlacesBundlesAsDefined) {
  for (const char* id : {"node-a", "node-b", "node-c"}) AddNode(id, 4);

  auto strict_pack = CreatePlacementGroup(Cpus(3, 1), PlacementStrategy::kStrictPack);
  ASSERT_TRUE(strict_pack.ok()) << strict_pack.status();
  ASSERT_TRUE(strict_pack->Wait(absl::Seconds(10)).ok());
  auto sp = Nodes(*strict_pack);
  EXPECT_EQ(std::set<std::string>(sp.begin(), sp.end()).size(), 1u);
  ASSERT_TRUE(RemovePlacementGroup(*strict_pack).ok());

  auto pack = CreatePlacementGroup(Cpus(3, 1), PlacementStrategy::kPack);
  ASSERT_TRUE(pack->Wait(absl::Seconds(10)).ok());
  auto p = Nodes(*pack);
  EXPECT_EQ(std::set<std::string>(p.begin(), p.end()).size(), 1u) << "PACK fits on one node";
  ASSERT_TRUE(RemovePlacementGroup(*pack).ok());

  auto pack_big =
      CreatePlacementGroup(Cpus(3, 3), PlacementStrategy::kPack);  // 9 CPUs: cannot fit one node
  ASSERT_TRUE(pack_big->Wait(absl::Seconds(10)).ok());
  auto pb = Nodes(*pack_big);
  EXPECT_EQ(std::set<std::string>(pb.begin(), pb.end()).size(), 3u);
  ASSERT_TRUE(RemovePlacementGroup(*pack_big).ok());

  for (PlacementStrategy strategy :
       {PlacementStrategy::kSpread, PlacementStrategy::kStrictSpread}) {
    auto spread = CreatePlacementGroup(Cpus(3, 1), strategy);
    ASSERT_TRUE(spread->Wait(absl::Seconds(10)).ok()) << ToString(strategy);
    auto s = Nodes(*spread);
    EXPECT_EQ(std::set<std::string>(s.begin(), s.end()).size(), 3u) << ToString(strategy);
    ASSERT_TRUE(RemovePlacementGroup(*spread).ok());
  }
  // SPREAD is best effort: 4 bundles on 3 nodes still place (one node takes two).
  auto spread4 = CreatePlacementGroup(Cpus(4, 1), PlacementStrategy::kSpread);
  ASSERT_TRUE(spread4->Wait(absl::Seconds(10)).ok());
  auto s4 = Nodes(*spread4);
  EXPECT_EQ(std::set<std::string>(s4.begin(), s4.end()).size(), 3u);
  ASSERT_TRUE(RemovePlacementGroup(*spread4).ok());
  for (const char* id : {"node-a", "node-b", "node-c"}) {
    EXPECT_TRUE(testing::WaitFor([&] { return AvailableCpu(id) == 4; }, absl::Seconds(5))) << id;
  }
}

TEST_F(PlacementTest, StrictSpreadWaitsForAThirdNode) {
  AddNode("node-a", 2);
  AddNode("node-b", 2);
  auto pg = CreatePlacementGroup(Cpus(3, 1), PlacementStrategy::kStrictSpread, "three-ways");
  ASSERT_TRUE(pg.ok()) << pg.status();
  auto early = pg->Wait(absl::Milliseconds(500));
  ASSERT_TRUE(absl::IsDeadlineExceeded(early)) << early;
  EXPECT_NE(early.message().find("STRICT_SPREAD needs 3 nodes"), std::string::npos) << early;
  EXPECT_EQ(Info(*pg).state(), rpc::PG_PENDING);
  // Nothing of it is held while it waits.
  EXPECT_EQ(AvailableCpu("node-a"), 2);
  auto status = testing::RunCommand({testing::BinDir() + "/phalanx", "status", "--address",
                                     gcs_->address(), "--token", gcs_->token()});
  EXPECT_NE(status.output.find("Pending: 1x placement group 'three-ways'"), std::string::npos)
      << status.output;

  AddNode("node-c", 2);
  ASSERT_TRUE(pg->Wait(absl::Seconds(10)).ok());
  auto n = Nodes(*pg);
  EXPECT_EQ(std::set<std::string>(n.begin(), n.end()),
            (std::set<std::string>{"node-a", "node-b", "node-c"}));
}

TEST_F(PlacementTest, KilledNodeDuringTheReservationRoundRollsBackEverything) {
  AddNode("node-a", 2);
  AddNode("node-b", 2, /*reserve_delay_ms=*/1500);  // answers reservations slowly
  auto pg = CreatePlacementGroup(Cpus(2, 1), PlacementStrategy::kStrictSpread);
  ASSERT_TRUE(pg.ok());
  // node-a has reserved by now; node-b is still reserving when it dies.
  ASSERT_TRUE(
      testing::WaitFor([&] { return NodeStats("node-a").bundles_size() == 1; }, absl::Seconds(5)));
  nodes_["node-b"].KillAndWait();
  // Rolled back: node-a holds nothing, in its own ledger and in the GCS's view.
  ASSERT_TRUE(
      testing::WaitFor([&] { return NodeStats("node-a").bundles_size() == 0; }, absl::Seconds(10)));
  EXPECT_EQ(rpc::FromProto(NodeStats("node-a").available()).Get("CPU"), 2);
  ASSERT_TRUE(testing::WaitFor([&] { return AvailableCpu("node-a") == 2; }, absl::Seconds(5)));
  EXPECT_NE(Info(*pg).state(), rpc::PG_CREATED);
  // A new node: placed on node-a and node-c, and only those bundles are held.
  AddNode("node-c", 2);
  ASSERT_TRUE(pg->Wait(absl::Seconds(15)).ok());
  auto n = Nodes(*pg);
  EXPECT_EQ(std::set<std::string>(n.begin(), n.end()), (std::set<std::string>{"node-a", "node-c"}));
  EXPECT_EQ(NodeStats("node-a").bundles_size(), 1);
  ASSERT_TRUE(testing::WaitFor([&] { return AvailableCpu("node-a") == 1; }, absl::Seconds(5)));
}

TEST_F(PlacementTest, NodeDeathReschedulesOnlyItsBundles) {
  for (const char* id : {"node-a", "node-b", "node-c"}) AddNode(id, 2);
  // Every node's room is known before the group is placed: a node registered but not yet
  // counted left node-c without a bundle once (CI), and the test then read past its vectors.
  for (const char* id : {"node-a", "node-b", "node-c"}) {
    ASSERT_TRUE(testing::WaitFor([&] { return AvailableCpu(id) == 2; }, absl::Seconds(10))) << id;
  }
  auto pg = CreatePlacementGroup(Cpus(3, 1), PlacementStrategy::kSpread);
  ASSERT_TRUE(pg->Wait(absl::Seconds(10)).ok());
  std::vector<std::string> before = Nodes(*pg);
  ASSERT_EQ(before.size(), 3u);
  std::vector<ActorHandle<Counter>> members;
  for (int i = 0; i < 3; ++i) {
    auto a =
        Actor<Counter>().SetResource("CPU", 1).SetPlacementGroup(*pg, i).SetMaxRestarts(-1).Remote(
            i);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_EQ(*Get(a->Task(&Counter::Value).Remote(), absl::Seconds(20)), i);
    EXPECT_EQ(client_->GetActor(a->id().Hex())->node_id(), before[i]);
    members.push_back(*a);
  }
  int lost = static_cast<int>(std::find(before.begin(), before.end(), "node-c") - before.begin());
  ASSERT_LT(lost, 3) << "SPREAD left node-c without a bundle: " << absl::StrJoin(before, ", ");
  nodes_["node-c"].KillAndWait();
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        auto now = Nodes(*pg);
        return Info(*pg).state() == rpc::PG_RESCHEDULING ||
               (now.size() == 3 && now[lost] != "node-c");
      },
      absl::Seconds(10)));
  ASSERT_TRUE(pg->Wait(absl::Seconds(15)).ok());
  std::vector<std::string> after = Nodes(*pg);
  ASSERT_EQ(after.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    if (i == lost) {
      EXPECT_NE(after[i], "node-c");
    } else {
      EXPECT_EQ(after[i], before[i]) << "bundle " << i << " on a live node moved";
    }
  }
  // The actor of the lost bundle came back inside its bundle's new home.
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        auto a = client_->GetActor(members[lost].id().Hex());
        return a->state() == rpc::ACTOR_ALIVE && a->num_restarts() == 1;
      },
      absl::Seconds(20)));
  EXPECT_EQ(client_->GetActor(members[lost].id().Hex())->node_id(), after[lost]);
  EXPECT_EQ(*Get(members[lost].Task(&Counter::Value).Remote(), absl::Seconds(20)), lost);
  for (int i = 0; i < 3; ++i) {
    if (i != lost) {
      EXPECT_EQ(client_->GetActor(members[i].id().Hex())->num_restarts(), 0);
    }
  }
}

TEST_F(PlacementTest, FractionalCpusAddUpExactly) {
  AddNode("node-a", 1);
  std::vector<ActorHandle<Counter>> tenths;
  for (int i = 0; i < 10; ++i) {
    auto a = Actor<Counter>().SetResource("CPU", 0.1).Remote(i);
    ASSERT_TRUE(a.ok());
    tenths.push_back(*a);
  }
  for (auto& a : tenths) ASSERT_TRUE(Get(a.Task(&Counter::Value).Remote(), absl::Seconds(30)).ok());
  EXPECT_EQ(AvailableCpu("node-a"), 0);
  auto eleventh = Actor<Counter>().SetResource("CPU", 0.1).Remote(0);
  ASSERT_TRUE(eleventh.ok());
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_EQ(client_->GetActor(eleventh->id().Hex())->state(), rpc::ACTOR_PENDING);
  ASSERT_TRUE(Kill(tenths[0]).ok());
  ASSERT_TRUE(testing::WaitFor(
      [&] { return client_->GetActor(eleventh->id().Hex())->state() == rpc::ACTOR_ALIVE; },
      absl::Seconds(20)));
  for (auto& a : tenths) ASSERT_TRUE(Kill(a).ok());
  ASSERT_TRUE(Kill(*eleventh).ok());
  ASSERT_TRUE(testing::WaitFor([&] { return AvailableCpu("node-a") == 1; }, absl::Seconds(10)));

  // 0.3 + 0.3 + 0.4 is exactly one CPU.
  auto pg = CreatePlacementGroup({{{"CPU", 0.3}}, {{"CPU", 0.3}}, {{"CPU", 0.4}}},
                                 PlacementStrategy::kStrictPack);
  ASSERT_TRUE(pg->Wait(absl::Seconds(10)).ok());
  EXPECT_EQ(AvailableCpu("node-a"), 0);
}

TEST_F(PlacementTest, RemovalKillsTheGroupsActorsAndFreesEverything) {
  AddNode("node-a", 2);
  AddNode("node-b", 2);
  auto pg = CreatePlacementGroup({{{"CPU", 2}}, {{"CPU", 1}}}, PlacementStrategy::kSpread);
  ASSERT_TRUE(pg->Wait(absl::Seconds(10)).ok());
  auto in_any = Actor<Counter>().SetResource("CPU", 1).SetPlacementGroup(*pg).Remote(1);
  auto in_zero = Actor<Counter>().SetResource("CPU", 1).SetPlacementGroup(*pg, 0).Remote(2);
  ASSERT_TRUE(in_any.ok() && in_zero.ok());
  ASSERT_EQ(*Get(in_any->Task(&Counter::Value).Remote(), absl::Seconds(20)), 1);
  ASSERT_EQ(*Get(in_zero->Task(&Counter::Value).Remote(), absl::Seconds(20)), 2);
  EXPECT_EQ(client_->GetActor(in_zero->id().Hex())->node_id(), Nodes(*pg)[0]);
  // Bundle 0 has 2 CPUs: one taken, one left; a third actor of 2 CPUs waits.
  auto waiting = Actor<Counter>().SetResource("CPU", 2).SetPlacementGroup(*pg, 0).Remote(3);
  ASSERT_TRUE(waiting.ok());
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_EQ(client_->GetActor(waiting->id().Hex())->state(), rpc::ACTOR_PENDING);
  EXPECT_NE(client_->GetActor(waiting->id().Hex())->pending_reason().find("placement group"),
            std::string::npos);

  ASSERT_TRUE(RemovePlacementGroup(*pg).ok());
  for (const auto* a : {&*in_any, &*in_zero, &*waiting}) {
    ASSERT_TRUE(testing::WaitFor(
        [&] { return client_->GetActor(a->id().Hex())->state() == rpc::ACTOR_DEAD; },
        absl::Seconds(10)));
    EXPECT_NE(client_->GetActor(a->id().Hex())->death_cause().message().find("was removed"),
              std::string::npos);
  }
  for (const char* id : {"node-a", "node-b"}) {
    EXPECT_TRUE(testing::WaitFor([&] { return AvailableCpu(id) == 2; }, absl::Seconds(10))) << id;
    EXPECT_TRUE(
        testing::WaitFor([&] { return NodeStats(id).bundles_size() == 0; }, absl::Seconds(10)))
        << id;
  }
  EXPECT_EQ(*pg->State(), PlacementGroupState::kRemoved);
}

// Creating with a wait answers once the group is placed, in the same call; a group that
// cannot be placed yet comes back PENDING, with its reason, when the wait runs out.
TEST_F(PlacementTest, CreatingWithAWaitAnswersOnceTheGroupIsPlaced) {
  AddNode("node-a", 2);
  rpc::PlacementGroupInfo spec;
  spec.set_strategy("PACK");
  (*spec.add_bundles()->mutable_resources()->mutable_amounts())["CPU"] = 2;
  auto first = client_->CreatePlacementGroup(spec, absl::Seconds(10));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->state(), rpc::PG_CREATED);
  EXPECT_EQ(first->bundles(0).node_id(), "node-a");

  absl::Time start = absl::Now();
  auto second = client_->CreatePlacementGroup(spec, absl::Milliseconds(300));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->state(), rpc::PG_PENDING);
  EXPECT_FALSE(second->pending_reason().empty());
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(300));
  ASSERT_TRUE(client_->RemovePlacementGroup(first->placement_group_id()).ok());
  auto ready = client_->WaitPlacementGroupReady(second->placement_group_id(), absl::Seconds(10));
  ASSERT_TRUE(ready.ok()) << ready.status();
  EXPECT_EQ(ready->state(), rpc::PG_CREATED);
}

// Concurrent groups make the GCS send each node several bundle operations in one call
// (prepares, commits and cancels of different groups, in order): afterwards each node's
// ledger holds exactly the bundles of the groups still created, all committed.
TEST_F(PlacementTest, ABurstOfGroupsLeavesEachNodesLedgerAsTheGcsSeesIt) {
  AddNode("node-a", 8);
  AddNode("node-b", 8);
  constexpr int kClients = 6, kRounds = 15;
  std::atomic<int> failures{0};
  std::vector<std::string> kept(kClients);
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      auto client = *gcs::GcsClient::Connect({gcs_->address(), gcs_->token()});
      rpc::PlacementGroupInfo spec;
      spec.set_strategy("SPREAD");
      for (int b = 0; b < 2; ++b) {
        (*spec.add_bundles()->mutable_resources()->mutable_amounts())["CPU"] = 0.5;
      }
      for (int r = 0; r < kRounds; ++r) {
        auto pg = client->CreatePlacementGroup(spec);
        if (!pg.ok()) {
          ++failures;
          continue;
        }
        auto ready = client->WaitPlacementGroupReady(pg->placement_group_id(), absl::Seconds(10));
        if (!ready.ok() || ready->state() != rpc::PG_CREATED) ++failures;
        if (r == kRounds - 1) {
          kept[c] = pg->placement_group_id();  // the last one stays
        } else if (!client->RemovePlacementGroup(pg->placement_group_id()).ok()) {
          ++failures;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  std::set<std::pair<std::string, int>> expected;
  for (const auto& id : kept) {
    auto pg = client_->GetPlacementGroup(id);
    ASSERT_TRUE(pg.ok());
    ASSERT_EQ(pg->state(), rpc::PG_CREATED);
    for (int i = 0; i < pg->bundles_size(); ++i) expected.emplace(id, i);
  }
  auto ledgers = [&] {
    std::set<std::pair<std::string, int>> held;
    for (const char* node : {"node-a", "node-b"}) {
      rpc::GetNodeStatsReply stats = NodeStats(node);
      for (const auto& b : stats.bundles()) held.emplace(b.placement_group_id(), b.bundle_index());
    }
    return held;
  };
  // Cancels of removed groups are sent after their removal is answered: wait for them.
  EXPECT_TRUE(testing::WaitFor([&] { return ledgers() == expected; }, absl::Seconds(10)));
  for (const char* node : {"node-a", "node-b"}) {
    EXPECT_EQ(NodeStats(node).bundles_size(), kClients) << node;
    EXPECT_TRUE(testing::WaitFor([&] { return AvailableCpu(node) == 8 - kClients * 0.5; },
                                 absl::Seconds(10)))
        << node;
  }
}

// A GCS that dies in the middle of a reservation round leaves a bundle held on a node that no
// group owns there. The node reports what it holds when it registers with the restarted GCS,
// which cancels what it does not place there and keeps the rest.
TEST_F(PlacementTest, ABundleThatACrashLeftHeldIsCancelledWhenItsNodeRegistersAgain) {
  AddNode("node-a", 2);
  AddNode("node-b", 2);
  auto pg = CreatePlacementGroup(Cpus(2, 1), PlacementStrategy::kStrictSpread);
  ASSERT_TRUE(pg.ok() && pg->Wait(absl::Seconds(10)).ok());
  // What the GCS's RESERVE of a round cut short leaves on node-a: a bundle of a group it never
  // recorded there.
  std::string address = Address("node-a");
  ASSERT_FALSE(address.empty());
  auto stub = rpc::NodeManagerService::NewStub(rpc::MakeChannel(address));
  grpc::ClientContext ctx;
  rpc::PrepareContext(&ctx, gcs_->token(), absl::Seconds(5));
  rpc::UpdateBundlesRequest request;
  rpc::BundleOp* op = request.add_ops();
  op->set_kind(rpc::BundleOp::RESERVE);
  op->mutable_bundle()->set_placement_group_id("left-by-a-crash");
  (*op->mutable_bundle()->mutable_resources()->mutable_amounts())["CPU"] = 1;
  rpc::UpdateBundlesReply reply;
  ASSERT_TRUE(stub->UpdateBundles(&ctx, request, &reply).ok());
  ASSERT_EQ(reply.results(0).code(), 0) << reply.results(0).message();
  ASSERT_EQ(NodeStats("node-a").bundles_size(), 2);
  EXPECT_EQ(rpc::FromProto(NodeStats("node-a").available()).Get("CPU"), 0);

  gcs_->Kill9();
  gcs_->Restart();
  // node-a registers with the new GCS, which cancels the bundle it does not place there.
  auto held = [&](const std::string& node) {
    std::set<std::string> out;
    rpc::GetNodeStatsReply stats = NodeStats(node);
    for (const auto& b : stats.bundles()) {
      out.insert(absl::StrCat(b.placement_group_id(), "/", b.bundle_index()));
    }
    return out;
  };
  std::vector<std::string> homes = Nodes(*pg);
  int on_a = static_cast<int>(std::find(homes.begin(), homes.end(), "node-a") - homes.begin());
  std::set<std::string> expected_a = {absl::StrCat(pg->id().Hex(), "/", on_a)};
  EXPECT_TRUE(testing::WaitFor([&] { return held("node-a") == expected_a; }, absl::Seconds(10)))
      << absl::StrJoin(held("node-a"), ", ");
  EXPECT_EQ(rpc::FromProto(NodeStats("node-a").available()).Get("CPU"), 1);
  // The group the GCS recorded keeps its bundles, on both nodes.
  EXPECT_EQ(Info(*pg).state(), rpc::PG_CREATED);
  EXPECT_EQ(held("node-b").size(), 1u);
  EXPECT_EQ(Nodes(*pg), homes);
}

// A node's available resources are not stored (they are derived): a restarted GCS computes
// them from the groups and actors it loads, before any node is heard from again, and again
// when each node registers anew with all its resources free.
TEST_F(PlacementTest, TheGcsKnowsWhatIsFreeOnEachNodeAfterARestart) {
  AddNode("node-a", 2);
  AddNode("node-b", 2);
  auto pg = CreatePlacementGroup(Cpus(2, 1), PlacementStrategy::kStrictSpread);
  ASSERT_TRUE(pg.ok() && pg->Wait(absl::Seconds(10)).ok());
  auto counter = Actor<Counter>().SetResource("CPU", 0.5).Remote(0);
  ASSERT_TRUE(counter.ok());
  ASSERT_TRUE(Get(counter->Task(&Counter::Value).Remote(), absl::Seconds(30)).ok());
  std::string actor_node = client_->GetActor(counter->id().Hex())->node_id();
  std::map<std::string, double> expected = {{"node-a", 1}, {"node-b", 1}};
  expected[actor_node] -= 0.5;
  auto as_expected = [&] {
    return AvailableCpu("node-a") == expected["node-a"] &&
           AvailableCpu("node-b") == expected["node-b"];
  };
  ASSERT_TRUE(testing::WaitFor(as_expected, absl::Seconds(10)));

  // The nodes stopped, so that what the new GCS says comes from what it loaded alone (they
  // have its restart grace, 10 s, to heartbeat again).
  auto resume = [&] {
    for (auto& [id, node] : nodes_) ::kill(node.pid(), SIGCONT);
  };
  absl::Cleanup resumed = resume;  // also when an assertion below ends the test
  for (auto& [id, node] : nodes_) ASSERT_EQ(::kill(node.pid(), SIGSTOP), 0);
  gcs_->Kill9();
  gcs_->Restart();
  double a = AvailableCpu("node-a"), b = AvailableCpu("node-b");
  resume();
  EXPECT_EQ(a, expected["node-a"]);
  EXPECT_EQ(b, expected["node-b"]);
  // Each node heartbeats, hears of the new incarnation and registers again at once.
  auto heard_from_both = [&] {
    auto nodes = client_->GetAllNodes();
    if (!nodes.ok()) return false;
    int heard = 0;
    for (const auto& n : *nodes) heard += n.heartbeat_age_ms() >= 0;
    return heard == 2;
  };
  ASSERT_TRUE(testing::WaitFor(heard_from_both, absl::Seconds(15)));
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_EQ(AvailableCpu("node-a"), expected["node-a"]);
  EXPECT_EQ(AvailableCpu("node-b"), expected["node-b"]);
}

// A node that reaches a reservation after the GCS gave up on its call refuses it rather than
// hold it: the GCS cancels what it gave up on, in a later call that the node may apply first.
TEST_F(PlacementTest, AReservationReachedAfterTheGcsGaveUpIsRefused) {
  AddNode("node-a", 2);
  AddNode("node-b", 2, /*reserve_delay_ms=*/11000);  // past the GCS's 10 s per call
  auto pg = CreatePlacementGroup(Cpus(2, 1), PlacementStrategy::kStrictSpread);
  ASSERT_TRUE(pg.ok()) << pg.status();
  absl::Time asked = absl::Now();
  ASSERT_TRUE(testing::WaitFor(
      [&] { return Info(*pg).pending_reason().find("rolled back") != std::string::npos; },
      absl::Seconds(15)));
  EXPECT_NE(Info(*pg).state(), rpc::PG_CREATED);
  // node-b reaches the first reservation 11 s after it was asked, and refuses it; the next
  // round's is still waiting meanwhile.
  absl::SleepFor(asked + absl::Milliseconds(11500) - absl::Now());
  EXPECT_EQ(NodeStats("node-b").bundles_size(), 0);
  // node-a's part of the round in flight goes back when that round ends (node-b refuses it,
  // or the GCS gives up on it after 10 s).
  ASSERT_TRUE(client_->RemovePlacementGroup(pg->id().Hex()).ok());
  ASSERT_TRUE(
      testing::WaitFor([&] { return NodeStats("node-a").bundles_size() == 0; }, absl::Seconds(15)));
}

TEST_F(PlacementTest, ReleasingABundleKillsItsActorsAndGivesItsResourcesBackForGood) {
  AddNode("node-a", 2);
  AddNode("node-b", 2);
  auto pg = CreatePlacementGroup(Cpus(2, 2), PlacementStrategy::kStrictSpread);
  ASSERT_TRUE(pg->Wait(absl::Seconds(10)).ok());
  std::string released_node = Nodes(*pg)[1];
  auto in_zero = Actor<Counter>().SetResource("CPU", 1).SetPlacementGroup(*pg, 0).Remote(1);
  auto in_one = Actor<Counter>().SetResource("CPU", 1).SetPlacementGroup(*pg, 1).Remote(2);
  ASSERT_TRUE(in_zero.ok() && in_one.ok());
  ASSERT_EQ(*Get(in_one->Task(&Counter::Value).Remote(), absl::Seconds(20)), 2);
  // Nothing outside the group fits while both nodes are reserved.
  auto outside = Actor<Counter>().SetResource("CPU", 2).Remote(3);
  ASSERT_TRUE(outside.ok());
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_EQ(client_->GetActor(outside->id().Hex())->state(), rpc::ACTOR_PENDING);

  ASSERT_TRUE(ReleaseBundle(*pg, 1).ok());
  ASSERT_TRUE(testing::WaitFor(
      [&] { return client_->GetActor(in_one->id().Hex())->state() == rpc::ACTOR_DEAD; },
      absl::Seconds(10)));
  EXPECT_NE(client_->GetActor(in_one->id().Hex())->death_cause().message().find("bundle 1"),
            std::string::npos);
  // Its CPUs go to the actor that waited; bundle 0 and its actor stay.
  ASSERT_EQ(*Get(outside->Task(&Counter::Value).Remote(), absl::Seconds(20)), 3);
  EXPECT_EQ(client_->GetActor(outside->id().Hex())->node_id(), released_node);
  EXPECT_EQ(*Get(in_zero->Task(&Counter::Value).Remote(), absl::Seconds(20)), 1);
  rpc::PlacementGroupInfo info = Info(*pg);
  EXPECT_EQ(info.state(), rpc::PG_CREATED);
  EXPECT_TRUE(info.bundles(1).released());
  EXPECT_TRUE(info.bundles(1).node_id().empty());
  EXPECT_TRUE(testing::WaitFor([&] { return NodeStats(released_node).bundles_size() == 0; },
                               absl::Seconds(10)));
  EXPECT_TRUE(ReleaseBundle(*pg, 1).ok()) << "releasing twice is a no-op";

  // A released bundle takes no new actor, and says why.
  auto refused = Actor<Counter>().SetResource("CPU", 1).SetPlacementGroup(*pg, 1).Remote(4);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("was released"), std::string::npos) << refused.status();
  auto out_of_range = ReleaseBundle(*pg, 2);
  EXPECT_EQ(out_of_range.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(out_of_range.message().find("0..1"), std::string::npos) << out_of_range;

  // The bundle's node dying does not bring it back (nothing lives there for the group).
  nodes_.erase(released_node);
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        auto nodes = client_->GetAllNodes();
        return nodes.ok() && std::any_of(nodes->begin(), nodes->end(), [&](const auto& n) {
                 return n.node_id() == released_node && n.state() == rpc::NODE_DEAD;
               });
      },
      absl::Seconds(15)));
  EXPECT_EQ(Info(*pg).state(), rpc::PG_CREATED);
  EXPECT_TRUE(Info(*pg).bundles(1).released());
}

TEST_F(PlacementTest, BadInputGetsClearErrors) {
  AddNode("node-a", 2);
  auto none = CreatePlacementGroup({}, PlacementStrategy::kPack);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no bundles"), std::string::npos) << none.status();
  auto empty = CreatePlacementGroup({{{"CPU", 1}}, {}}, PlacementStrategy::kPack);
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("bundle 1 is empty"), std::string::npos);
  auto zero = CreatePlacementGroup({{{"CPU", 0}}}, PlacementStrategy::kPack);
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("'CPU' has amount 0; amounts must be > 0"),
            std::string::npos)
      << zero.status();
  auto negative = CreatePlacementGroup({{{"CPU", -2}}}, PlacementStrategy::kPack);
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find("amount -2"), std::string::npos);
  auto strategy = ParsePlacementStrategy("SCATTER");
  ASSERT_FALSE(strategy.ok());
  EXPECT_NE(strategy.status().message().find("placement strategy 'SCATTER' is unknown; use PACK, "
                                             "SPREAD, STRICT_PACK or STRICT_SPREAD"),
            std::string::npos)
      << strategy.status();
  auto too_big = CreatePlacementGroup(Cpus(1, 8), PlacementStrategy::kPack);
  ASSERT_FALSE(too_big.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(too_big.status()));
  EXPECT_NE(too_big.status().message().find("bigger than every node"), std::string::npos);
  auto strict_pack = CreatePlacementGroup(Cpus(3, 1), PlacementStrategy::kStrictPack);
  ASSERT_FALSE(strict_pack.ok());
  EXPECT_NE(strict_pack.status().message().find("STRICT_PACK needs one node with {CPU: 3}"),
            std::string::npos)
      << strict_pack.status();

  auto pg = CreatePlacementGroup(Cpus(2, 0.5), PlacementStrategy::kPack);
  ASSERT_TRUE(pg->Wait(absl::Seconds(10)).ok());
  auto out_of_range = Actor<Counter>().SetPlacementGroup(*pg, 2).Remote(0);
  ASSERT_FALSE(out_of_range.ok());
  EXPECT_NE(out_of_range.status().message().find("bundle index 2 is out of range"),
            std::string::npos)
      << out_of_range.status();
  auto too_much = Actor<Counter>().SetResource("CPU", 1).SetPlacementGroup(*pg).Remote(0);
  ASSERT_FALSE(too_much.ok());
  EXPECT_NE(too_much.status().message().find("more than any bundle"), std::string::npos)
      << too_much.status();
  auto unknown =
      Actor<Counter>().SetPlacementGroup(PlacementGroup(PlacementGroupId("nope"))).Remote(0);
  ASSERT_FALSE(unknown.ok());
  EXPECT_TRUE(absl::IsNotFound(unknown.status())) << unknown.status();
}

}  // namespace
}  // namespace phalanx
