// The table managers over the in-memory store (the Redis store has its own test).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <map>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/system.h"
#include "gcs/actor_manager.h"
#include "gcs/driver_leases.h"
#include "gcs/kv_manager.h"
#include "gcs/node_client_pool.h"
#include "gcs/node_manager.h"
#include "gcs/record_table.h"
#include "gtest/gtest.h"
#include "placement/resource_scheduler.h"
#include "tests/testing/test_util.h"

namespace phalanx::gcs {
namespace {

rpc::NodeInfo Node(const std::string& id) {
  rpc::NodeInfo n;
  n.set_node_id(id);
  n.set_address("127.0.0.1:1");
  (*n.mutable_total()->mutable_amounts())["CPU"] = 4;
  return n;
}

class NodeManagerTest : public ::testing::Test {
 protected:
  std::unique_ptr<Store> store_ = NewInMemoryStore();
  GcsPublisher publisher_{"inc"};
  GcsNodeManager::Options options_{absl::Milliseconds(200), absl::Milliseconds(500)};

  // Heartbeats node `id` every 20 ms for `how_long`, each beat taken as from a live node, and
  // calls `check` (the health checker's part) after each.
  static void HeartbeatFor(GcsNodeManager& nodes, const std::string& id, absl::Duration how_long,
                           const std::function<void()>& check) {
    absl::Time until = absl::Now() + how_long;
    while (absl::Now() < until) {
      bool unknown, declared_dead;
      rpc::HeartbeatRequest hb;
      hb.set_node_id(id);
      ASSERT_TRUE(nodes.Heartbeat(hb, &unknown, &declared_dead).ok());
      EXPECT_FALSE(unknown || declared_dead);
      check();
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
};

TEST_F(NodeManagerTest, RegisterHeartbeatAndDieOfSilence) {
  GcsNodeManager nodes(store_.get(), &publisher_, options_);
  std::vector<std::string> dead;
  nodes.AddDeadListener([&](const std::vector<rpc::NodeInfo>& batch) {
    for (const auto& n : batch) dead.push_back(n.node_id());
  });
  ASSERT_TRUE(nodes.Register(Node("a")).ok());
  ASSERT_TRUE(nodes.Register(Node("b")).ok());
  EXPECT_EQ(nodes.GetAll(true).size(), 2u);
  EXPECT_EQ(nodes.Get("a")->available().amounts().at("CPU"), 4);

  ASSERT_NO_FATAL_FAILURE(
      HeartbeatFor(nodes, "a", absl::Milliseconds(500), [&] { nodes.CheckHeartbeats(); }));
  EXPECT_EQ(dead, std::vector<std::string>{"b"});
  EXPECT_EQ(nodes.Get("b")->state(), rpc::NODE_DEAD);
  EXPECT_NE(nodes.Get("b")->death_reason().find("missed heartbeats"), std::string::npos);
  EXPECT_EQ(nodes.Get("a")->state(), rpc::NODE_ALIVE);

  // A dead node is told so, and cannot come back under the same id.
  bool unknown, declared_dead;
  rpc::HeartbeatRequest hb;
  hb.set_node_id("b");
  ASSERT_TRUE(nodes.Heartbeat(hb, &unknown, &declared_dead).ok());
  EXPECT_TRUE(declared_dead);
  EXPECT_TRUE(absl::IsFailedPrecondition(nodes.Register(Node("b"))));
  hb.set_node_id("never-registered");
  ASSERT_TRUE(nodes.Heartbeat(hb, &unknown, &declared_dead).ok());
  EXPECT_TRUE(unknown);
}

// A TCP port on 127.0.0.1 that accepts connections (in its kernel) while it lives.
class Listener {
 public:
  explicit Listener(int backlog = 16) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), len), 0);
    EXPECT_EQ(::listen(fd_, backlog), 0);
    EXPECT_EQ(::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len), 0);
    port_ = ntohs(a.sin_port);
  }
  ~Listener() { ::close(fd_); }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }

 private:
  int fd_ = -1;
  int port_ = 0;
};

