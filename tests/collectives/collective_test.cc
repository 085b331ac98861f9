// Collective groups with real rank processes on loopback, rendezvous through a real GCS.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <map>
#include <optional>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/files.h"
#include "base/sha256.h"
#include "client/gcs_client.h"
#include "collectives/backend.h"
#include "collectives/collective_group.h"
#include "collectives/tcp_transport.h"
#include "gtest/gtest.h"
#include "tests/testing/map_store.h"
#include "tests/testing/test_util.h"

namespace phalanx::collective {
namespace {

using phalanx::testing::MapStore;

class CollectiveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    redis_ = std::make_unique<testing::RedisServer>();
    gcs_ = std::make_unique<testing::GcsProcess>(*redis_);
  }

  // A group of this process on the test's GCS, with a 30 s timeout.
  GroupOptions InProcessGroup(const std::string& name) {
    GroupOptions options;
    options.name = name;
    options.gcs_address = gcs_->address();
    options.token = gcs_->token();
    options.timeout = absl::Seconds(30);
    return options;
  }

  // Starts one rank; its output goes to a log named after `label`.
  testing::ChildProcess Rank(const std::string& label, const std::string& scenario,
                             const std::string& plan,
                             std::vector<std::pair<std::string, std::string>> env = {},
                             const std::string& backend = "gloo", int cuda_device = -1) {
    logs_[label] = absl::StrCat(dir_.path(), "/", label, ".log");
    return testing::ChildProcess(
        {testing::BinDir() + "/collective_rank", "--gcs", gcs_->address(), "--token", gcs_->token(),
         "--group", group_, "--scenario", scenario, "--plan", plan, "--timeout-ms",
         std::to_string(timeout_ms_), "--backend", backend, "--cuda-device",
         std::to_string(cuda_device)},
        logs_[label], std::move(env));
  }

  std::string Output(const std::string& label) { return ReadFile(logs_[label]).value_or(""); }

  bool WaitForLine(const std::string& label, const std::string& text,
                   absl::Duration timeout = absl::Seconds(60)) {
    return testing::WaitFor([&] { return Output(label).find(text) != std::string::npos; }, timeout);
  }

