// Fuzzes every unary GCS RPC's request handling: the input's first byte picks a method, the
// rest is parsed (ParseFromArray) into that method's request proto, and the request is sent
// with the cluster token to a real GcsServer (in-memory store, elastic job kind, no session
// dir) in this process over loopback gRPC, so the handler, its validation and the manager
// behind it run as they do in phalanx-gcs.
//
// State accumulates across inputs (registered nodes, actors, jobs, KV entries), as it does in
// a running GCS; every kRestartEvery inputs the server is replaced by a fresh one so that
// memory stays bounded.
//
// Requests are sent as parsed, except where the GCS would reach outside this process or wait:
//   - RegisterNode: the node's address is 127.0.0.1:1 (refused at once), so actor and bundle
//     RPCs to "nodes" fail fast instead of resolving hostnames from the input;
//   - WaitPlacementGroupReady: timeout_ms is at most 10;
//   - UpdateJob: runner_pid is 0 and a log_path is /dev/null. The GCS keeps those fields
//     from its own record whatever UpdateJob says (GcsJobManager::Update), so this only
//     guards the fuzzing machine should that ever regress: StopJob signals a job's runner
//     pid and JobLogs streams its log_path;
//   - JobLogs: not followed, and at most 4 chunks are read.
// Not fuzzed here: Subscribe (a stream that ends only when cancelled), and UploadWorkingDir
// (a client stream that a GCS without a session dir refuses at once; the writer behind it is
// fuzzed by upload_fuzzer.cc).
//
// IssueCertificate runs against a real CA (made once, in a temp dir): the public key PEM
// from the input goes through OpenSSL's parser and, when it parses, gets signed.
//
// Property besides "no crash, no sanitizer report": every call returns within kCallTimeout.
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "base/proto/gcs.grpc.pb.h"
#include "base/rpc.h"
#include "base/tls.h"
#include "elastic/job_kind.h"
#include "gcs/gcs_server.h"
#include "spdlog/spdlog.h"

namespace {

using phalanx::rpc::GcsService;

constexpr char kToken[] = "fuzz-token";
constexpr int kRestartEvery = 20000;
constexpr auto kCallTimeout = std::chrono::seconds(10);

struct Target {
  std::unique_ptr<phalanx::gcs::GcsServer> server;
  std::unique_ptr<GcsService::Stub> stub;
};

Target& Get() {
  static Target target;
  return target;
}

// A temp dir holding a CA for IssueCertificate (the server itself serves plaintext: this
// process never calls rpc::UseTls).
std::string CaDir() {
  static const std::string dir = [] {
    char path[] = "/tmp/phalanx-fuzz-ca-XXXXXX";
    if (::mkdtemp(path) == nullptr) std::abort();
    if (!phalanx::rpc::MakeClusterTlsDir(path, "fuzz", {"127.0.0.1"}).ok()) std::abort();
    return std::string(path);
  }();
  return dir;
}

void Start() {
  Target& t = Get();
  if (t.server) t.server->Shutdown();
  t.stub.reset();
  t.server.reset();
  phalanx::gcs::GcsServerOptions options;
  options.listen_host = "127.0.0.1";
  options.port = 0;
  options.in_memory_store = true;
  options.token = kToken;
  options.redis.cluster_id = "fuzz";
  options.tls_dir = CaDir();
  options.job_kinds.push_back(std::make_shared<phalanx::elastic::ElasticJobKind>());
  auto server = phalanx::gcs::GcsServer::Start(options);
  if (!server.ok()) {
    std::fprintf(stderr, "gcs_requests fuzzer: %s\n", server.status().ToString().c_str());
    std::abort();
  }
  t.server = std::move(*server);
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(t.server->port()),
                                     grpc::InsecureChannelCredentials());
  t.stub = GcsService::NewStub(channel);
}

void Prepare(grpc::ClientContext* context) {
  context->AddMetadata(phalanx::rpc::kTokenHeader, kToken);
  context->set_deadline(std::chrono::system_clock::now() + kCallTimeout);
}

void Check(const char* method, const grpc::Status& status) {
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    std::fprintf(stderr, "gcs_requests fuzzer: %s did not return within %lld s\n", method,
                 static_cast<long long>(kCallTimeout.count()));
    std::abort();
  }
}

// Request adjustments (see the top of the file); the default sends the request as parsed.
template <typename Request>
void Adjust(Request*) {}
template <>
void Adjust(phalanx::rpc::RegisterNodeRequest* r) {
  r->mutable_node()->set_address("127.0.0.1:1");
}
template <>
void Adjust(phalanx::rpc::UpdateJobRequest* r) {
  r->mutable_job()->set_runner_pid(0);
  if (!r->job().log_path().empty()) r->mutable_job()->set_log_path("/dev/null");
}
template <>
void Adjust(phalanx::rpc::WaitPlacementGroupReadyRequest* r) {
  r->set_timeout_ms(std::min<int64_t>(r->timeout_ms(), 10));
}

template <typename Request, typename Reply>
using Unary = grpc::Status (GcsService::Stub::*)(grpc::ClientContext*, const Request&, Reply*);