TEST_F(NodeManagerTest, ASilentNodeWhosePortIsRefusedIsDeadAtOnceAndOneThatAcceptsWaits) {
  GcsNodeManager::Options o;
  o.node_timeout = absl::Seconds(60);
  o.knock_after = absl::Milliseconds(100);
  GcsNodeManager nodes(store_.get(), &publisher_, o);
  std::vector<std::string> dead;
  nodes.AddDeadListener([&](const std::vector<rpc::NodeInfo>& batch) {
    for (const auto& n : batch) dead.push_back(n.node_id());
  });
  Listener stopped;  // a stopped node manager: its kernel still completes handshakes
  rpc::NodeInfo accepts = Node("accepts");
  accepts.set_address(stopped.address());
  ASSERT_TRUE(nodes.Register(accepts).ok());
  ASSERT_TRUE(nodes.Register(Node("gone")).ok());        // 127.0.0.1:1: nothing listens
  ASSERT_TRUE(nodes.Register(Node("heartbeats")).ok());  // the same address, but it talks
  rpc::NodeInfo bad = Node("bad-address");
  bad.set_address("no-port-here");
  ASSERT_TRUE(nodes.Register(bad).ok());

  // Not silent long enough: nobody is knocked on yet.
  nodes.KnockOnSilentNodes();
  EXPECT_TRUE(dead.empty());

  ASSERT_NO_FATAL_FAILURE(HeartbeatFor(nodes, "heartbeats", absl::Milliseconds(400),
                                       [&] { nodes.KnockOnSilentNodes(); }));
  EXPECT_EQ(dead, std::vector<std::string>{"gone"});
  EXPECT_NE(nodes.Get("gone")->death_reason().find("refuses connections"), std::string::npos)
      << nodes.Get("gone")->death_reason();
  EXPECT_EQ(nodes.Get("accepts")->state(), rpc::NODE_ALIVE);
  EXPECT_EQ(nodes.Get("heartbeats")->state(), rpc::NODE_ALIVE);
  EXPECT_EQ(nodes.Get("bad-address")->state(), rpc::NODE_ALIVE);

  // Off, nothing is knocked on.
  GcsNodeManager::Options off = o;
  off.knock_after = absl::ZeroDuration();
  GcsPublisher publisher2("inc2");
  std::unique_ptr<Store> store2 = NewInMemoryStore();
  GcsNodeManager quiet(store2.get(), &publisher2, off);
  ASSERT_TRUE(quiet.Register(Node("gone")).ok());
  absl::SleepFor(absl::Milliseconds(150));
  quiet.KnockOnSilentNodes();
  EXPECT_EQ(quiet.Get("gone")->state(), rpc::NODE_ALIVE);
}

TEST(KnockTcp, TellsAcceptedFromRefusedFromSilent) {
  Listener open;
  // A port whose queue of connections nobody accepted is full: the kernel drops new
  // handshakes, as a cut-off host's never answer.
  Listener full(/*backlog=*/0);
  int knocks = 0;
  while (KnockTcp({full.address()}, absl::Milliseconds(50)).front() == Knock::kAccepted) {
    ASSERT_LT(++knocks, 64) << "the kernel keeps accepting on a port with backlog 0";
  }
  auto answers = KnockTcp({open.address(), "127.0.0.1:1", full.address(), "nonsense"},
                          absl::Milliseconds(200));
  ASSERT_EQ(answers.size(), 4u);
  EXPECT_EQ(answers[0], Knock::kAccepted);
  EXPECT_EQ(answers[1], Knock::kRefused);
  EXPECT_EQ(answers[2], Knock::kSilent);
  EXPECT_EQ(answers[3], Knock::kSilent);
}

// These two are timed against the node timeout (200 ms) and the restart grace (500 ms). An
// attempt that this process's own stalls (a loaded machine) pushed past the bound before the
// check that must find the node alive proves nothing, and is made again.
constexpr int kTimedAttempts = 5;

TEST_F(NodeManagerTest, ReloadGivesLiveNodesAGracePeriod) {
  for (int attempt = 0; attempt < kTimedAttempts; ++attempt) {
    auto store = NewInMemoryStore();
    {
      GcsNodeManager nodes(store.get(), &publisher_, options_);
      ASSERT_TRUE(nodes.Register(Node("a")).ok());
    }
    GcsPublisher publisher2("inc2");
    GcsNodeManager reloaded(store.get(), &publisher2, options_);
    absl::Time loading = absl::Now();  // the grace runs from no earlier than this
    ASSERT_TRUE(reloaded.Load().ok());
    ASSERT_EQ(reloaded.GetAll(true).size(), 1u);
    absl::SleepFor(absl::Milliseconds(300));  // past node_timeout, inside restart_grace
    reloaded.CheckHeartbeats();
    if (absl::Now() - loading >= options_.restart_grace) continue;  // stalled past it
    EXPECT_EQ(reloaded.Get("a")->state(), rpc::NODE_ALIVE);
    absl::SleepFor(absl::Milliseconds(300));  // past the grace
    reloaded.CheckHeartbeats();
    EXPECT_EQ(reloaded.Get("a")->state(), rpc::NODE_DEAD);
    return;
  }
  FAIL() << "each of " << kTimedAttempts << " attempts stalled past the restart grace";
}

TEST_F(NodeManagerTest, AStalledGcsDoesNotBlameTheNodes) {
  for (int attempt = 0; attempt < kTimedAttempts; ++attempt) {
    auto store = NewInMemoryStore();
    GcsNodeManager nodes(store.get(), &publisher_, options_);
    absl::Time registering = absl::Now();  // the node's deadline is no earlier than 200 ms on
    ASSERT_TRUE(nodes.Register(Node("a")).ok());
    absl::SleepFor(absl::Milliseconds(300));  // past node_timeout: no heartbeat was handled
    nodes.Stalled(absl::Milliseconds(300));   // because this process was not running
    nodes.CheckHeartbeats();
    // The deadline moved 300 ms on: a check more than 500 ms after the registration began
    // (a stall of this test's own) proves nothing.
    if (absl::Now() - registering >= absl::Milliseconds(500)) continue;
    EXPECT_EQ(nodes.Get("a")->state(), rpc::NODE_ALIVE);
    absl::SleepFor(absl::Milliseconds(250));  // a silence of its own: it is dead
    nodes.CheckHeartbeats();
    EXPECT_EQ(nodes.Get("a")->state(), rpc::NODE_DEAD);
    return;
  }
  FAIL() << "each of " << kTimedAttempts << " attempts stalled past the node's deadline";
}