  // Waits for a rank to exit; returns its exit code (-1 on timeout or signal).
  int ExitCode(testing::ChildProcess& p, absl::Duration timeout = absl::Seconds(120)) {
    int status = p.WaitExit(timeout);
    return status >= 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  std::unique_ptr<testing::RedisServer> redis_;
  std::unique_ptr<testing::GcsProcess> gcs_;
  testing::TempDir dir_;
  std::string group_ = "test-group";
  int timeout_ms_ = 10000;  // the ranks' group timeout
  std::map<std::string, std::string> logs_;
};

// The group is a transport: given a store of the caller's, it forms its epochs there and
// needs no GCS (the address it is given leads nowhere), and it reconfigures as over the GCS.
TEST(RendezvousTest, AGroupFormsOverACallersStoreWithNoGcsAndReconfigures) {
  auto store = std::make_shared<MapStore>();
  const std::string name = absl::StrCat("callers-store-", getpid());
  constexpr int kWorld = 3;
  std::vector<absl::Status> first(kWorld), second(kWorld);
  std::vector<float> sums(kWorld), sums_after(kWorld);
  std::vector<std::thread> ranks;
  for (int r = 0; r < kWorld; ++r) {
    ranks.emplace_back([&, r] {
      GroupOptions options;
      options.name = name;
      options.rendezvous = store;
      options.gcs_address = "127.0.0.1:1";  // never dialled
      options.token = "the caller's secret";
      options.timeout = absl::Seconds(60);
      auto group = CollectiveGroup::Create(options);
      if (!group.ok()) {
        first[r] = group.status();
        return;
      }
      first[r] = (*group)->Reconfigure(1, r, kWorld);
      if (!first[r].ok()) return;
      std::vector<float> data(1024, static_cast<float>(r + 1));
      first[r] = (*group)
                     ->AllreduceAsync(data.data(), data.size(), DType::kFloat32, ReduceOp::kSum)
                     .Wait();
      sums[r] = data[1023];
      if (r == kWorld - 1) return;  // the last rank leaves; the others go on as two
      second[r] = (*group)->Reconfigure(2, r, kWorld - 1);
      if (!second[r].ok()) return;
      second[r] = (*group)->AllreduceAsync(data.data(), 1, DType::kFloat32, ReduceOp::kSum).Wait();
      sums_after[r] = data[0];
    });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(first[r].ok()) << "rank " << r << ": " << first[r];
    EXPECT_EQ(sums[r], 6.0f) << "rank " << r;
  }
  for (int r = 0; r + 1 < kWorld; ++r) {
    ASSERT_TRUE(second[r].ok()) << "rank " << r << ": " << second[r];
    EXPECT_EQ(sums_after[r], 12.0f) << "rank " << r;  // 6 + 6
  }
  EXPECT_GT(store->puts(), 0);
  auto keys = store->List(name);
  ASSERT_TRUE(keys.ok());
}

// A Work that no collective returned is an error to wait on, not a silent success.
TEST(WorkTest, AWorkNoCollectiveMadeFailsLoudly) {
  Work unset;
  EXPECT_TRUE(unset.Done());
  absl::Status s = unset.Wait();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(Work(absl::OkStatus()).Wait().ok());
}

TEST_F(CollectiveTest, EveryOpAndDtypeMatchesTheLocalResult) {
  for (int world : {4, 3}) {
    group_ = absl::StrCat("ops-", world);
    std::vector<testing::ChildProcess> ranks;
    for (int r = 0; r < world; ++r) {
      ranks.push_back(
          Rank(absl::StrCat("w", world, "r", r), "ops", absl::StrCat("1:", world, ":", r)));
    }
    for (int r = 0; r < world; ++r) {
      std::string label = absl::StrCat("w", world, "r", r);
      EXPECT_EQ(ExitCode(ranks[r]), 0) << label << ":\n" << Output(label);
      EXPECT_NE(Output(label).find("DONE"), std::string::npos) << Output(label);
    }
  }
}

TEST_F(CollectiveTest, ReconfigureFourToThreeToFour) {
  std::vector<testing::ChildProcess> stayers;
  for (int r = 0; r < 3; ++r) {
    stayers.push_back(
        Rank(absl::StrCat("s", r), "plan", absl::StrCat("1:4:", r, ",2:3:", r, ",3:4:", r)));
  }
  auto leaver = Rank("leaver", "plan", "1:4:3");
  EXPECT_EQ(ExitCode(leaver), 0) << Output("leaver");
  // The newcomer joins once the three formed epoch 2 without the leaver.
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(WaitForLine(absl::StrCat("s", r), "epoch 2 OK"));
  auto newcomer = Rank("newcomer", "plan", "3:4:3");
  EXPECT_EQ(ExitCode(newcomer), 0) << Output("newcomer");
  for (int r = 0; r < 3; ++r) {
    std::string label = absl::StrCat("s", r);
    EXPECT_EQ(ExitCode(stayers[r]), 0) << Output(label);
    EXPECT_NE(Output(label).find("epoch 3 OK"), std::string::npos) << Output(label);
  }
}

// Both paths: shared memory (all ranks on this machine) and TCP between every rank (as across
// machines).
TEST_F(CollectiveTest, SigkilledRankFailsTheOthersFastAndTheyFormANewEpoch) {
  for (const char* shm : {"1", "0"}) {
    group_ = absl::StrCat("kill-shm", shm);
    std::vector<std::pair<std::string, std::string>> env = {{"PHALANX_COLLECTIVE_SHM", shm}};
    std::vector<testing::ChildProcess> survivors;
    for (int r = 0; r < 2; ++r) {
      survivors.push_back(
          Rank(absl::StrCat(shm, "r", r), "loop", absl::StrCat("1:3:", r, ",2:2:", r), env));
    }
    auto victim = Rank(absl::StrCat(shm, "r2"), "loop", "1:3:2", env);
    ASSERT_TRUE(WaitForLine(absl::StrCat(shm, "r0"), "iter 3"));
    victim.Kill(SIGKILL);
    int64_t killed_at = absl::ToUnixMillis(absl::Now());
    for (int r = 0; r < 2; ++r) {
      std::string label = absl::StrCat(shm, "r", r);
      EXPECT_EQ(ExitCode(survivors[r]), 0) << Output(label);
      std::string out = Output(label);
      EXPECT_NE(out.find("epoch 2 OK"), std::string::npos) << out;
      size_t at = out.find("failed at ");
      ASSERT_NE(at, std::string::npos) << out;
      int64_t failed_at = 0;
      ASSERT_TRUE(absl::SimpleAtoi(out.substr(at + 10, out.find(':', at) - at - 10), &failed_at));
      // Within the group's 10 s timeout (in practice milliseconds: the dead peer's
      // connections close, or its process is seen gone).
      EXPECT_LT(failed_at - killed_at, 10000) << out;
      std::printf("shm=%s: rank %d saw the failure %ld ms after the SIGKILL\n", shm, r,
                  failed_at - killed_at);
      EXPECT_NE(out.find("epoch 1"), std::string::npos) << out;
      EXPECT_NE(out.find("peer rank 2"), std::string::npos) << out;
    }
  }
}

// A peer that vanished without a FIN or RST (SIGSTOP: its sockets stay open and silent), on
// both TCP transports: Abort() from another thread ends each survivor's call at once (the
// bound asserted is generous; the figure is printed), and the survivors form a new epoch.
TEST_F(CollectiveTest, AbortEndsACallBlockedOnAStoppedPeerAtOnce) {
  for (const char* transport : {"tcp", "gloo"}) {
    group_ = absl::StrCat("abort-", transport);
    std::string trigger = absl::StrCat(dir_.path(), "/abort-", transport);
    std::vector<std::pair<std::string, std::string>> env = {
        {"PHALANX_COLLECTIVE_SHM", "0"}, {"PHALANX_COLLECTIVE_TRANSPORT", transport}};
    auto survivor_env = env;
    survivor_env.emplace_back("TEST_ABORT_FILE", trigger);
    std::vector<testing::ChildProcess> survivors;
    for (int r = 0; r < 2; ++r) {
      survivors.push_back(Rank(absl::StrCat(transport, "r", r), "loop",
                               absl::StrCat("1:3:", r, ",2:2:", r), survivor_env));
    }
    auto stopped = Rank(absl::StrCat(transport, "r2"), "loop", "1:3:2", env);
    ASSERT_TRUE(WaitForLine(absl::StrCat(transport, "r0"), "iter 3"))
        << "r0:\n"
        << Output(absl::StrCat(transport, "r0")) << "r1:\n"
        << Output(absl::StrCat(transport, "r1")) << "r2:\n"
        << Output(absl::StrCat(transport, "r2"));
    stopped.Kill(SIGSTOP);
    absl::SleepFor(absl::Milliseconds(300));  // the survivors block on it
    ASSERT_TRUE(WriteFile(trigger, "").ok());
    for (int r = 0; r < 2; ++r) {
      std::string label = absl::StrCat(transport, "r", r);
      EXPECT_EQ(ExitCode(survivors[r]), 0) << Output(label);
      std::string out = Output(label);
      EXPECT_NE(out.find("epoch 2 OK"), std::string::npos) << out;
      size_t at = out.find("abort ended the call in ");
      ASSERT_NE(at, std::string::npos) << out;
      double ms = std::stod(out.substr(at + 24));
      std::printf("%s: rank %d's call ended %.1f ms after Abort()\n", transport, r, ms);
      EXPECT_LT(ms, 1000) << out;
    }
    stopped.Kill(SIGCONT);
    stopped.KillAndWait();
  }
}

// A member whose peer never comes (it died before the rendezvous): an Abort from another
// thread ends its Reconfigure at once, where it would wait out the group's timeout. An Abort
// that came before the Reconfigure was called does not end it: the epoch forms.
TEST_F(CollectiveTest, AbortEndsAReconfigureWaitingForAMemberThatIsGone) {
  GroupOptions options = InProcessGroup("abort-forming");
  auto waiting = CollectiveGroup::Create(options);
  ASSERT_TRUE(waiting.ok()) << waiting.status();
  absl::Status formed;
  absl::Time aborted_at;
  std::thread member([&] { formed = (*waiting)->Reconfigure(1, 0, 2); });
  absl::SleepFor(absl::Milliseconds(300));  // it waits for rank 1's keys
  aborted_at = absl::Now();
  (*waiting)->Abort("rank 1 is gone");
  member.join();
  double ms = absl::ToDoubleMilliseconds(absl::Now() - aborted_at);
  std::printf("Reconfigure ended %.1f ms after Abort() (group timeout 30 s)\n", ms);
  EXPECT_TRUE(absl::IsAborted(formed)) << formed;
  EXPECT_NE(formed.message().find("aborted while it formed"), std::string::npos) << formed;
  EXPECT_LT(ms, 5000) << "the rendezvous waited for its timeout, not for the Abort";

  // The next epoch forms with both members although this one was aborted before it.
  auto other = CollectiveGroup::Create(options);
  ASSERT_TRUE(other.ok()) << other.status();
  (*waiting)->Abort("an old abort");
  absl::Status second;
  std::thread joiner([&] { second = (*other)->Reconfigure(2, 1, 2); });
  EXPECT_TRUE((*waiting)->Reconfigure(2, 0, 2).ok());
  joiner.join();
  EXPECT_TRUE(second.ok()) << second;
}

// The same once the rendezvous is over: a member that published its keys and then went
// (it never connects) leaves the lowest member of the machines' mesh waiting in accept().
// An Abort ends that wait at once too, where it would last the group's timeout. Shared
// memory is off, so each member is a machine of its own and the mesh forms over TCP.
TEST_F(CollectiveTest, AbortEndsAReconfigureWaitingForAConnectionFromAMemberThatIsGone) {
  GroupOptions options = InProcessGroup("abort-connecting");
  options.shared_memory = false;
  auto waiting = CollectiveGroup::Create(options);
  ASSERT_TRUE(waiting.ok()) << waiting.status();
  // Rank 1's keys, as a member publishes them before it connects.
  auto gcs = gcs::GcsClient::Connect({gcs_->address(), gcs_->token()});
  ASSERT_TRUE(gcs.ok()) << gcs.status();
  GcsRendezvous rendezvous(std::move(*gcs));
  KvStore epoch(&rendezvous, "abort-connecting/e1/");
  ASSERT_TRUE(epoch.Set("machine/1", "gone-host").ok());
  ASSERT_TRUE(epoch.Set("p2p/1", "127.0.0.1:9").ok());
  absl::Status formed;
  std::thread member([&] { formed = (*waiting)->Reconfigure(1, 0, 2); });
  // Rank 0 listens for the mesh once it published its endpoint: then it waits in accept().
  auto endpoint = epoch.Get("mesh/0", absl::Seconds(20));
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  absl::SleepFor(absl::Milliseconds(200));
  absl::Time aborted_at = absl::Now();
  (*waiting)->Abort("rank 1 is gone");
  member.join();
  double ms = absl::ToDoubleMilliseconds(absl::Now() - aborted_at);
  std::printf("Reconfigure ended %.1f ms after Abort() (group timeout 30 s)\n", ms);
  EXPECT_FALSE(formed.ok());
  EXPECT_NE(formed.message().find("abort"), std::string::npos) << formed;
  EXPECT_LT(ms, 5000) << "the accept waited for its timeout, not for the Abort";
}

// Connections to a mesh endpoint's port from strangers (one that closes at once, one that
// sends garbage, one that speaks the protocol but proves the wrong token) are refused, and
// the mesh forms with the real member that connects after them.
TEST_F(CollectiveTest, StrangersOnAMeshPortAreRefusedAndTheMeshFormsWithTheMember) {
  std::signal(SIGPIPE, SIG_IGN);  // as CollectiveGroup::Create does
  auto gcs = gcs::GcsClient::Connect({gcs_->address(), gcs_->token()});
  ASSERT_TRUE(gcs.ok()) << gcs.status();
  GcsRendezvous rendezvous(std::move(*gcs));
  KvStore store(&rendezvous, "strangers/");
  AbortSignal abort0, abort1;
  absl::StatusOr<std::unique_ptr<TcpMesh>> mesh0;
  std::thread endpoint0([&] {
    mesh0 = TcpMesh::Connect(&store, "mesh", 0, 2, "127.0.0.1", {"m0", "m1"}, gcs_->token(),
                             &abort0, absl::Seconds(20));
  });
  auto address = store.Get("mesh/0", absl::Seconds(10));
  ASSERT_TRUE(address.ok()) << address.status();
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::stoi(address->substr(address->rfind(':') + 1))));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  auto stranger = [&](const std::string& says, bool stay) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(::write(fd, says.data(), says.size()), static_cast<ssize_t>(says.size()));
    if (!stay) ::close(fd);
    return fd;
  };
  stranger("", false);
  int garbage = stranger(std::string(40, 'x'), true);
  // The hello's layout: magic "PHLX", the member's index, then its 32-byte proof.
  std::string forged("\x58\x4c\x48\x50\x01\x00\x00\x00", 8);
  forged += HmacSha256("not-the-token", "phalanx-mesh|strangers/mesh|1>0");
  int impostor = stranger(forged, true);

  absl::StatusOr<std::unique_ptr<TcpMesh>> mesh1 = TcpMesh::Connect(
      &store, "mesh", 1, 2, "127.0.0.1", {"m0", "m1"}, gcs_->token(), &abort1, absl::Seconds(20));
  endpoint0.join();
  ASSERT_TRUE(mesh0.ok()) << mesh0.status();
  ASSERT_TRUE(mesh1.ok()) << mesh1.status();
  // The stream is the member's: a byte goes through.
  char byte = 'm', got = 0;
  ASSERT_EQ(::write((*mesh1)->fd(0), &byte, 1), 1);
  ASSERT_TRUE(
      testing::WaitFor([&] { return ::read((*mesh0)->fd(1), &got, 1) == 1; }, absl::Seconds(5)));
  EXPECT_EQ(got, 'm');
  ::close(garbage);
  ::close(impostor);
}

