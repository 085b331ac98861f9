// Pre-auth limits on every daemon, with real processes: a client without the cluster token
// sends a 1 GiB request to the GCS, a node manager and a worker. Each refuses it with
// UNAUTHENTICATED from the call's headers, before reading its body, and its peak RSS
// (VmHWM) stays flat. A client with the token gets RESOURCE_EXHAUSTED past the size limit
// (gRPC 1.51 checks the size once the message is in, so a peer that has the token can still
// make a daemon buffer one oversized message: the limit is for mistakes, the token for
// strangers).
#include <grpcpp/generic/generic_stub.h>
#include <sys/mman.h>

#include <future>

#include "absl/strings/match.h"
#include "base/process.h"
#include "base/rpc.h"
#include "client/gcs_client.h"
#include "gtest/gtest.h"
#include "tests/actors/test_actors.h"
#include "tests/testing/cluster_test.h"

namespace phalanx {
namespace {

using testing::ChildProcess;
using testing::ClusterTest;
using testing::Counter;

constexpr int64_t kRequestBytes = int64_t{1} << 30;

// Sends `bytes` zeros as one request to `method` at `address` (with `token` if set) and
// returns the call's status. The buffer is untouched anonymous memory, so the client itself
// stays small.
grpc::Status SendHugeRequest(const std::string& address, const std::string& method,
                             const std::string& token, int64_t bytes = kRequestBytes) {
  size_t size = static_cast<size_t>(bytes);
  void* buffer =
      ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (buffer == MAP_FAILED) return grpc::Status(grpc::StatusCode::INTERNAL, "mmap failed");
  grpc::Slice slice(buffer, size, [](void* p, size_t n) { ::munmap(p, n); });
  grpc::ByteBuffer request(&slice, 1), reply;
  grpc::GenericStub stub(rpc::MakeChannel(address));
  grpc::ClientContext context;
  rpc::PrepareContext(&context, token, absl::Seconds(60));
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, method, grpc::StubOptions(), &request, &reply,
                 [&done](grpc::Status status) { done.set_value(std::move(status)); });
  return done.get_future().get();
}

struct Daemon {
  std::string name;
  pid_t pid;
  std::string address;
  std::string method;  // a unary method of its service
  int64_t limit;       // its max receive message size
};

class PreAuthTest : public ClusterTest {
 protected:
  std::vector<Daemon> Daemons() {
    std::vector<Daemon> out;
    out.push_back({"GCS", gcs_->pid(), gcs_->address(), "/phalanx.rpc.GcsService/KvPut",
                   rpc::kMaxControlMessageBytes});
    auto nodes = client_->GetAllNodes();
    EXPECT_TRUE(nodes.ok()) << nodes.status();
    if (nodes.ok() && !nodes->empty()) {
      out.push_back({"node manager", nodes->front().pid(), nodes->front().address(),
                     "/phalanx.rpc.NodeManagerService/StartActor", rpc::kMaxControlMessageBytes});
    }
    auto actor = client_->GetActor(actor_.id().Hex());
    EXPECT_TRUE(actor.ok()) << actor.status();
    if (actor.ok()) {
      out.push_back({"worker", actor->pid(), actor->worker_address(),
                     "/phalanx.rpc.WorkerService/GetStats", rpc::kMaxCallMessageBytes});
    }
    EXPECT_EQ(out.size(), 3u);
    return out;
  }

  void SetUp() override {
    ClusterTest::SetUp();
    node_ = testing::StartNode(*gcs_, "preauth-node");
    auto actor = Actor<Counter>().Remote(0);
    ASSERT_TRUE(actor.ok()) << actor.status();
    actor_ = *actor;
    ASSERT_TRUE(Get(actor_.Task(&Counter::Add).Remote(1)).ok());
  }

  void TearDown() override {
    ClusterTest::TearDown();
    node_.Terminate();
  }

  ChildProcess node_;
  ActorHandle<Counter> actor_;
};

TEST_F(PreAuthTest, A1GiBRequestWithoutTheTokenIsRefusedUnreadByEveryDaemon) {
  for (const Daemon& d : Daemons()) {
    int64_t before = ProcessPeakRssBytes(d.pid);
    ASSERT_GT(before, 0) << d.name;
    absl::Time start = absl::Now();
    grpc::Status status = SendHugeRequest(d.address, d.method, "");
    int64_t after = ProcessPeakRssBytes(d.pid);
    std::cout << d.name << ": " << status.error_code() << " '" << status.error_message() << "' in "
              << absl::Now() - start << ", peak RSS " << (before >> 20) << " -> " << (after >> 20)
              << " MiB\n";
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << d.name;
    EXPECT_TRUE(absl::StrContains(status.error_message(), "missing cluster token")) << d.name;
    EXPECT_LT(after - before, 16 << 20) << d.name << ": the request's body was read";
    // A wrong token is refused the same way.
    status = SendHugeRequest(d.address, d.method, "not-the-token");
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << d.name;
    EXPECT_LT(ProcessPeakRssBytes(d.pid) - before, 16 << 20) << d.name;
  }
}

TEST_F(PreAuthTest, AnAuthenticatedRequestOverTheLimitIsRefusedAndTheDaemonServesOn) {
  for (const Daemon& d : Daemons()) {
    grpc::Status status = SendHugeRequest(d.address, d.method, gcs_->token(), d.limit + 1024);
    std::cout << d.name << ": " << status.error_code() << " '" << status.error_message() << "'\n";
    EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << d.name;
    EXPECT_TRUE(absl::StrContains(status.error_message(), std::to_string(d.limit))) << d.name;
  }
  // Each daemon still serves.
  EXPECT_TRUE(client_->GetAllNodes().ok());
  EXPECT_TRUE(Get(actor_.Task(&Counter::Add).Remote(1)).ok());
}

}  // namespace
}  // namespace phalanx