// A head ("h") and two other nodes ("a", "b").
void RegisterHeadAB(GcsNodeManager& nodes) {
  rpc::NodeInfo head = Node("h");
  head.set_is_head(true);
  ASSERT_TRUE(nodes.Register(head).ok());
  ASSERT_TRUE(nodes.Register(Node("a")).ok());
  ASSERT_TRUE(nodes.Register(Node("b")).ok());
}

// Issue 49: the head's link cut for 30 s. The GCS then hears only the head, and the other
// nodes all fall silent together: this GCS is the side that is cut off. They are held (alive)
// for the partition timeout, not declared dead at the node timeout; past it, they are.
TEST_F(NodeManagerTest, ASilentMajorityIsHeldForThePartitionTimeout) {
  for (int attempt = 0; attempt < kTimedAttempts; ++attempt) {
    auto store = NewInMemoryStore();
    GcsNodeManager::Options o = options_;  // node timeout 200 ms
    o.partition_timeout = absl::Milliseconds(1500);
    GcsNodeManager nodes(store.get(), &publisher_, o);
    ASSERT_NO_FATAL_FAILURE(RegisterHeadAB(nodes));
    absl::Time silent_from = absl::Now();
    ASSERT_NO_FATAL_FAILURE(
        HeartbeatFor(nodes, "h", absl::Milliseconds(600), [&] { nodes.CheckHeartbeats(); }));
    // Inconclusive when this test stalled past the partition timeout.
    if (absl::Now() - silent_from >= o.node_timeout + o.partition_timeout) continue;
    EXPECT_EQ(nodes.Get("a")->state(), rpc::NODE_ALIVE);
    EXPECT_EQ(nodes.Get("b")->state(), rpc::NODE_ALIVE);
    ASSERT_NO_FATAL_FAILURE(
        HeartbeatFor(nodes, "h", absl::Milliseconds(1600), [&] { nodes.CheckHeartbeats(); }));
    EXPECT_EQ(nodes.Get("a")->state(), rpc::NODE_DEAD);
    EXPECT_EQ(nodes.Get("b")->state(), rpc::NODE_DEAD);
    EXPECT_NE(nodes.Get("a")->death_reason().find("while most nodes were silent"),
              std::string::npos)
        << nodes.Get("a")->death_reason();
    EXPECT_EQ(nodes.Get("h")->state(), rpc::NODE_ALIVE);
    return;
  }
  FAIL() << "each of " << kTimedAttempts << " attempts stalled past the partition timeout";
}

// When the cut heals, the nodes' heartbeats come back a moment apart: the first to arrive
// ends the hold, and those still silent get a node timeout of their own to heartbeat, not
// death at once. One that stays silent is then declared dead (a minority now).
TEST_F(NodeManagerTest, WhenTheMajorityIsHeardAgainTheRestGetANodeTimeout) {
  for (int attempt = 0; attempt < kTimedAttempts; ++attempt) {
    auto store = NewInMemoryStore();
    GcsNodeManager::Options o = options_;  // node timeout 200 ms
    o.partition_timeout = absl::Seconds(60);
    GcsNodeManager nodes(store.get(), &publisher_, o);
    ASSERT_NO_FATAL_FAILURE(RegisterHeadAB(nodes));
    ASSERT_NO_FATAL_FAILURE(
        HeartbeatFor(nodes, "h", absl::Milliseconds(500), [&] { nodes.CheckHeartbeats(); }));
    bool unknown, declared_dead;
    rpc::HeartbeatRequest hb;
    hb.set_node_id("a");
    ASSERT_TRUE(nodes.Heartbeat(hb, &unknown, &declared_dead).ok());
    EXPECT_FALSE(declared_dead);
    absl::Time healed = absl::Now();
    nodes.CheckHeartbeats();
    if (absl::Now() - healed >= o.node_timeout) continue;  // stalled: inconclusive
    EXPECT_EQ(nodes.Get("b")->state(), rpc::NODE_ALIVE) << nodes.Get("b")->death_reason();
    absl::Time until = absl::Now() + absl::Milliseconds(400);
    while (absl::Now() < until) {
      for (const char* id : {"h", "a"}) {
        hb.set_node_id(id);
        ASSERT_TRUE(nodes.Heartbeat(hb, &unknown, &declared_dead).ok());
      }
      nodes.CheckHeartbeats();
      absl::SleepFor(absl::Milliseconds(20));
    }
    EXPECT_EQ(nodes.Get("a")->state(), rpc::NODE_ALIVE);
    EXPECT_EQ(nodes.Get("b")->state(), rpc::NODE_DEAD);
    EXPECT_NE(nodes.Get("b")->death_reason().find("missed heartbeats for 200ms"), std::string::npos)
        << nodes.Get("b")->death_reason();
    return;
  }
  FAIL() << "each of " << kTimedAttempts << " attempts stalled past the node timeout";
}

