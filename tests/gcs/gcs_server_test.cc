// The GCS as a real process over a real Redis: auth, pub/sub, restarts, dead nodes.
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <atomic>

#include "absl/synchronization/mutex.h"
#include "client/gcs_client.h"
#include "gcs/node_client_pool.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"

namespace phalanx::gcs {
namespace {

using testing::GcsProcess;
using testing::RedisServer;
using testing::WaitFor;

std::unique_ptr<GcsClient> Connect(const GcsProcess& gcs) {
  auto client = GcsClient::Connect({gcs.address(), gcs.token()});
  EXPECT_TRUE(client.ok()) << client.status();
  return std::move(*client);
}

std::optional<rpc::NodeInfo> FindNode(GcsClient& client, const std::string& id) {
  auto nodes = client.GetAllNodes();
  if (!nodes.ok()) return std::nullopt;
  for (const auto& n : *nodes) {
    if (n.node_id() == id) return n;
  }
  return std::nullopt;
}

// Collects what a subscription delivers.
struct Collector {
  absl::Mutex mu;
  std::vector<rpc::PubMessage> messages;
  void Add(const rpc::PubMessage& m) {
    absl::MutexLock lock(&mu);
    messages.push_back(m);
  }
  std::vector<rpc::PubMessage> Get() {
    absl::MutexLock lock(&mu);
    return messages;
  }
  bool HasKv(const std::string& key) {
    absl::MutexLock lock(&mu);
    for (const auto& m : messages) {
      if (m.has_kv() && m.kv().key() == key) return true;
    }
    return false;
  }
};

TEST(GcsServer, CallsWithoutTheRightTokenAreRejected) {
  RedisServer redis("pw");
  GcsProcess gcs(redis);
  auto wrong = GcsClient::Connect({gcs.address(), "not-the-token"});
  ASSERT_FALSE(wrong.ok());
  EXPECT_TRUE(absl::IsUnauthenticated(wrong.status())) << wrong.status();
  EXPECT_NE(wrong.status().message().find("wrong cluster token"), std::string::npos);
  auto none = GcsClient::Connect({gcs.address(), ""});
  ASSERT_FALSE(none.ok());
  EXPECT_TRUE(absl::IsUnauthenticated(none.status())) << none.status();
  EXPECT_NE(none.status().message().find("missing cluster token"), std::string::npos);
  auto dead = GcsClient::Connect({"127.0.0.1:1", gcs.token()}, absl::Milliseconds(500));
  ASSERT_FALSE(dead.ok());
  EXPECT_NE(dead.status().message().find("cannot reach the GCS at 127.0.0.1:1"), std::string::npos)
      << dead.status();
}

TEST(GcsServer, SubscribersSeeChangesInOrder) {
  RedisServer redis;
  GcsProcess gcs(redis);
  auto client = Connect(gcs);
  Collector got;
  auto sub = client->Subscribe({rpc::KV}, [&](const rpc::PubMessage& m) { got.Add(m); });
  // The initial (empty) snapshot marks the subscription as live.
  ASSERT_TRUE(WaitFor([&] { return !got.Get().empty(); }, absl::Seconds(5)));
  for (int i = 0; i < 300; ++i) {
    ASSERT_TRUE(client->KvPut("ns", absl::StrCat("k", i), "v").ok());
  }
  ASSERT_TRUE(WaitFor([&] { return got.HasKv("k299"); }, absl::Seconds(10)));
  std::vector<rpc::PubMessage> messages = got.Get();
  ASSERT_EQ(messages.size(), 301u);
  for (int i = 0; i < 300; ++i) {
    EXPECT_EQ(messages[i + 1].kv().key(), absl::StrCat("k", i));
    EXPECT_EQ(messages[i + 1].seq(), messages[1].seq() + i);
  }
}

TEST(GcsServer, KillNineAndRestartKeepsEveryTableAndLiveNodes) {
  RedisServer redis("pw");
  GcsProcess gcs(redis, {/*node_timeout_ms=*/1000, /*restart_grace_ms=*/5000});
  auto node = testing::StartNode(gcs, "node-a");
  auto client = Connect(gcs);
  ASSERT_TRUE(client->KvPut("ns", "key", "value").ok());
  rpc::ActorInfo actor;
  actor.set_actor_id("actor-1");
  actor.set_name("trainer");
  actor.set_state(rpc::ACTOR_DEAD);  // a record only: the actor manager leaves it alone
  actor.mutable_death_cause()->set_kind(rpc::DeathCause::EXITED);
  actor.mutable_death_cause()->set_exit_code(7);
  ASSERT_TRUE(client->UpdateActor(actor).ok());
  rpc::JobInfo job;
  job.set_job_id("job-1");
  job.set_state(rpc::JOB_RUNNING);
  ASSERT_TRUE(client->UpdateJob(job).ok());
  rpc::PlacementGroupInfo pg;
  pg.set_strategy("PACK");
  (*pg.add_bundles()->mutable_resources()->mutable_amounts())["CPU"] = 1;
  auto created = client->CreatePlacementGroup(pg);
  ASSERT_TRUE(created.ok()) << created.status();
  ASSERT_EQ(
      client->WaitPlacementGroupReady(created->placement_group_id(), absl::Seconds(10))->state(),
      rpc::PG_CREATED);
  std::string incarnation = client->GetClusterInfo()->incarnation();

  Collector got;
  auto sub = client->Subscribe({rpc::KV, rpc::NODE}, [&](const rpc::PubMessage& m) { got.Add(m); });
  ASSERT_TRUE(WaitFor([&] { return got.HasKv("key"); }, absl::Seconds(5)));

  gcs.Kill9();
  absl::SleepFor(absl::Milliseconds(500));  // the node heartbeats into the void meanwhile
  gcs.Restart();

  auto info = client->GetClusterInfo();  // the old client reconnects by itself
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_NE(info->incarnation(), incarnation);
  EXPECT_EQ(*client->KvGet("ns", "key").value(), "value");
  EXPECT_EQ(client->GetActor("actor-1")->name(), "trainer");
  EXPECT_EQ(client->GetActor("actor-1")->death_cause().exit_code(), 7);
  EXPECT_EQ(client->GetJob("job-1")->state(), rpc::JOB_RUNNING);
  ASSERT_EQ(client->ListPlacementGroups()->size(), 1u);
  EXPECT_EQ(client->ListPlacementGroups()->at(0).state(), rpc::PG_CREATED);
  EXPECT_EQ(client->ListPlacementGroups()->at(0).bundles(0).node_id(), "node-a");

  // Past node_timeout and past the grace period the node is still alive: it heartbeated.
  absl::SleepFor(absl::Milliseconds(5500));
  auto n = FindNode(*client, "node-a");
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(n->state(), rpc::NODE_ALIVE) << n->death_reason();

  // The subscription came back on its own and sees new changes.
  ASSERT_TRUE(client->KvPut("ns", "after-restart", "1").ok());
  ASSERT_TRUE(WaitFor([&] { return got.HasKv("after-restart"); }, absl::Seconds(10)));
  EXPECT_GE(sub->reconnects(), 1);
  bool saw_snapshot = false;
  for (const auto& m : got.Get()) {
    saw_snapshot |= m.snapshot_done() && m.incarnation() == info->incarnation();
  }
  EXPECT_TRUE(saw_snapshot);
}

TEST(GcsServer, AKilledNodeManagerIsDeclaredDeadWhenItsPortIsRefusedNotAtTheTimeout) {
  RedisServer redis;
  // A timeout longer than the wait below: only the knock can find it in time.
  GcsProcess gcs(redis, {/*node_timeout_ms=*/20000, /*restart_grace_ms=*/20000});
  auto node = testing::StartNode(gcs, "node-killed");
  auto client = Connect(gcs);
  ASSERT_TRUE(
      WaitFor([&] { return FindNode(*client, "node-killed").has_value(); }, absl::Seconds(10)));
  node.Kill(SIGKILL);
  ASSERT_TRUE(WaitFor(
      [&] {
        auto n = FindNode(*client, "node-killed");
        return n && n->state() == rpc::NODE_DEAD;
      },
      absl::Seconds(15)))
      << "a killed node manager was not found before the node timeout";
  EXPECT_NE(FindNode(*client, "node-killed")->death_reason().find("refuses connections"),
            std::string::npos)
      << FindNode(*client, "node-killed")->death_reason();
}

TEST(GcsServer, AStoppedNodeIsDeclaredDeadWithinTheTimeoutAndComesBackAsANewNode) {
  RedisServer redis;
  GcsProcess gcs(redis, {/*node_timeout_ms=*/1000, /*restart_grace_ms=*/10000});
  auto node = testing::StartNode(gcs, "node-stopped");
  auto client = Connect(gcs);
  Collector got;
  auto sub = client->Subscribe({rpc::RESOURCES}, [&](const rpc::PubMessage& m) { got.Add(m); });

  node.Kill(SIGSTOP);
  absl::Time stopped = absl::Now();
  ASSERT_TRUE(WaitFor(
      [&] {
        auto n = FindNode(*client, "node-stopped");
        return n && n->state() == rpc::NODE_DEAD;
      },
      absl::Seconds(5)));
  absl::Duration took = absl::Now() - stopped;
  EXPECT_GE(took, absl::Milliseconds(900));
  EXPECT_LE(took, absl::Milliseconds(2500));
  EXPECT_NE(FindNode(*client, "node-stopped")->death_reason().find("missed heartbeats"),
            std::string::npos);
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const auto& m : got.Get()) {
          if (m.resource().kind() == rpc::ResourceEvent::NODE_REMOVED) return true;
        }
        return false;
      },
      absl::Seconds(5)));

  // Woken up, the node learns it was declared dead (its workers are fenced) and its daemon
  // registers again as a new node; the old id stays dead.
  node.Kill(SIGCONT);
  EXPECT_TRUE(WaitFor(
      [&] {
        auto nodes = client->GetAllNodes(true);
        return nodes.ok() && nodes->size() == 1 && nodes->at(0).node_id() != "node-stopped" &&
               nodes->at(0).pid() == node.pid();
      },
      absl::Seconds(10)))
      << "the node manager did not register again as a new node";
  EXPECT_EQ(FindNode(*client, "node-stopped")->state(), rpc::NODE_DEAD);
}

}  // namespace
}  // namespace phalanx::gcs