template <typename Request, typename Reply>
void Call(const char* name, Unary<Request, Reply> method, const uint8_t* data, size_t size) {
  Request request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return;
  Adjust(&request);
  grpc::ClientContext context;
  Prepare(&context);
  Reply reply;
  Check(name, (Get().stub.get()->*method)(&context, request, &reply));
}

void CallJobLogs(const uint8_t* data, size_t size) {
  phalanx::rpc::JobLogsRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return;
  request.set_follow(false);
  grpc::ClientContext context;
  Prepare(&context);
  auto reader = Get().stub->JobLogs(&context, request);
  phalanx::rpc::JobLogsChunk chunk;
  for (int i = 0; i < 4 && reader->Read(&chunk); ++i) {
  }
  context.TryCancel();
  Check("JobLogs", reader->Finish());
}

#define PHX_UNARY(Method, Request, Reply)                                                       \
  [](const uint8_t* d, size_t n) {                                                              \
    Call<phalanx::rpc::Request, phalanx::rpc::Reply>(#Method, &GcsService::Stub::Method, d, n); \
  }

using Handler = void (*)(const uint8_t*, size_t);
// Append only: the corpus's first bytes index this table (fuzz/make_gcs_seeds.sh).
const Handler kHandlers[] = {
    PHX_UNARY(GetClusterInfo, GetClusterInfoRequest, GetClusterInfoReply),        // 0
    PHX_UNARY(RegisterNode, RegisterNodeRequest, RegisterNodeReply),              // 1
    PHX_UNARY(Heartbeat, HeartbeatRequest, HeartbeatReply),                       // 2
    PHX_UNARY(UnregisterNode, UnregisterNodeRequest, UnregisterNodeReply),        // 3
    PHX_UNARY(GetAllNodes, GetAllNodesRequest, GetAllNodesReply),                 // 4
    PHX_UNARY(KvPut, KvPutRequest, KvPutReply),                                   // 5
    PHX_UNARY(KvGet, KvGetRequest, KvGetReply),                                   // 6
    PHX_UNARY(KvDelete, KvDeleteRequest, KvDeleteReply),                          // 7
    PHX_UNARY(KvList, KvListRequest, KvListReply),                                // 8
    PHX_UNARY(CreateActor, CreateActorRequest, CreateActorReply),                 // 9
    PHX_UNARY(ReportActorState, ReportActorStateRequest, ReportActorStateReply),  // 10
    PHX_UNARY(KillActor, KillActorViaGcsRequest, KillActorViaGcsReply),           // 11
    PHX_UNARY(RenewActorLease, RenewActorLeaseRequest, RenewActorLeaseReply),     // 12
    PHX_UNARY(UpdateActor, UpdateActorRequest, UpdateActorReply),                 // 13
    PHX_UNARY(GetActor, GetActorRequest, GetActorReply),                          // 14
    PHX_UNARY(ListActors, ListActorsRequest, ListActorsReply),                    // 15
    PHX_UNARY(UpdateJob, UpdateJobRequest, UpdateJobReply),                       // 16
    PHX_UNARY(GetJob, GetJobRequest, GetJobReply),                                // 17
    PHX_UNARY(ListJobs, ListJobsRequest, ListJobsReply),                          // 18
    PHX_UNARY(SubmitJob, SubmitJobRequest, SubmitJobReply),                       // 19
    PHX_UNARY(StopJob, StopJobRequest, StopJobReply),                             // 20
    PHX_UNARY(ScaleJob, ScaleJobRequest, ScaleJobReply),                          // 21
    CallJobLogs,                                                                  // 22
    PHX_UNARY(ReportJob, ReportJobRequest, ReportJobReply),                       // 23
    PHX_UNARY(CreatePlacementGroup, CreatePlacementGroupRequest,
              CreatePlacementGroupReply),  // 24
    PHX_UNARY(RemovePlacementGroup, RemovePlacementGroupRequest,
              RemovePlacementGroupReply),  // 25
    PHX_UNARY(ReleasePlacementGroupBundle, ReleasePlacementGroupBundleRequest,
              ReleasePlacementGroupBundleReply),                                     // 26
    PHX_UNARY(GetPlacementGroup, GetPlacementGroupRequest, GetPlacementGroupReply),  // 27
    PHX_UNARY(WaitPlacementGroupReady, WaitPlacementGroupReadyRequest,
              WaitPlacementGroupReadyReply),                                               // 28
    PHX_UNARY(ListPlacementGroups, ListPlacementGroupsRequest, ListPlacementGroupsReply),  // 29
    PHX_UNARY(IssueCertificate, IssueCertificateRequest, IssueCertificateReply),           // 30
};
constexpr size_t kNumHandlers = sizeof(kHandlers) / sizeof(kHandlers[0]);

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // The GCS logs every refused request; at fuzzing rates that is all the output there is.
  spdlog::set_level(spdlog::level::off);
  Start();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static int runs = 0;
  if (size == 0) return 0;
  if (++runs % kRestartEvery == 0) Start();
  kHandlers[data[0] % kNumHandlers](data + 1, size - 1);
  return 0;
}