TEST_F(NodeManagerTest, BadRegistrationsAreRefused) {
  GcsNodeManager nodes(store_.get(), &publisher_, options_);
  rpc::NodeInfo no_id = Node("");
  EXPECT_TRUE(absl::IsInvalidArgument(nodes.Register(no_id)));
  rpc::NodeInfo no_address = Node("x");
  no_address.clear_address();
  EXPECT_TRUE(absl::IsInvalidArgument(nodes.Register(no_address)));
}

// Holds every write until Release(): a Redis that has not answered yet. Writes then complete
// in the order issued, as the Redis store's do. Counts the writes per table.
class HeldStore : public ForwardingStore {
 public:
  HeldStore() : ForwardingStore(NewInMemoryStore()) {}
  void Put(const std::string& table, const std::string& key, std::string value,
           Done done) override {
    Issue(
        table, [=, this] { return inner()->PutSync(table, key, value); }, std::move(done));
  }
  void Delete(const std::string& table, const std::string& key, Done done) override {
    Issue(
        table, [=, this] { return inner()->DeleteSync(table, key); }, std::move(done));
  }
  void Hold(bool hold) {
    absl::MutexLock lock(&mu_);
    hold_ = hold;
  }
  // Completes the writes held so far, in order.
  void Release() {
    std::vector<std::pair<std::function<absl::Status()>, Done>> held;
    {
      absl::MutexLock lock(&mu_);
      held.swap(held_);
    }
    for (auto& [apply, done] : held) done(apply());
  }
  int Writes(const std::string& table) {
    absl::MutexLock lock(&mu_);
    return writes_[table];
  }

 private:
  void Issue(const std::string& table, std::function<absl::Status()> apply, Done done) {
    {
      absl::MutexLock lock(&mu_);
      ++writes_[table];
      if (hold_) {
        held_.emplace_back(std::move(apply), std::move(done));
        return;
      }
    }
    done(apply());
  }

  absl::Mutex mu_;
  bool hold_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::pair<std::function<absl::Status()>, Done>> held_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> writes_ ABSL_GUARDED_BY(mu_);
};

// The (CPU available, kind) of each RESOURCES event a subscriber has been sent so far.
std::vector<std::pair<double, rpc::ResourceEvent::Kind>> ResourceEvents(
    GcsPublisher::Subscriber& sub) {
  std::vector<std::pair<double, rpc::ResourceEvent::Kind>> out;
  while (auto m = sub.Next(absl::Milliseconds(50))) {
    if (!m->has_resource()) continue;
    out.emplace_back(m->resource().available().amounts().at("CPU"), m->resource().kind());
  }
  return out;
}

rpc::ResourceSet Cpus(double n) {
  rpc::ResourceSet r;
  (*r.mutable_amounts())["CPU"] = n;
  return r;
}

// A node's available resources are derived state (a restarted GCS computes them from the
// actor and placement-group tables): a change is published at once and kept in memory, not
// written. But never ahead of a write of the node still in flight: then the change goes out
// with a write of its own, published after it, in order.
TEST_F(NodeManagerTest, AvailabilityIsPublishedWithoutAWriteButNeverAheadOfOne) {
  HeldStore store;
  GcsNodeManager nodes(&store, &publisher_, options_);
  rpc::SubscribeRequest request;
  request.add_channels(rpc::RESOURCES);
  auto sub = publisher_.Subscribe(request);
  ASSERT_TRUE(nodes.Register(Node("a")).ok());
  EXPECT_EQ(store.Writes("nodes"), 1);
  using Kind = rpc::ResourceEvent;
  EXPECT_EQ(ResourceEvents(*sub),
            (std::vector<std::pair<double, Kind::Kind>>{{4, Kind::NODE_ADDED}}));

  ASSERT_TRUE(nodes.UpdateAvailable("a", Cpus(3)).ok());
  EXPECT_EQ(store.Writes("nodes"), 1) << "availability alone is not written";
  EXPECT_EQ(nodes.Get("a")->available().amounts().at("CPU"), 3);
  EXPECT_EQ(ResourceEvents(*sub),
            (std::vector<std::pair<double, Kind::Kind>>{{3, Kind::RESOURCES_CHANGED}}));
  ASSERT_TRUE(nodes.UpdateAvailable("a", Cpus(3)).ok());
  EXPECT_TRUE(ResourceEvents(*sub).empty()) << "no change, nothing published";

  // A write of the node's record (here a heartbeat that reports its resources) waits on the
  // store; a change of availability meanwhile is written after it, and published after it.
  store.Hold(true);
  std::thread heartbeat([&] {
    bool unknown, declared_dead;
    rpc::HeartbeatRequest hb;
    hb.set_node_id("a");
    *hb.mutable_available() = Cpus(2);
    EXPECT_TRUE(nodes.Heartbeat(hb, &unknown, &declared_dead).ok());
  });
  absl::Cleanup joined = [&] {  // also when an assertion below ends the test
    store.Release();
    heartbeat.join();
  };
  ASSERT_TRUE(testing::WaitFor([&] { return store.Writes("nodes") == 2; }, absl::Seconds(5)));
  ASSERT_TRUE(nodes.UpdateAvailable("a", Cpus(1)).ok());
  EXPECT_EQ(store.Writes("nodes"), 3);
  EXPECT_TRUE(ResourceEvents(*sub).empty()) << "published before the write ahead of it";
  std::move(joined).Invoke();
  EXPECT_EQ(ResourceEvents(*sub), (std::vector<std::pair<double, Kind::Kind>>{
                                      {2, Kind::RESOURCES_CHANGED}, {1, Kind::RESOURCES_CHANGED}}));
  // Once the writes are done, a change is published at once again.
  store.Hold(false);
  ASSERT_TRUE(nodes.UpdateAvailable("a", Cpus(4)).ok());
  EXPECT_EQ(store.Writes("nodes"), 3);
  EXPECT_EQ(ResourceEvents(*sub),
            (std::vector<std::pair<double, Kind::Kind>>{{4, Kind::RESOURCES_CHANGED}}));
  publisher_.Unsubscribe(sub);
}