// Member `rank` of `world` on loopback, proving `secret`. Like CollectiveGroup::Create, it
// ignores SIGPIPE first: writing to a connection a peer (or a stranger) closed must not end
// this process.
ConnectOptions MemberOnLoopback(int rank, int world, absl::Duration timeout, std::string secret) {
  std::signal(SIGPIPE, SIG_IGN);
  ConnectOptions options;
  options.rank = rank;
  options.world_size = world;
  options.host = "127.0.0.1";
  options.timeout = timeout;
  options.secret = std::move(secret);
  return options;
}

// Gloo takes whoever reaches a pair's port first for the peer; the proof that follows is what
// keeps a member without the token out. Both members refuse, every try, within the timeout.
TEST_F(CollectiveTest, AGlooMemberThatCannotProveTheTokenIsRefused) {
  auto gcs = gcs::GcsClient::Connect({gcs_->address(), gcs_->token()});
  ASSERT_TRUE(gcs.ok()) << gcs.status();
  GcsRendezvous rendezvous(std::move(*gcs));
  KvStore store(&rendezvous, "gloo-proof/");
  absl::StatusOr<std::unique_ptr<CommBackend>> formed[2];
  absl::Time t0 = absl::Now();
  std::thread members[2];
  for (int r = 0; r < 2; ++r) {
    members[r] = std::thread([&, r] {
      formed[r] = ConnectGloo(&store, MemberOnLoopback(r, 2, absl::Seconds(10),
                                                       r == 0 ? gcs_->token() : "not-the-token"));
    });
  }
  for (auto& m : members) m.join();
  absl::Duration took = absl::Now() - t0;
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(formed[r].ok()) << r;
    EXPECT_NE(formed[r].status().message().find("did not prove the cluster token"),
              std::string::npos)
        << formed[r].status();
    EXPECT_NE(formed[r].status().message().find(absl::StrCat("try ", kGlooFormAttempts)),
              std::string::npos)
        << formed[r].status();
  }
  std::printf("both members refused after %d tries in %s\n", kGlooFormAttempts,
              absl::FormatDuration(took).c_str());
  EXPECT_LT(took, absl::Seconds(10) + absl::Seconds(5));
}