namespace phalanx::gcs {
namespace {

// A node manager that takes calls and never answers them (as one that hangs would): a gRPC
// server whose generic service requests no call, so every call stays in flight until its
// 10 s deadline. Shutdown cancels the calls and returns once their callbacks ran; a call made
// afterwards fails at once, on the caller's thread.
TEST(NodeClientPool, ShutdownCancelsTheCallsInFlightAndWaitsForTheirCallbacks) {
  grpc::AsyncGenericService never_answers;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterAsyncGenericService(&never_answers);
  std::unique_ptr<grpc::ServerCompletionQueue> queue = builder.AddCompletionQueue();
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  std::string address = absl::StrCat("127.0.0.1:", port);

  NodeClientPool pool("token");
  absl::Mutex mu;
  std::vector<absl::Status> results;
  for (int i = 0; i < 3; ++i) {
    pool.ReserveBundle(address, rpc::BundleRequest(), [&](absl::Status s) {
      absl::MutexLock lock(&mu);
      results.push_back(s);
    });
  }
  absl::SleepFor(absl::Milliseconds(200));  // the calls are on the wire
  {
    absl::MutexLock lock(&mu);
    EXPECT_TRUE(results.empty());
  }
  absl::Time t0 = absl::Now();
  pool.Shutdown();
  absl::Duration took = absl::Now() - t0;
  {
    absl::MutexLock lock(&mu);
    ASSERT_EQ(results.size(), 3u);
    for (const auto& s : results) EXPECT_TRUE(absl::IsCancelled(s)) << s;
  }
  std::printf("3 calls in flight cancelled, callbacks done, in %s\n",
              absl::FormatDuration(took).c_str());
  EXPECT_LT(took, NodeClientPool::kShutdownTimeout);

  absl::Status after;
  pool.ReserveBundle(address, rpc::BundleRequest(), [&](absl::Status s) { after = s; });
  EXPECT_TRUE(absl::IsCancelled(after)) << after;
  server->Shutdown(std::chrono::system_clock::now());
  queue->Shutdown();
  void* tag;
  bool ok;
  while (queue->Next(&tag, &ok)) {
  }
}

}  // namespace
}  // namespace phalanx::gcs