TEST(KvManager, PutGetDeleteList) {
  auto store = NewInMemoryStore();
  GcsPublisher publisher("inc");
  GcsKvManager kv(store.get(), &publisher);
  EXPECT_TRUE(*kv.Put("ns", "a/1", "x", false));
  EXPECT_FALSE(*kv.Put("ns", "a/1", "y", false));  // kept
  EXPECT_EQ(*kv.Get("ns", "a/1"), "x");
  EXPECT_FALSE(*kv.Put("ns", "a/1", "y", true));  // overwritten
  EXPECT_EQ(*kv.Get("ns", "a/1"), "y");
  ASSERT_TRUE(kv.Put("ns", "a/2", "z", true).ok());
  ASSERT_TRUE(kv.Put("ns", "b/1", "w", true).ok());
  ASSERT_TRUE(kv.Put("other", "a/1", "o", true).ok());
  EXPECT_EQ(kv.List("ns", "a/").size(), 2u);
  EXPECT_EQ(*kv.Delete("ns", "a/", true), 2);
  EXPECT_FALSE(kv.Get("ns", "a/1").has_value());
  EXPECT_EQ(*kv.Get("other", "a/1"), "o");
  EXPECT_TRUE(absl::IsInvalidArgument(kv.Put("", "k", "v", true).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(kv.Put("ns", "", "v", true).status()));

  // Everything comes back from the store.
  GcsPublisher publisher2("inc2");
  GcsKvManager reloaded(store.get(), &publisher2);
  ASSERT_TRUE(reloaded.Load().ok());
  EXPECT_EQ(*reloaded.Get("ns", "b/1"), "w");
  EXPECT_EQ(*reloaded.Get("other", "a/1"), "o");
  EXPECT_FALSE(reloaded.Get("ns", "a/2").has_value());
}

void SetActor(rpc::PubMessage* m, const rpc::ActorInfo& a) { *m->mutable_actor() = a; }

TEST(RecordTable, PutUpdateListAndPublish) {
  auto store = NewInMemoryStore();
  GcsPublisher publisher("inc");
  rpc::SubscribeRequest request;
  request.add_channels(rpc::ACTOR);
  RecordTable<rpc::ActorInfo> actors(store.get(), &publisher, "actors", rpc::ACTOR, &SetActor);
  auto sub = publisher.Subscribe(request);
  rpc::ActorInfo a;
  a.set_actor_id("a1");
  a.set_state(rpc::ACTOR_PENDING);
  ASSERT_TRUE(actors.Put("a1", a).ok());
  ASSERT_TRUE(actors
                  .Update("a1",
                          [](rpc::ActorInfo* actor, bool exists) {
                            if (!exists) return false;
                            actor->set_state(rpc::ACTOR_ALIVE);
                            return true;
                          })
                  .ok());
  EXPECT_EQ(actors.Get("a1")->state(), rpc::ACTOR_ALIVE);
  EXPECT_EQ(actors.List().size(), 1u);
  std::vector<rpc::ActorState> seen;
  while (auto m = sub->Next(absl::Milliseconds(20))) {
    if (m->has_actor()) seen.push_back(m->actor().state());
  }
  EXPECT_EQ(seen, (std::vector<rpc::ActorState>{rpc::ACTOR_PENDING, rpc::ACTOR_ALIVE}));

  GcsPublisher publisher2("inc2");
  RecordTable<rpc::ActorInfo> reloaded(store.get(), &publisher2, "actors", rpc::ACTOR, &SetActor);
  ASSERT_TRUE(reloaded.Load().ok());
  EXPECT_EQ(reloaded.Get("a1")->state(), rpc::ACTOR_ALIVE);
}

// A node is listed ALIVE as soon as it is saved, and reaches the scheduler when its
// registration's listeners run. An actor pinned to it in between, or that only it has room
// for, waits for it (a driver that saw the node listed may create one at once); one pinned
// to an unknown node is refused.
TEST_F(NodeManagerTest, AnActorThatANodeStillRegisteringMayHoldWaitsForIt) {
  GcsNodeManager nodes(store_.get(), &publisher_, options_);
  placement::ResourceScheduler scheduler;
  NodeClientPool clients("token", absl::Milliseconds(200));
  GcsActorManager actors(store_.get(), &publisher_, &nodes, &clients, &scheduler);
  // A node the scheduler knows, too small for what follows; and one still registering.
  scheduler.AddNode("small", *Resources::FromMap({{"CPU", 1}}));
  ASSERT_TRUE(nodes.Register(Node("joining")).ok());  // listed; its listeners not run yet
  rpc::ActorInfo spec;
  spec.set_class_name("Counter");
  spec.set_scheduling_strategy("NODE_AFFINITY");
  spec.set_affinity_node_id("joining");
  auto pinned = actors.Create(spec);
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  EXPECT_EQ(actors.Get(pinned->actor_id())->state(), rpc::ACTOR_PENDING);

  // Or that only it has room for.
  rpc::ActorInfo big;
  big.set_class_name("Counter");
  (*big.mutable_resources()->mutable_amounts())["CPU"] = 4;
  auto fits_joining = actors.Create(big);
  ASSERT_TRUE(fits_joining.ok()) << fits_joining.status();
  EXPECT_EQ(actors.Get(fits_joining->actor_id())->state(), rpc::ACTOR_PENDING);

  spec.set_affinity_node_id("nowhere");
  auto unknown = actors.Create(spec);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("node nowhere is not alive"), std::string::npos)
      << unknown.status();
  clients.Shutdown();
}