// A stranger reaches the port of each pair that members 0 and 1 opened for member 2 before
// member 2 does (as a stale client dialing a port the kernel reused would). Gloo takes it for
// member 2 where it listens; the proof or the refused connection fails that try for all, and
// the members form the mesh on a fresh try, which then reduces correctly.
TEST_F(CollectiveTest, AStrangerOnAGlooPortCostsOneTryAndTheMeshForms) {
  auto gcs = gcs::GcsClient::Connect({gcs_->address(), gcs_->token()});
  ASSERT_TRUE(gcs.ok()) << gcs.status();
  GcsRendezvous rendezvous(std::move(*gcs));
  KvStore store(&rendezvous, "gloo-stranger/");
  absl::StatusOr<std::unique_ptr<CommBackend>> formed[3];
  std::thread members[3];
  auto start = [&](int r) {
    members[r] = std::thread([&, r] {
      formed[r] = ConnectGloo(&store, MemberOnLoopback(r, 3, absl::Seconds(20), gcs_->token()));
    });
  };
  absl::Time t0 = absl::Now();
  start(0);
  start(1);
  // Say member 2 is here, so that 0 and 1 open their pairs and publish them.
  KvStore first_try(&rendezvous, "gloo-stranger/gloo/a0/");
  ASSERT_TRUE(first_try.Set("here/2", "").ok());
  std::vector<int> strangers;
  for (int r = 0; r < 2; ++r) {
    auto record = first_try.Get(absl::StrCat(r), absl::Seconds(10));
    ASSERT_TRUE(record.ok()) << record.status();
    // Gloo's record: one address per other member (a sockaddr_storage and a sequence
    // number each); member 2's is the second.
    size_t each = record->size() / 2;
    const auto* sa = reinterpret_cast<const sockaddr_in*>(record->data() + each);
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(sa), sizeof(sockaddr_in)), 0)
        << "member " << r << "'s pair for member 2, port " << ntohs(sa->sin_port);
    strangers.push_back(fd);
  }
  start(2);
  for (auto& m : members) m.join();
  std::printf("the mesh formed %s after the start\n",
              absl::FormatDuration(absl::Now() - t0).c_str());
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(formed[r].ok()) << r << ": " << formed[r].status();
  std::vector<float> data[3];
  absl::Status reduced[3];
  for (int r = 0; r < 3; ++r) {
    data[r].assign(1024, static_cast<float>(r + 1));
    members[r] = std::thread([&, r] {
      reduced[r] = (*formed[r])
                       ->Allreduce(data[r].data(), data[r].size(), DType::kFloat32, ReduceOp::kSum,
                                   absl::Seconds(10));
    });
  }
  for (auto& m : members) m.join();
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(reduced[r].ok()) << reduced[r];
    EXPECT_EQ(data[r][1023], 6.0f) << r;
  }
  for (int fd : strangers) ::close(fd);
}