// A task worker lends its CPU while it waits in get (gcs.proto's LendActorResources): the
// CPU goes to a waiting actor at once; taken back while none is free, it is owed and repaid
// before anything else is placed; a worker that dies while lent gives back only what it held.
TEST_F(NodeManagerTest, ALentCpuIsPlacedOwedRepaidAndNeverCountedTwice) {
  GcsNodeManager nodes(store_.get(), &publisher_, options_);
  placement::ResourceScheduler scheduler;
  NodeClientPool clients("token", absl::Milliseconds(200));
  GcsActorManager actors(store_.get(), &publisher_, &nodes, &clients, &scheduler);
  scheduler.AddNode("a", *Resources::FromMap({{"CPU", 2}, {"accel", 1}}));
  auto cpus = [&] { return scheduler.Available("a")->Get("CPU"); };
  auto create = [&](bool accel) {
    rpc::ActorInfo spec;
    spec.set_class_name("phalanx._task.TaskWorker");
    (*spec.mutable_resources()->mutable_amounts())["CPU"] = 1;
    if (accel) (*spec.mutable_resources()->mutable_amounts())["accel"] = 1;
    auto made = actors.Create(spec);
    EXPECT_TRUE(made.ok()) << made.status();
    return made->actor_id();
  };
  auto report = [&](const std::string& id, rpc::ActorState state) {
    rpc::ReportActorStateRequest r;
    r.set_actor_id(id);
    r.set_attempt(0);
    r.set_node_id("a");
    r.set_state(state);
    r.mutable_cause()->set_kind(rpc::DeathCause::EXITED);
    bool stale = false;
    ASSERT_TRUE(actors.ReportState(r, &stale).ok());
  };
  using Req = rpc::LendActorResourcesRequest;
  std::string bystander = create(false), waiter = create(true);
  report(bystander, rpc::ACTOR_ALIVE);
  report(waiter, rpc::ACTOR_ALIVE);
  std::string child = create(false);
  EXPECT_EQ(actors.Get(child)->state(), rpc::ACTOR_PENDING);

  // Lent: the child is placed on that CPU; the accelerator stays the waiter's.
  EXPECT_EQ(*actors.Lend(waiter, 0, Req::LEND), false);
  EXPECT_EQ(actors.Get(child)->state(), rpc::ACTOR_CREATING);
  EXPECT_EQ(cpus(), 0);
  EXPECT_EQ(scheduler.Available("a")->Get("accel"), 0);
  EXPECT_EQ(*actors.Lend(waiter, 0, Req::LEND), false);  // twice: a no-op

  // Taken back while none is free: TRY_RECLAIM leaves it lent, RECLAIM owes it.
  EXPECT_EQ(*actors.Lend(waiter, 0, Req::TRY_RECLAIM), false);
  EXPECT_EQ(*actors.Lend(waiter, 0, Req::RECLAIM), false);
  std::string later = create(false);  // in line behind the debt
  report(child, rpc::ACTOR_ALIVE);
  report(child, rpc::ACTOR_DEAD);  // its CPU repays the waiter, not the later actor
  EXPECT_EQ(actors.Get(later)->state(), rpc::ACTOR_PENDING);
  EXPECT_EQ(cpus(), 0);
  EXPECT_EQ(*actors.Lend(waiter, 0, Req::TRY_RECLAIM), true);  // held again: a no-op

  // Lent and then dead: the CPU is not given back a second time.
  EXPECT_EQ(*actors.Lend(waiter, 0, Req::LEND), false);
  EXPECT_EQ(actors.Get(later)->state(), rpc::ACTOR_CREATING);
  report(later, rpc::ACTOR_ALIVE);
  report(waiter, rpc::ACTOR_DEAD);
  EXPECT_EQ(cpus(), 0);  // the bystander's and the later actor's: 2 of 2
  EXPECT_EQ(scheduler.Available("a")->Get("accel"), 1);

  // Nothing to lend: a dead actor, an old attempt, an unknown one.
  EXPECT_EQ(*actors.Lend(waiter, 0, Req::LEND), true);
  EXPECT_EQ(*actors.Lend(bystander, 3, Req::LEND), true);
  EXPECT_EQ(cpus(), 0);
  auto unknown = actors.Lend("nope", 0, Req::LEND);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  clients.Shutdown();
}