// Two "machines" on this one (PHALANX_MACHINE_ID): ranks 0 and 1 on hA, 2 and 3 on hB.
std::vector<std::pair<std::string, std::string>> OnMachine(int rank) {
  return {{"PHALANX_MACHINE_ID", rank < 2 ? "hA" : "hB"}};
}

TEST_F(CollectiveTest, TwoMachinesEveryOpAndDtypeMatchesTheLocalResult) {
  group_ = "hier-ops";
  std::vector<testing::ChildProcess> ranks;
  for (int r = 0; r < 4; ++r) {
    ranks.push_back(Rank(absl::StrCat("r", r), "ops", absl::StrCat("1:4:", r), OnMachine(r)));
  }
  for (int r = 0; r < 4; ++r) {
    std::string label = absl::StrCat("r", r);
    EXPECT_EQ(ExitCode(ranks[r]), 0) << label << ":\n" << Output(label);
    EXPECT_NE(Output(label).find("DONE"), std::string::npos) << Output(label);
  }
  EXPECT_NE(Output("r0").find("spans 2 machines"), std::string::npos) << Output("r0");
}

// The victim is hB's leader (it holds the TCP stream) or hB's other member (shared memory).
TEST_F(CollectiveTest, TwoMachinesSigkilledRankFailsTheOthersFast) {
  for (int victim : {2, 3}) {
    group_ = absl::StrCat("hier-kill-", victim);
    std::vector<testing::ChildProcess> survivors;
    std::vector<std::string> labels;
    for (int r = 0, next = 0; r < 4; ++r) {
      if (r == victim) continue;
      labels.push_back(absl::StrCat("v", victim, "r", r));
      survivors.push_back(
          Rank(labels.back(), "loop", absl::StrCat("1:4:", r, ",2:3:", next++), OnMachine(r)));
    }
    auto killed =
        Rank(absl::StrCat("v", victim), "loop", absl::StrCat("1:4:", victim), OnMachine(victim));
    ASSERT_TRUE(WaitForLine(labels[0], "iter 3"));
    killed.Kill(SIGKILL);
    int64_t killed_at = absl::ToUnixMillis(absl::Now());
    for (size_t i = 0; i < survivors.size(); ++i) {
      EXPECT_EQ(ExitCode(survivors[i]), 0) << Output(labels[i]);
      std::string out = Output(labels[i]);
      EXPECT_NE(out.find("epoch 2 OK"), std::string::npos) << out;
      size_t at = out.find("failed at ");
      ASSERT_NE(at, std::string::npos) << out;
      int64_t failed_at = 0;
      ASSERT_TRUE(absl::SimpleAtoi(out.substr(at + 10, out.find(':', at) - at - 10), &failed_at));
      EXPECT_LT(failed_at - killed_at, 2000) << out;
      EXPECT_NE(out.find(absl::StrCat("peer rank ", victim)), std::string::npos) << out;
      std::printf("victim rank %d: %s saw the failure %ld ms after the SIGKILL\n", victim,
                  labels[i].c_str(), failed_at - killed_at);
    }
  }
}

// hB's leader stops (no FIN, no RST): Abort() on every survivor ends its call at once, on
// hA (blocked on the TCP stream, or on its leader) and on hB (blocked on shared memory).
TEST_F(CollectiveTest, TwoMachinesAbortEndsACallBlockedOnAStoppedMachine) {
  group_ = "hier-abort";
  std::string trigger = absl::StrCat(dir_.path(), "/abort");
  std::vector<testing::ChildProcess> survivors;
  std::vector<std::string> labels;
  for (int r : {0, 1, 3}) {
    auto env = OnMachine(r);
    env.emplace_back("TEST_ABORT_FILE", trigger);
    labels.push_back(absl::StrCat("r", r));
    survivors.push_back(
        Rank(labels.back(), "loop", absl::StrCat("1:4:", r, ",2:3:", r == 3 ? 2 : r), env));
  }
  auto stopped = Rank("r2", "loop", "1:4:2", OnMachine(2));
  ASSERT_TRUE(WaitForLine("r0", "iter 3"));
  stopped.Kill(SIGSTOP);
  absl::SleepFor(absl::Milliseconds(300));
  ASSERT_TRUE(WriteFile(trigger, "").ok());
  for (size_t i = 0; i < survivors.size(); ++i) {
    EXPECT_EQ(ExitCode(survivors[i]), 0) << Output(labels[i]);
    std::string out = Output(labels[i]);
    EXPECT_NE(out.find("epoch 2 OK"), std::string::npos) << out;
    size_t at = out.find("abort ended the call in ");
    ASSERT_NE(at, std::string::npos) << out;
    double ms = std::stod(out.substr(at + 24));
    std::printf("%s's call ended %.1f ms after Abort()\n", labels[i].c_str(), ms);
    EXPECT_LT(ms, 1000) << out;
  }
  stopped.Kill(SIGCONT);
  stopped.KillAndWait();
}