// Lending lives in the GCS's memory. A GCS that restarts while a lent CPU runs another actor
// loads both: the actor that no longer fits runs on and owes its CPU (it is not killed as if
// its node were gone), and is repaid when a CPU frees.
TEST_F(NodeManagerTest, AGcsRestartKeepsActorsThatRanOnALentCpu) {
  GcsNodeManager nodes(store_.get(), &publisher_, options_);
  NodeClientPool clients("token", absl::Milliseconds(200));
  auto node = *Resources::FromMap({{"CPU", 1}});
  placement::ResourceScheduler first_scheduler;
  first_scheduler.AddNode("a", node);
  std::string waiter, child;
  using Req = rpc::LendActorResourcesRequest;
  auto report = [](GcsActorManager& actors, const std::string& id, rpc::ActorState state) {
    rpc::ReportActorStateRequest r;
    r.set_actor_id(id);
    r.set_node_id("a");
    r.set_state(state);
    r.mutable_cause()->set_kind(rpc::DeathCause::EXITED);
    bool stale = false;
    ASSERT_TRUE(actors.ReportState(r, &stale).ok());
  };
  rpc::ActorInfo spec;
  spec.set_class_name("phalanx._task.TaskWorker");
  (*spec.mutable_resources()->mutable_amounts())["CPU"] = 1;
  {
    GcsActorManager actors(store_.get(), &publisher_, &nodes, &clients, &first_scheduler);
    waiter = actors.Create(spec)->actor_id();
    report(actors, waiter, rpc::ACTOR_ALIVE);
    child = actors.Create(spec)->actor_id();
    EXPECT_EQ(*actors.Lend(waiter, 0, Req::LEND), false);
    report(actors, child, rpc::ACTOR_ALIVE);
  }
  placement::ResourceScheduler scheduler;
  scheduler.AddNode("a", node);
  GcsActorManager actors(store_.get(), &publisher_, &nodes, &clients, &scheduler);
  ASSERT_TRUE(actors.Load().ok());
  EXPECT_EQ(actors.Get(waiter)->state(), rpc::ACTOR_ALIVE);
  EXPECT_EQ(actors.Get(child)->state(), rpc::ACTOR_ALIVE);
  EXPECT_EQ(scheduler.Available("a")->Get("CPU"), 0);
  // The two were created in the same millisecond, so either may be loaded first: exactly
  // one holds the CPU and the other owes it; the holder's death repays the other.
  bool child_holds = *actors.Lend(child, 0, Req::TRY_RECLAIM);
  bool waiter_holds = *actors.Lend(waiter, 0, Req::TRY_RECLAIM);
  ASSERT_NE(child_holds, waiter_holds);
  const std::string& holder = child_holds ? child : waiter;
  const std::string& owed = child_holds ? waiter : child;
  report(actors, holder, rpc::ACTOR_DEAD);
  EXPECT_EQ(scheduler.Available("a")->Get("CPU"), 0);
  EXPECT_EQ(*actors.Lend(owed, 0, Req::TRY_RECLAIM), true);
  clients.Shutdown();
}