// hB's leader stops and nobody aborts: the others fail at the group timeout.
TEST_F(CollectiveTest, TwoMachinesStoppedMachineFailsTheOthersAtTheTimeout) {
  group_ = "hier-stop";
  timeout_ms_ = 1500;
  std::vector<testing::ChildProcess> survivors;
  std::vector<std::string> labels;
  for (int r : {0, 1, 3}) {
    labels.push_back(absl::StrCat("r", r));
    survivors.push_back(Rank(labels.back(), "loop",
                             absl::StrCat("1:4:", r, ",2:3:", r == 3 ? 2 : r), OnMachine(r)));
  }
  auto stopped = Rank("r2", "loop", "1:4:2", OnMachine(2));
  ASSERT_TRUE(WaitForLine("r0", "iter 3"));
  stopped.Kill(SIGSTOP);
  int64_t stopped_at = absl::ToUnixMillis(absl::Now());
  for (size_t i = 0; i < survivors.size(); ++i) {
    EXPECT_EQ(ExitCode(survivors[i]), 0) << Output(labels[i]);
    std::string out = Output(labels[i]);
    EXPECT_NE(out.find("epoch 2 OK"), std::string::npos) << out;
    size_t at = out.find("failed at ");
    ASSERT_NE(at, std::string::npos) << out;
    int64_t failed_at = 0;
    ASSERT_TRUE(absl::SimpleAtoi(out.substr(at + 10, out.find(':', at) - at - 10), &failed_at));
    EXPECT_LT(failed_at - stopped_at, 1500 + 1500) << out;
    // hA's leader waits on hB's stream and names hB's leader; the members waiting on shared
    // memory see only that their machine's call did not complete.
    if (labels[i] == "r0") {
      EXPECT_NE(out.find("peer rank 2"), std::string::npos) << out;
    }
    std::printf("%s failed %ld ms after the SIGSTOP (timeout 1500 ms)\n", labels[i].c_str(),
                failed_at - stopped_at);
  }
  stopped.Kill(SIGCONT);
  stopped.KillAndWait();
}

TEST_F(CollectiveTest, StaleEpochMemberIsRefused) {
  std::vector<testing::ChildProcess> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.push_back(Rank(absl::StrCat("r", r), "plan", absl::StrCat("1:2:", r, ",2:2:", r)));
  for (int r = 0; r < 2; ++r) ASSERT_EQ(ExitCode(ranks[r]), 0) << Output(absl::StrCat("r", r));
  auto stale = Rank("stale", "plan", "1:2:1");
  EXPECT_EQ(ExitCode(stale), 3) << Output("stale");
  EXPECT_NE(Output("stale").find("already reached epoch 2"), std::string::npos) << Output("stale");
}

TEST_F(CollectiveTest, NetworkCheckFlagsASlowedRank) {
  std::vector<testing::ChildProcess> ranks;
  for (int r = 0; r < 3; ++r) {
    std::vector<std::pair<std::string, std::string>> env;
    if (r == 2) env.emplace_back("PHALANX_NETCHECK_DELAY_MS", "400");
    ranks.push_back(Rank(absl::StrCat("r", r), "netcheck", absl::StrCat("1:3:", r), env));
  }
  for (int r = 0; r < 3; ++r) {
    std::string label = absl::StrCat("r", r);
    EXPECT_EQ(ExitCode(ranks[r]), 0) << Output(label);
    EXPECT_NE(Output(label).find("stragglers: 2 \n"), std::string::npos) << Output(label);
  }
}

TEST_F(CollectiveTest, NetworkCheckFlagsARankThatIsGoneAsFaulty) {
  std::vector<testing::ChildProcess> ranks;
  for (int r = 0; r < 3; ++r) {
    std::vector<std::pair<std::string, std::string>> env;
    if (r == 2) env.emplace_back("TEST_EXIT_BEFORE_NETCHECK", "1");
    ranks.push_back(Rank(absl::StrCat("r", r), "netcheck", absl::StrCat("1:3:", r), env));
  }
  for (int r = 0; r < 2; ++r) {
    std::string label = absl::StrCat("r", r);
    EXPECT_EQ(ExitCode(ranks[r]), 0) << Output(label);
    EXPECT_NE(Output(label).find("faulty: 2 \n"), std::string::npos) << Output(label);
  }
}

// The TCP transport alone, on a connected pair of loopback sockets (no GCS): milliseconds.
class CollectiveTcpTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string address;
    auto listen_fd = Listen("127.0.0.1", &address);
    ASSERT_TRUE(listen_fd.ok()) << listen_fd.status();
    int port = std::stoi(address.substr(address.rfind(':') + 1));
    a_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(a_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    for (int i = 0; i < 1000 && b_ < 0; ++i) {
      b_ = ::accept(*listen_fd, nullptr, nullptr);
      if (b_ < 0) absl::SleepFor(absl::Milliseconds(1));
    }
    ::close(*listen_fd);
    ASSERT_GE(b_, 0);
    for (int fd : {a_, b_}) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  }
  void TearDown() override {
    if (a_ >= 0) ::close(a_);
    if (b_ >= 0) ::close(b_);
  }
  int a_ = -1, b_ = -1;
};

TEST_F(CollectiveTcpTransportTest, FullDuplexExchangeMovesBothWays) {
  const size_t n = 8 << 20;  // more than the socket buffers hold: both sides must interleave
  std::vector<uint8_t> a_out(n, 1), a_in(n), b_out(n, 2), b_in(n);
  AbortSignal abort_a, abort_b;
  absl::Time deadline = absl::Now() + absl::Seconds(10);
  absl::Status b_status;
  std::thread b([&] {
    std::vector<Transfer> sends = {{b_, b_out.data(), n, "a"}};
    std::vector<Transfer> recvs = {{b_, b_in.data(), n, "a"}};
    b_status = ExchangeAll(sends, recvs, abort_b, deadline);
  });
  size_t progress = 0;
  std::vector<Transfer> sends = {{a_, a_out.data(), n, "b"}};
  std::vector<Transfer> recvs = {{a_, a_in.data(), n, "b", [&](size_t got) { progress = got; }}};
  EXPECT_TRUE(ExchangeAll(sends, recvs, abort_a, deadline).ok());
  b.join();
  EXPECT_TRUE(b_status.ok()) << b_status;
  EXPECT_EQ(progress, n);
  EXPECT_EQ(a_in[0], 2);
  EXPECT_EQ(a_in[n - 1], 2);
  EXPECT_EQ(b_in[n - 1], 1);
}

TEST_F(CollectiveTcpTransportTest, AbortEndsAWaitOnASilentPeerAtOnce) {
  std::vector<uint8_t> in(1 << 20);
  AbortSignal abort;
  std::thread aborter([&] {
    absl::SleepFor(absl::Milliseconds(50));
    abort.Raise();
  });
  absl::Time t0 = absl::Now();
  std::vector<Transfer> none;
  std::vector<Transfer> recvs = {{a_, in.data(), in.size(), "the silent peer"}};
  absl::Status s = ExchangeAll(none, recvs, abort, absl::Now() + absl::Seconds(30));
  absl::Duration took = absl::Now() - t0;
  aborter.join();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_NE(s.message().find("aborted"), std::string::npos) << s;
  EXPECT_LT(took, absl::Milliseconds(50 + 500)) << took;
  // An aborted signal stays raised: the next wait fails at once.
  EXPECT_FALSE(ExchangeAll(none, recvs, abort, absl::Now() + absl::Seconds(30)).ok());
}

TEST_F(CollectiveTcpTransportTest, DeadlineAndClosedPeerAreNamed) {
  std::vector<uint8_t> in(16);
  AbortSignal abort;
  std::vector<Transfer> none;
  std::vector<Transfer> recvs = {{a_, in.data(), in.size(), "peer rank 7"}};
  absl::Status s = ExchangeAll(none, recvs, abort, absl::Now() + absl::Milliseconds(30));
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_NE(s.message().find("receiving from peer rank 7"), std::string::npos) << s;
  ::close(b_);
  b_ = -1;
  s = ExchangeAll(none, recvs, abort, absl::Now() + absl::Seconds(30));
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_NE(s.message().find("connection to peer rank 7 closed"), std::string::npos) << s;
}

// NCCL refuses two ranks of one communicator on one device, so each rank gets a GPU of its
// own: one GPU runs the world-size-1 test, the multi-rank ones need a GPU per rank.
TEST_F(CollectiveTest, NcclWorldOfOneOnAGpu) {
  if (!NcclBuilt()) GTEST_SKIP() << "this build has no NCCL backend";
  if (NcclDeviceCount() == 0) GTEST_SKIP() << "no GPU here";
  auto rank = Rank("g0", "nccl1", "", {{"NCCL_SOCKET_IFNAME", "lo"}}, "nccl", 0);
  EXPECT_EQ(ExitCode(rank), 0) << Output("g0");
  EXPECT_NE(Output("g0").find("allreduce and broadcast OK"), std::string::npos) << Output("g0");
  EXPECT_NE(Output("g0").find("abort ended the next call"), std::string::npos) << Output("g0");
}

TEST_F(CollectiveTest, NcclAllreduceAndShrinkAcrossGpus) {
  if (!NcclBuilt()) GTEST_SKIP() << "this build has no NCCL backend";
  int gpus = NcclDeviceCount();
  if (gpus < 2) {
    GTEST_SKIP() << "the multi-rank NCCL test needs a GPU per rank (2 or more); this machine "
                 << "has " << gpus;
  }
  // 3 ranks shrink to 2 where there are 3 GPUs; 2 shrink to 1 where there are 2.
  int world = std::min(gpus, 3);
  std::vector<std::pair<std::string, std::string>> env = {{"NCCL_SOCKET_IFNAME", "lo"}};
  std::vector<testing::ChildProcess> ranks;
  for (int r = 0; r < world; ++r) {
    std::string plan = absl::StrCat("1:", world, ":", r);
    if (r < world - 1) absl::StrAppend(&plan, ",2:", world - 1, ":", r);
    ranks.push_back(Rank(absl::StrCat("n", r), "nccl", plan, env, "nccl", r));
  }
  for (int r = 0; r < world; ++r) {
    std::string label = absl::StrCat("n", r);
    EXPECT_EQ(ExitCode(ranks[r]), 0) << Output(label);
  }
}

}  // namespace
}  // namespace phalanx::collective