// A driver's lease: a driver whose port refuses connections is released once silent for the
// node timeout; one whose port still accepts (stopped) only after the lease timeout; one that
// renews, or ended its lease, never. Each wait is for an outcome (bounded at 30 s), so a slow
// machine cannot fail it.
TEST(DriverLeasesTest, ReleasesTheGoneAtOnceAndTheStoppedAfterTheLeaseTimeout) {
  // A port that listens (its process lives) and one that refuses (nothing listens there).
  int listening = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::bind(listening, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(listening, 64), 0);
  ASSERT_EQ(::getsockname(listening, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  absl::Cleanup close_it = [&] { ::close(listening); };
  const int open_port = ntohs(addr.sin_port);
  const int closed_port = FreePort();

  // Returns the releases, once `done` holds of them (or after 30 s), renewing "alive" meanwhile.
  auto run = [&](absl::Duration lease_timeout,
                 const std::vector<std::pair<std::string, int>>& drivers,
                 const std::function<bool(const std::vector<std::string>&)>& done) {
    absl::Mutex mu;
    std::vector<std::string> released;
    DriverLeaseOptions options;
    options.node_timeout = absl::Milliseconds(200);
    options.lease_timeout = lease_timeout;
    options.knock_every = absl::Milliseconds(50);
    DriverLeases leases(
        options, [&](const std::string& owner, const std::string& job, const std::string& why) {
          absl::MutexLock lock(&mu);
          released.push_back(absl::StrCat(owner, "/", job, ": ", why));
        });
    auto renew = [&](const std::string& owner, int port, bool release = false) {
      rpc::RenewDriverLeaseRequest r;
      r.set_owner_id(owner);
      r.set_job_id("job-" + owner);
      r.set_knock_address(absl::StrCat("127.0.0.1:", port));
      r.set_pid(1);
      r.set_hostname("here");
      r.set_release(release);
      return leases.Renew(r);
    };
    EXPECT_EQ(renew("alive", open_port), absl::Milliseconds(50));  // node timeout / 4
    renew("ended", closed_port);
    renew("ended", closed_port, /*release=*/true);
    for (const auto& [owner, port] : drivers) renew(owner, port);
    absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (absl::Now() < deadline) {
      renew("alive", open_port);
      leases.Check();
      bool finished;
      {
        absl::MutexLock lock(&mu);
        finished = done(released);
      }
      if (finished) break;
      absl::SleepFor(absl::Milliseconds(20));
    }
    absl::MutexLock lock(&mu);
    return released;
  };

  // A long lease timeout: the ended driver (it released its lease) goes at once, then the
  // gone one; the stopped one stays.
  auto first = run(absl::Seconds(60), {{"dead", closed_port}, {"stopped", open_port}},
                   [](const std::vector<std::string>& r) { return r.size() >= 2; });
  ASSERT_EQ(first.size(), 2u) << absl::StrJoin(first, "\n");
  EXPECT_EQ(first[0], "ended/job-ended: it ended");
  EXPECT_TRUE(absl::StrContains(first[1], "dead/job-dead: its driver (pid 1 on here) exited"))
      << first[1];
  EXPECT_TRUE(absl::StrContains(first[1], "refuses connections")) << first[1];

  // A short one: the stopped driver goes too, once it ran out.
  auto second = run(absl::Milliseconds(400), {{"stopped", open_port}},
                    [](const std::vector<std::string>& r) { return r.size() >= 2; });
  ASSERT_EQ(second.size(), 2u) << absl::StrJoin(second, "\n");
  EXPECT_TRUE(absl::StrContains(second[1],
                                "stopped/job-stopped: its driver (pid 1 on here) is "
                                "gone or cut off"))
      << second[1];
}

// A GCS that restarts finds the leases its predecessor kept in the store: a driver that died
// while the GCS was down is still released (before, its lease was only in the dead GCS's
// memory, and its actors leaked). An ended lease is not kept.
TEST(DriverLeasesTest, ALeaseOutlivesAGcsRestartThroughTheStore) {
  auto store = NewInMemoryStore();
  const int closed_port = FreePort();
  DriverLeaseOptions options;
  options.node_timeout = absl::Milliseconds(200);
  options.knock_every = absl::Milliseconds(50);
  auto renew = [&](DriverLeases& leases, const std::string& owner, bool release) {
    rpc::RenewDriverLeaseRequest r;
    r.set_owner_id(owner);
    r.set_job_id("job-" + owner);
    r.set_knock_address(absl::StrCat("127.0.0.1:", closed_port));
    r.set_pid(7);
    r.set_hostname("here");
    r.set_release(release);
    leases.Renew(r);
  };
  {
    DriverLeases before(
        options, [](auto&&...) {}, store.get());
    renew(before, "died", false);
    renew(before, "ended", false);
    renew(before, "ended", true);
  }  // the GCS stops
  absl::Mutex mu;
  std::vector<std::string> released;
  DriverLeases after(
      options,
      [&](const std::string& owner, const std::string&, const std::string&) {
        absl::MutexLock lock(&mu);
        released.push_back(owner);
      },
      store.get());
  ASSERT_TRUE(after.Load().ok());
  EXPECT_EQ(after.size(), 1u);
  absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline) {
    after.Check();
    {
      absl::MutexLock lock(&mu);
      if (!released.empty()) break;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  absl::MutexLock lock(&mu);
  EXPECT_EQ(released, std::vector<std::string>{"died"});
  EXPECT_EQ(after.size(), 0u);
  // Forgotten in the store too: a third GCS finds nothing.
  auto rows = store->GetAll(kDriverLeaseTable);
  ASSERT_TRUE(rows.ok());
  EXPECT_TRUE(rows->empty());
}

}  // namespace
}  // namespace phalanx::gcs
