#include "node/node_manager.h"

#include <unistd.h>

#include <atomic>
#include <deque>
#include <map>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/describe.h"
#include "base/files.h"
#include "base/http_server.h"
#include "base/ids.h"
#include "base/logging.h"
#include "base/node_lease.h"
#include "base/process.h"
#include "base/proto/node.grpc.pb.h"
#include "base/rpc.h"
#include "base/session.h"
#include "base/system.h"
#include "base/tls.h"
#include "client/gcs_client.h"
#include "node/log_forwarder.h"
#include "node/node_metrics.h"
#include "node/object_store.h"
#include "node/snapshot_service.h"
#include "node/snapshot_store.h"
#include "node/worker_pool.h"

namespace phalanx::node {
namespace {

using rpc::ToProto;

// A bundle RESERVE is refused once its call has less than this left (the GCS gives each call
// --node-call-timeout-ms, 10 s by default and never under 3 s). A GCS that gave up on a call
// cancels what it asked, in a later call that can be applied first; a reserve applied after that
// cancel would hold the bundle for good. The margin covers the time the cancel takes to be sent and
// to arrive.
constexpr absl::Duration kReserveDeadlineMargin = absl::Seconds(2);

// How often the workers' new output is read and sent to the GCS for their drivers
// (LogForwarder): a line printed in a task reaches its driver about this much later.
constexpr absl::Duration kLogForwardPeriod = absl::Milliseconds(100);

// The GCS KV namespace where Python processes register as borrowers of values
// (python/phalanx/_objects.py, BORROW_NS).
constexpr char kBorrowNamespace[] = "phalanx-borrows";

// "Counter" of "__main__.Counter"; "" for the task worker (its lines name the pid alone).
std::string LogLabel(const std::string& class_name) {
  if (absl::EndsWith(class_name, ".TaskWorker")) return "";
  size_t dot = class_name.rfind('.');
  return dot == std::string::npos ? class_name : class_name.substr(dot + 1);
}

class NodeManagerImpl;

class NodeServiceImpl final : public rpc::NodeManagerService::Service {
 public:
  explicit NodeServiceImpl(NodeManagerImpl* node) : node_(node) {}

  grpc::Status GetNodeStats(grpc::ServerContext* context, const rpc::GetNodeStatsRequest*,
                            rpc::GetNodeStatsReply* reply) override;
  grpc::Status ShutdownNode(grpc::ServerContext* context, const rpc::ShutdownNodeRequest* request,
                            rpc::ShutdownNodeReply*) override;
  grpc::Status StartActor(grpc::ServerContext* context, const rpc::StartActorRequest* request,
                          rpc::StartActorReply* reply) override;
  grpc::Status KillActor(grpc::ServerContext* context, const rpc::KillActorRequest* request,
                         rpc::KillActorReply* reply) override;
  grpc::Status WorkerStarted(grpc::ServerContext* context, const rpc::WorkerStartedRequest* request,
                             rpc::WorkerStartedReply* reply) override;
  grpc::Status WorkerReady(grpc::ServerContext* context, const rpc::WorkerReadyRequest* request,
                           rpc::WorkerReadyReply*) override;
  grpc::Status ListWorkers(grpc::ServerContext* context, const rpc::ListWorkersRequest*,
                           rpc::ListWorkersReply* reply) override;
  grpc::Status UpdateBundles(grpc::ServerContext* context, const rpc::UpdateBundlesRequest* request,
                             rpc::UpdateBundlesReply* reply) override;
  grpc::Status Vouch(grpc::ServerContext* context, const rpc::VouchRequest* request,
                     rpc::VouchReply* reply) override;
  grpc::Status ObjectsHeld(grpc::ServerContext* context, const rpc::ObjectsHeldRequest* request,
                           rpc::ObjectsHeldReply* reply) override;
  grpc::Status ProcessesAlive(grpc::ServerContext* context,
                              const rpc::ProcessesAliveRequest* request,
                              rpc::ProcessesAliveReply* reply) override;
  grpc::Status ReadObject(grpc::ServerContext* context, const rpc::ReadObjectRequest* request,
                          grpc::ServerWriter<rpc::ObjectChunk>* writer) override;
  // Elastic jobs' snapshots (node/snapshot_service.h).
  grpc::Status PutSnapshot(grpc::ServerContext*, grpc::ServerReader<rpc::SnapshotChunk>* reader,
                           rpc::PutSnapshotReply* reply) override;
  grpc::Status ListSnapshots(grpc::ServerContext*, const rpc::ListSnapshotsRequest* request,
                             rpc::ListSnapshotsReply* reply) override;
  grpc::Status ReadSnapshot(grpc::ServerContext*, const rpc::ReadSnapshotRequest* request,
                            grpc::ServerWriter<rpc::ObjectChunk>* writer) override;

 private:
  NodeManagerImpl* node_;
};

class NodeManagerImpl final : public NodeManager {
 public:
  explicit NodeManagerImpl(const NodeManagerOptions& options)
      : options_(options),
        node_id_(options.node_id.empty() ? NewId() : options.node_id),
        store_dir_(ObjectStoreDir(node_id_)),
        store_capacity_(options.object_store_bytes > 0
                            ? options.object_store_bytes
                            : DefaultObjectStoreBytes(options.object_store_dir)) {}

  ~NodeManagerImpl() override { Shutdown("node manager destroyed"); }

  absl::Status Init() {
    // Worker logs: the session's, or (a node started by hand) a directory of its own under the
    // session root, which is checked like any session's.
    std::string log_dir = options_.session_dir + "/logs";
    if (options_.session_dir.empty()) {
      auto root = EnsureSessionRoot();
      if (!root.ok()) return root.status();
      log_dir = absl::StrCat(*root, "/node-", ShortId(node_id_), "/logs");
    }
    // Values past the object store's capacity: beside the logs, on disk.
    spill_dir_ =
        absl::StrCat(log_dir.substr(0, log_dir.rfind('/')), "/spilled-objects-", ShortId(node_id_));
    service_ = std::make_unique<NodeServiceImpl>(this);
    auto started = rpc::StartServer(absl::StrCat("0.0.0.0:", options_.port), {service_.get()},
                                    {options_.token, rpc::kMaxControlMessageBytes});
    if (!started.ok()) return started.status();
    server_ = std::move(started->server);
    port_ = started->port;

    gcs::GcsClientOptions client_options;
    client_options.address = options_.gcs_address;
    client_options.token = options_.token;
    client_options.rpc_timeout = std::max(options_.heartbeat_period * 4, absl::Seconds(2));
    auto gcs = gcs::GcsClient::Connect(client_options, options_.register_timeout);
    if (!gcs.ok()) return gcs.status();
    gcs_ = std::move(*gcs);
    // Pages that node managers killed before they could remove theirs left behind.
    if (int stale = RemoveStaleLeases(); stale > 0) {
      spdlog::info("removed {} stale node lease page(s) from /dev/shm", stale);
    }
    // The node's lease (see NodeLease), until the GCS says its node timeout at registration.
    // One file per node manager instance (node ids repeat across clusters, e.g. in tests).
    std::string lease_path = absl::StrCat("/dev/shm/phalanx-node-", node_id_, "-", getpid(), "-",
                                          ShortId(NewId()), ".lease");
    auto lease = NodeLease::Create(lease_path, options_.fence_timeout > absl::ZeroDuration()
                                                   ? options_.fence_timeout
                                                   : absl::Seconds(3));
    if (!lease.ok()) return lease.status();
    lease_ = std::move(*lease);
    // The pool exists before the node registers: the GCS may send it actors at once.
    WorkerPoolOptions pool;
    pool.node_id = node_id_;
    pool.node_address = absl::StrCat(options_.node_ip, ":", port_);
    pool.gcs_address = options_.gcs_address;
    pool.token = options_.token;
    pool.tls_dir = options_.tls_dir;
    pool.node_lease_path = lease_path;
    pool.log_dir = log_dir;
    pool.node_threshold = options_.memory_usage_threshold;
    pool.memory_enforcement = options_.memory_enforcement;
    pool.fork_server = options_.fork_server;
    pool.sample_period = options_.memory_sample_period;
    pool.debug_record_delay = options_.debug_record_delay;
    pool_ = std::make_unique<WorkerPool>(
        pool, [this](const WorkerRecord& w, const rpc::DeathCause& cause) {
          metrics_.Ended(w, cause);
          rpc::ReportActorStateRequest report;
          report.set_actor_id(w.actor_id);
          report.set_attempt(w.attempt);
          report.set_node_id(node_id_);
          report.set_state(rpc::ACTOR_DEAD);
          report.set_pid(w.pid);
          *report.mutable_cause() = cause;
          Report(std::move(report));
          absl::MutexLock lock(&mu_);
          specs_.erase({w.actor_id, w.attempt});
        });
    if (auto s = StartMetrics(); !s.ok()) return s;
    if (auto s = Register(); !s.ok()) return s;
    if (int stale = RemoveStaleObjectStores(store_dir_); stale > 0) {
      spdlog::info("removed {} object store(s) of node managers that are gone", stale);
    }
    const std::string data_dir = options_.object_store_dir.empty()
                                     ? ""
                                     : ObjectStoreDataDir(options_.object_store_dir, node_id_);
    if (auto s = CreateObjectStore(store_dir_, spill_dir_, store_capacity_, data_dir); !s.ok()) {
      return s;
    }
    heartbeat_thread_ = std::thread([this] { HeartbeatLoop(); });
    fence_thread_ = std::thread([this] { FenceLoop(); });
    store_thread_ = std::thread([this] { StoreLoop(); });
    report_thread_ = std::thread([this] { ReportLoop(); });
    log_thread_ = std::thread([this] { LogLoop(); });
    spdlog::info("node {} serving at {}:{} with {}", node_id_, options_.node_ip, port_,
                 options_.resources.ToString());
    return absl::OkStatus();
  }

  const std::string& node_id() const override { return node_id_; }
  std::vector<std::string> store_dirs() const { return {store_dir_, spill_dir_}; }
  const std::string& store_dir() const { return store_dir_; }
  void AddSentBytes(int64_t n) { sent_bytes_.fetch_add(n); }
  int port() const override { return port_; }

  // How long since this node last heard from the GCS (VouchReply).
  absl::Duration GcsSilence() const {
    return absl::Nanoseconds(NodeLease::NowNs() - gcs_heard_ns_.load());
  }

  bool Wait() override {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&stop_requested_));
    return declared_dead_;
  }

  void Shutdown(const std::string& reason) override {
    {
      absl::MutexLock lock(&mu_);
      if (shut_down_) return;
      shut_down_ = true;
      stop_requested_ = true;
    }
    if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
    if (fence_thread_.joinable()) fence_thread_.join();
    if (report_thread_.joinable()) report_thread_.join();
    if (store_thread_.joinable()) store_thread_.join();
    if (log_thread_.joinable()) log_thread_.join();
    // Workers go with their node: the GCS learns it from the node's death (NODE_DIED).
    if (pool_) pool_->Shutdown();
    bool dead;
    {
      absl::MutexLock lock(&mu_);
      dead = declared_dead_;
    }
    if (gcs_ && !dead) {
      if (auto s = gcs_->UnregisterNode(node_id_, reason); !s.ok()) {
        spdlog::warn("could not tell the GCS that this node stops: {}", s);
      }
    }
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    if (metrics_http_) metrics_http_->Stop();
    // The objects of the workers, which are gone; a driver still running keeps its own.
    RemoveAll(absl::StrCat(store_dir_, "/", kObjectCacheDir)).IgnoreError();
    // Snapshots live as long as their node's store (a node that stops takes them along; its
    // jobs restore from a peer's copy or from disk).
    RemoveAll(absl::StrCat(store_dir_, "/", kSnapshotDir)).IgnoreError();
    for (const std::string& dir : {store_dir_, spill_dir_}) {
      SweepObjectStore(dir);
      for (const char* file : {"/.capacity", "/.spill", "/.node"}) ::unlink((dir + file).c_str());
      RemoveObjectStoreDir(dir);
    }
    spdlog::info("node {} stopped: {}", node_id_, reason);
  }

  void RequestStop() {
    absl::MutexLock lock(&mu_);
    stop_requested_ = true;
  }

  absl::StatusOr<int> StartActor(const rpc::StartActorRequest& request) {
    {
      absl::MutexLock lock(&mu_);
      if (stop_requested_) return absl::UnavailableError("node is stopping");
      specs_[{request.actor().actor_id(), request.attempt()}] = request.actor();
    }
    metrics_.Starting(request.actor().actor_id(), request.attempt(), absl::Now());
    auto pid = pool_->Start(request.actor(), request.attempt());
    if (!pid.ok()) {
      // It never ran: report it dead now (the GCS decides about restarts).
      rpc::ReportActorStateRequest report;
      report.set_actor_id(request.actor().actor_id());
      report.set_attempt(request.attempt());
      report.set_node_id(node_id_);
      report.set_state(rpc::ACTOR_DEAD);
      report.mutable_cause()->set_kind(rpc::DeathCause::CREATION_FAILED);
      report.mutable_cause()->set_message(std::string(pid.status().message()));
      Report(std::move(report));
      return pid.status();
    }
    return *pid;
  }

  bool KillActor(const rpc::KillActorRequest& request) {
    return pool_->Kill(request.actor_id(), request.attempt(), request.cause());
  }

  absl::Status WorkerStarted(const rpc::WorkerStartedRequest& request,
                             rpc::WorkerStartedReply* reply) {
    if (request.actor_id().empty()) {
      // A prestarted worker: wait (a while) for an actor to be placed on it.
      auto assignment = pool_->WaitForAssignment(request.pid(), absl::Seconds(20));
      if (absl::IsDeadlineExceeded(assignment.status())) {
        reply->set_keep_waiting(true);
        return absl::OkStatus();
      }
      if (!assignment.ok()) return assignment.status();
      *reply->mutable_actor() = assignment->actor;
      reply->set_attempt(assignment->attempt);
      reply->set_log_path(assignment->log_path);
      return absl::OkStatus();
    }
    absl::MutexLock lock(&mu_);
    auto it = specs_.find({request.actor_id(), request.attempt()});
    if (it == specs_.end()) {
      return absl::NotFoundError(absl::StrCat("this node runs no attempt ", request.attempt(),
                                              " of actor ", request.actor_id()));
    }
    *reply->mutable_actor() = it->second;
    reply->set_attempt(request.attempt());
    return absl::OkStatus();
  }

  void WorkerReady(const rpc::WorkerReadyRequest& request) {
    pool_->MarkReady(request.actor_id(), request.attempt(), request.address(), request.error());
    metrics_.Ready(request.actor_id(), request.attempt(), absl::Now());
    if (!request.error().empty()) return;  // the worker exits; its death says CREATION_FAILED
    int pid = 0;
    for (const auto& w : pool_->List()) {
      if (w.actor_id == request.actor_id() && w.attempt == request.attempt()) pid = w.pid;
    }
    rpc::ReportActorStateRequest report;
    report.set_actor_id(request.actor_id());
    report.set_attempt(request.attempt());
    report.set_node_id(node_id_);
    report.set_state(rpc::ACTOR_ALIVE);
    report.set_worker_address(request.address());
    report.set_pid(pid);
    Report(std::move(report));
  }

  void ListWorkers(rpc::ListWorkersReply* reply) {
    for (const auto& w : pool_->List()) {
      auto* info = reply->add_workers();
      info->set_actor_id(w.actor_id);
      info->set_attempt(w.attempt);
      info->set_pid(w.pid);
      info->set_rss_bytes(w.last_rss);
      info->set_peak_rss_bytes(w.peak_rss);
      info->set_memory_limit_bytes(w.memory_limit);
      info->set_address(w.address);
    }
  }

  // Bundle ledger: what placement groups reserved on this node.
  // `deadline`: the call's (InfiniteFuture when it has none).
  absl::Status ReserveBundle(const rpc::BundleRequest& request, absl::Time deadline) {
    if (options_.debug_reserve_delay > absl::ZeroDuration()) {
      absl::SleepFor(options_.debug_reserve_delay);
    }
    absl::MutexLock lock(&mu_);
    if (absl::Now() > deadline - kReserveDeadlineMargin) {
      return absl::DeadlineExceededError(
          absl::StrCat("node ", ShortId(node_id_), " reached bundle ", request.bundle_index(),
                       " of placement group ", request.placement_group_id(),
                       " too late: the GCS gives up on the call and cancels it"));
    }
    auto key = std::make_pair(request.placement_group_id(), request.bundle_index());
    if (bundles_.count(key)) return absl::OkStatus();  // held already: idempotent
    Resources free = options_.resources;
    for (const auto& [k, held] : bundles_) free -= rpc::FromProto(held);
    Resources need = rpc::FromProto(request.resources());
    if (!free.Contains(need)) {
      return absl::ResourceExhaustedError(absl::StrCat("node ", ShortId(node_id_),
                                                       " cannot reserve ", need.ToString(),
                                                       " (free ", free.ToString(), ")"));
    }
    bundles_[key] = request.resources();
    return absl::OkStatus();
  }

  void CancelBundle(const rpc::BundleRequest& request) {
    absl::MutexLock lock(&mu_);
    bundles_.erase({request.placement_group_id(), request.bundle_index()});
  }

  // What the ledger holds, as reported when registering.
  std::vector<rpc::HeldBundle> HeldBundles() {
    absl::MutexLock lock(&mu_);
    std::vector<rpc::HeldBundle> out;
    for (const auto& [key, held] : bundles_) {
      rpc::HeldBundle& b = out.emplace_back();
      b.set_placement_group_id(key.first);
      b.set_bundle_index(key.second);
    }
    return out;
  }

  void FillStats(rpc::GetNodeStatsReply* reply) {
    reply->set_node_id(node_id_);
    *reply->mutable_total() = ToProto(options_.resources);
    Resources free = options_.resources;
    {
      absl::MutexLock lock(&mu_);
      for (const auto& [key, held] : bundles_) {
        free -= rpc::FromProto(held);
        auto* out = reply->add_bundles();
        out->set_placement_group_id(key.first);
        out->set_bundle_index(key.second);
        *out->mutable_resources() = held;
      }
    }
    *reply->mutable_available() = ToProto(free);
    reply->set_memory_total_bytes(TotalMemoryBytes());
    reply->set_memory_used_bytes(UsedMemoryBytes());
    reply->set_num_workers(static_cast<int>(pool_->List().size()));
  }

 private:
  absl::Status StartMetrics() {
    if (options_.metrics_port < 0) return absl::OkStatus();
    rpc::HttpServerOptions http;
    http.port = options_.metrics_port;
    http.token = options_.token;
    http.num_threads = 2;
    if (!options_.tls_dir.empty()) {
      http.cert_file = absl::StrCat(options_.tls_dir, "/", rpc::kCertFile);
      http.key_file = absl::StrCat(options_.tls_dir, "/", rpc::kKeyFile);
    }
    rpc::HttpRoute route;
    route.pattern = "/metrics";
    route.handler = [this](const rpc::HttpRequest&) {
      rpc::HttpResponse r;
      r.content_type = "text/plain; version=0.0.4; charset=utf-8";
      r.body = metrics_.Page(node_id_, pool_->List(), StoreUsage());
      return r;
    };
    auto started = rpc::HttpServer::Start(http, {route});
    if (!started.ok()) {
      return absl::Status(started.status().code(),
                          absl::StrCat("node metrics: ", started.status().message(),
                                       " (--metrics-port; -1 serves none)"));
    }
    metrics_http_ = std::move(*started);
    return absl::OkStatus();
  }

  rpc::NodeInfo Info() const {
    rpc::NodeInfo node;
    node.set_node_id(node_id_);
    node.set_address(absl::StrCat(options_.node_ip, ":", port_));
    node.set_hostname(Hostname());
    *node.mutable_total() = ToProto(options_.resources);
    *node.mutable_available() = ToProto(options_.resources);
    node.set_start_time_ms(start_time_ms_);
    node.set_pid(getpid());
    node.set_is_head(options_.is_head);
    node.set_session_dir(options_.session_dir);
    if (metrics_http_)
      node.set_metrics_address(absl::StrCat(options_.node_ip, ":", metrics_http_->port()));
    for (const auto& [k, v] : options_.labels) (*node.mutable_labels())[k] = v;
    return node;
  }

  // Queues a state report for the GCS; reports are sent in order and retried until the GCS
  // takes them (it may be restarting).
  void Report(rpc::ReportActorStateRequest report) {
    absl::MutexLock lock(&mu_);
    reports_.push_back(std::move(report));
  }

  // Sends what the workers printed to the GCS (channel LOGS) for the drivers of their jobs,
  // every kLogForwardPeriod. Lines are dropped, not held, while the GCS cannot take them.
  void LogLoop() {
    LogForwarder forwarder(options_.node_ip);
    while (true) {
      {
        absl::MutexLock lock(&mu_);
        if (mu_.AwaitWithTimeout(absl::Condition(&stop_requested_), kLogForwardPeriod)) return;
      }
      std::vector<LogForwarder::Source> sources;
      for (const WorkerRecord& w : pool_->List()) {
        if (w.idle || w.job_id.empty()) continue;
        sources.push_back({w.log_path, w.pid, w.job_id, w.actor_id, LogLabel(w.class_name)});
      }
      std::vector<rpc::LogLines> batches = forwarder.Collect(sources);
      if (batches.empty()) continue;
      rpc::PublishLogsRequest request;
      for (auto& b : batches) *request.add_logs() = std::move(b);
      if (auto s = gcs_->PublishLogs(request); !s.ok()) {
        spdlog::debug("the workers' output was not forwarded: {}", s.message());
      }
    }
  }

  // Removes the objects of owners that died (and their borrow keys), and measures what the
  // store holds (for the heartbeats and /metrics), every kObjectSweepPeriod.
  void StoreLoop() {
    while (true) {
      {
        absl::MutexLock lock(&mu_);
        if (mu_.AwaitWithTimeout(absl::Condition(&stop_requested_), kObjectSweepPeriod)) return;
      }
      std::vector<std::string> dead;
      int removed = SweepObjectStore(store_dir_, &dead) + SweepObjectStore(spill_dir_, &dead);
      if (removed > 0) spdlog::info("removed the objects of {} owner(s) that died", removed);
      ForgetBorrowsOf(dead);
      RemoveSnapshotsOfEndedJobs(store_dir_, *gcs_);
      CheckObjectCache();
      rpc::ObjectStoreUsage usage = MeasureObjectStore(store_dir_, spill_dir_, store_capacity_);
      if (MakeRoom(usage)) usage = MeasureObjectStore(store_dir_, spill_dir_, store_capacity_);
      usage.set_sent_bytes(sent_bytes_.load());
      absl::MutexLock lock(&store_mu_);
      store_usage_ = std::move(usage);
    }
  }

  // Deletes the borrow keys (the Python object store's, _objects.BORROW_NS: "<node
  // id>:<owner>/<object>/<borrower>") of the values of owners of this node that died: their
  // borrowers may have died too, and no one else would delete them.
  void ForgetBorrowsOf(const std::vector<std::string>& owners) {
    for (const std::string& owner : std::set<std::string>(owners.begin(), owners.end())) {
      auto s = gcs_->KvDelete(kBorrowNamespace, absl::StrCat(node_id_, ":", owner, "/"),
                              /*by_prefix=*/true);
      if (!s.ok()) spdlog::debug("the borrow keys of {} stay: {}", owner, s.status().message());
    }
  }

  // Drops the cached copies (object_store.h) of values their holder no longer holds, and all
  // of a dead node's.
  void CheckObjectCache() {
    std::vector<CachedObject> cache = ListObjectCache(store_dir_);
    if (cache.empty()) return;
    auto nodes = gcs_->GetAllNodes();
    if (!nodes.ok()) return;                   // not known now: kept until the next sweep
    std::map<std::string, std::string> alive;  // node id -> address
    for (const rpc::NodeInfo& n : *nodes) {
      if (n.state() == rpc::NODE_ALIVE) alive[n.node_id()] = n.address();
    }
    std::map<std::string, std::vector<CachedObject>> by_node;
    for (CachedObject& c : cache) by_node[c.node].push_back(std::move(c));
    int dropped = 0;
    for (auto& [node, copies] : by_node) {
      auto it = alive.find(node);
      if (it == alive.end()) {
        dropped += static_cast<int>(copies.size());
        RemoveAll(absl::StrCat(store_dir_, "/", kObjectCacheDir, "/", node)).IgnoreError();
        continue;
      }
      rpc::ObjectsHeldRequest request;
      for (const CachedObject& c : copies) {
        rpc::ObjectKey* key = request.add_objects();
        key->set_owner(c.owner);
        key->set_object_id(c.object_id);
      }
      auto& stub = cache_stubs_[it->second];
      if (!stub) stub = rpc::NodeManagerService::NewStub(rpc::MakeChannel(it->second));
      grpc::ClientContext context;
      rpc::PrepareContext(&context, options_.token, kObjectCacheCheckTimeout,
                          /*wait_for_ready=*/false);
      rpc::ObjectsHeldReply reply;
      grpc::Status status = stub->ObjectsHeld(&context, request, &reply);
      for (size_t i = 0; i < copies.size(); ++i) {
        bool answered = status.ok() && reply.held_size() == static_cast<int>(copies.size());
        if (answered && !reply.held(static_cast<int>(i))) {
          ::unlink(copies[i].path.c_str());
          ++dropped;
        }
      }
    }
    if (dropped > 0) spdlog::debug("object cache: dropped {} copies no longer held", dropped);
  }

  // Past kObjectSpillThreshold of the capacity: drops cached copies, then moves the oldest
  // values to disk, until the store is under it again. Whether anything changed.
  bool MakeRoom(const rpc::ObjectStoreUsage& usage) {
    const auto target =
        static_cast<int64_t>(kObjectSpillThreshold * static_cast<double>(store_capacity_));
    if (usage.used_bytes() <= target) return false;
    int64_t trimmed = TrimObjectCache(ListObjectCache(store_dir_), usage.used_bytes(), target);
    int64_t spilled = 0;
    if (usage.used_bytes() - trimmed > target) {
      spilled = SpillOldestObjects(store_dir_, spill_dir_, usage.used_bytes() - trimmed, target);
    }
    if (trimmed > 0 || spilled > 0) {
      spdlog::info(
          "object store past {:.0f}% of its capacity: dropped {} bytes of cached copies, "
          "moved {} bytes of values to disk",
          100 * kObjectSpillThreshold, trimmed, spilled);
    }
    return trimmed > 0 || spilled > 0;
  }

  rpc::ObjectStoreUsage StoreUsage() const {
    absl::MutexLock lock(&store_mu_);
    return store_usage_;
  }

  void ReportLoop() {
    absl::Duration backoff = absl::Milliseconds(50);
    while (true) {
      rpc::ReportActorStateRequest report;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](NodeManagerImpl* n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(n->mu_) {
              return n->stop_requested_ || !n->reports_.empty();
            },
            this));
        if (stop_requested_) return;
        report = reports_.front();
      }
      auto reply = gcs_->ReportActorState(report);
      if (!reply.ok()) {
        spdlog::warn("reporting actor {} to the GCS failed ({}); retrying",
                     ShortId(report.actor_id()), reply.status());
        absl::SleepFor(backoff);
        backoff = std::min(backoff * 2, absl::Seconds(1));
        continue;
      }
      backoff = absl::Milliseconds(50);
      if (reply->stale()) {
        rpc::DeathCause cause;
        cause.set_kind(rpc::DeathCause::KILLED_BY_USER);
        cause.set_message("the GCS no longer wants this attempt");
        pool_->Kill(report.actor_id(), report.attempt(), cause);
      }
      absl::MutexLock lock(&mu_);
      reports_.pop_front();
    }
  }

  absl::Status Register() {
    int64_t sent = NodeLease::NowNs();
    auto reply = gcs_->RegisterNode(Info(), HeldBundles());
    if (!reply.ok()) return reply.status();
    incarnation_ = reply->incarnation();
    if (options_.fence_timeout <= absl::ZeroDuration() && reply->node_timeout_ms() > 0) {
      lease_->SetTimeout(absl::Milliseconds(reply->node_timeout_ms()));
    }
    partition_timeout_ns_ = reply->partition_timeout_ms() * 1000000;
    lease_->Renew(sent);
    HeardGcs(sent);
    return absl::OkStatus();
  }

  // Ends this node's membership: its workers are killed (the cluster has given them up, or
  // may have), and Wait() returns true so that the daemon registers again as a new node.
  void Fence(const std::string& why) {
    {
      absl::MutexLock lock(&mu_);
      if (fenced_) return;
      fenced_ = true;
    }
    size_t workers = pool_->List().size();
    pool_->Shutdown();
    spdlog::error("node {}: {}; killed its {} worker(s) (fenced)", ShortId(node_id_), why, workers);
    absl::MutexLock lock(&mu_);
    declared_dead_ = true;
    stop_requested_ = true;
  }

  void HeardGcs(int64_t seen_ns) {
    int64_t prev = gcs_heard_ns_.load();
    while (prev < seen_ns && !gcs_heard_ns_.compare_exchange_weak(prev, seen_ns)) {
    }
  }

  // How many of the cluster's alive nodes (as the GCS last listed them) vouch that they are
  // cut off from the GCS too, this node included, out of how many votes (HeartbeatReply.voters).
  struct Vouches {
    size_t vouched = 0;
    size_t voters = 0;
  };

  // Asks every other member, all at once (each call bounded by `timeout`), how long it has
  // not heard from the GCS; a member silent for over half the node timeout vouches.
  Vouches AskPeersToVouch(absl::Duration timeout) {
    std::vector<std::string> peers;
    Vouches out;
    std::string self = absl::StrCat(options_.node_ip, ":", port_);
    {
      absl::MutexLock lock(&members_mu_);
      out.voters = members_.size();
      for (const auto& a : members_) {
        if (a != self) peers.push_back(a);
      }
      out.voters = std::max<size_t>(out.voters, voters_);
    }
    if (out.voters == 0) return out;  // no membership heard yet: nobody to ask
    out.vouched = 1;
    struct Count {
      absl::Mutex mu;
      size_t pending ABSL_GUARDED_BY(mu) = 0;
      size_t vouched ABSL_GUARDED_BY(mu) = 0;
    };
    struct Call {
      grpc::ClientContext context;
      rpc::VouchRequest request;
      rpc::VouchReply reply;
    };
    auto count = std::make_shared<Count>();
    {
      absl::MutexLock lock(&count->mu);
      count->pending = peers.size();
    }
    int64_t silent_ms = absl::ToInt64Milliseconds(lease_->timeout() / 2);
    for (const auto& peer : peers) {
      auto& stub = peer_stubs_[peer];
      if (!stub) stub = rpc::NodeManagerService::NewStub(rpc::MakeChannel(peer));
      auto call = std::make_shared<Call>();
      rpc::PrepareContext(&call->context, options_.token, timeout, /*wait_for_ready=*/false);
      call->request.set_node_id(node_id_);
      stub->async()->Vouch(&call->context, &call->request, &call->reply,
                           [count, call, silent_ms](grpc::Status status) {
                             absl::MutexLock lock(&count->mu);
                             if (status.ok() && call->reply.gcs_silent_ms() > silent_ms) {
                               ++count->vouched;
                             }
                             --count->pending;
                           });
    }
    absl::MutexLock lock(&count->mu);
    count->mu.AwaitWithTimeout(
        absl::Condition(
            +[](Count* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->mu) { return c->pending == 0; },
            count.get()),
        timeout + absl::Milliseconds(100));
    out.vouched += count->vouched;
    return out;
  }

  // A node cut off from the GCS for its node timeout may have been declared dead, and its
  // actors started elsewhere: it stops them before they can meet their replacements. Unless
  // a majority of the cluster's nodes, this one included, vouch that they are cut off from
  // the GCS too: then the GCS's side is the minority, and it declares no node dead on a
  // silent majority before the partition timeout (gcs/node_manager.h). Such a node keeps its
  // workers, renewing its lease on the vouches, for up to the partition timeout.
  void FenceLoop() {
    absl::Duration period = std::min(absl::Milliseconds(100), options_.heartbeat_period / 2);
    Vouches last;
    bool holding = false;
    while (true) {
      {
        absl::MutexLock lock(&mu_);
        mu_.AwaitWithTimeout(absl::Condition(&stop_requested_), period);
        if (stop_requested_) return;
      }
      absl::Duration partition_timeout = absl::Nanoseconds(partition_timeout_ns_.load());
      // No heartbeat taken for half the lease (the GCS may be stopped, restarting or slow: a
      // heartbeat call can wait for it longer than the lease): a stopped or restarting GCS is
      // not a partition, and while its host completes a TCP handshake this node keeps its
      // lease. Only a host cut off from the GCS's host lets it run out.
      if (lease_->Age() > lease_->timeout() / 2) {
        absl::Duration probe = std::min(lease_->timeout() / 4, absl::Milliseconds(500));
        int64_t asked = NodeLease::NowNs();
        if (HostAnswers(options_.gcs_address, probe)) {
          lease_->Renew(asked);
          HeardGcs(asked);
          if (!RescueHeartbeat(probe)) return;  // fenced
        } else if (GcsSilence() < partition_timeout) {
          asked = NodeLease::NowNs();
          last = AskPeersToVouch(probe);
          if (last.vouched * 2 > last.voters) {
            lease_->Renew(asked);
            if (!holding) {
              spdlog::warn(
                  "node {}: cut off from the GCS for {}, with {} of the cluster's {} votes (a "
                  "majority of its nodes, all cut off): keeping its workers for up to the "
                  "partition timeout ({})",
                  ShortId(node_id_), absl::FormatDuration(GcsSilence()), last.vouched, last.voters,
                  absl::FormatDuration(partition_timeout));
            }
            holding = true;
          }
        }
      }
      if (holding && GcsSilence() < lease_->timeout() / 2) {
        spdlog::info("node {}: the GCS answers again", ShortId(node_id_));
        holding = false;
      }
      if (lease_->Expired()) {
        std::string why =
            GcsSilence() >= partition_timeout && holding
                ? absl::StrCat("past the partition timeout (",
                               absl::FormatDuration(partition_timeout),
                               ") that a majority's vouching covers")
                : absl::StrCat(last.vouched, " of the cluster's ", last.voters,
                               " votes (this node's, and its peers' cut off with it) are not a "
                               "majority");
        Fence(absl::StrCat("cut off from the GCS for ", absl::FormatDuration(GcsSilence()),
                           " (node timeout ", absl::FormatDuration(lease_->timeout()), "); ", why,
                           ": the cluster may have declared this node dead"));
        return;
      }
    }
  }

  // The GCS's host answers a handshake, yet no heartbeat was answered for half the node
  // timeout. The heartbeat in flight may wait behind a packet lost while the host's link was
  // down: TCP sends it again after waits that double (0.2, 0.4, 0.8 s...), so it can arrive a
  // second after the link is back, with every call behind it on that connection, and the GCS
  // then declares a node dead whose host is up (a link down for about a second at a time did
  // so). One heartbeat goes now on a connection of its own, bounded by `bound`; a GCS that is
  // stopped or slow costs a connection per half node timeout. False when the GCS answered
  // that it declared this node dead (it is fenced).
  bool RescueHeartbeat(absl::Duration bound) {
    gcs::GcsClientOptions o;
    o.address = options_.gcs_address;
    o.token = options_.token;
    o.rpc_timeout = bound;
    int64_t sent = NodeLease::NowNs();
    auto reply = gcs::GcsClient::Open(o)->Heartbeat(NewHeartbeat());
    if (!reply.ok()) return true;
    if (reply->declared_dead()) {
      Fence("the GCS declared this node dead (it missed its heartbeats)");
      return false;
    }
    spdlog::info(
        "node {}: a heartbeat on a new connection reached the GCS (none was answered for half "
        "the node timeout)",
        ShortId(node_id_));
    lease_->Renew(sent);
    HeardGcs(sent);
    return true;
  }

  rpc::HeartbeatRequest NewHeartbeat() {
    rpc::HeartbeatRequest request;
    request.set_node_id(node_id_);
    *request.mutable_object_store() = StoreUsage();
    // Workers whose process cannot run now: the GCS and the elastic controller tell a stopped
    // process from one a busy machine delays by this.
    for (const auto& w : pool_->List()) {
      char state = ProcessState(w.pid);
      if (state != '\0' && StateCannotRun(state)) {
        auto* stopped = request.add_stopped_workers();
        stopped->set_actor_id(w.actor_id);
        stopped->set_attempt(w.attempt);
        stopped->set_state(std::string(1, state));
      }
    }
    request.set_reports_stopped(true);
    absl::MutexLock lock(&members_mu_);
    request.set_members_version(members_version_);
    return request;
  }

  void HeartbeatLoop() {
    absl::Time last_ok = absl::Now();
    while (true) {
      {
        absl::MutexLock lock(&mu_);
        mu_.AwaitWithTimeout(absl::Condition(&stop_requested_), options_.heartbeat_period);
        if (stop_requested_) return;
      }
      int64_t sent = NodeLease::NowNs();
      auto reply = gcs_->Heartbeat(NewHeartbeat());
      if (!reply.ok()) {
        if (absl::Now() - last_ok > absl::Seconds(5)) {
          spdlog::warn("no heartbeat reached the GCS for {}: {}",
                       absl::FormatDuration(absl::Now() - last_ok), reply.status());
        }
        continue;
      }
      last_ok = absl::Now();
      if (reply->declared_dead()) {
        Fence("the GCS declared this node dead (it missed its heartbeats)");
        return;
      }
      lease_->Renew(sent);
      HeardGcs(sent);
      if (reply->members_size() > 0) {
        absl::MutexLock lock(&members_mu_);
        members_.assign(reply->members().begin(), reply->members().end());
        members_version_ = reply->members_version();
      }
      if (reply->voters() > 0) {
        absl::MutexLock lock(&members_mu_);
        voters_ = reply->voters();
      }
      if (reply->unknown_node() || reply->incarnation() != incarnation_) {
        spdlog::info("GCS incarnation {} (was {}): registering again", reply->incarnation(),
                     incarnation_);
        if (auto s = Register(); !s.ok()) spdlog::warn("re-registering failed: {}", s);
      }
    }
  }

  const NodeManagerOptions options_;
  const std::string node_id_;
  const std::string store_dir_;  // the object store (object_store.h)
  const int64_t store_capacity_;
  std::string spill_dir_;  // set in Init, before any thread reads it
  mutable absl::Mutex store_mu_;
  rpc::ObjectStoreUsage store_usage_ ABSL_GUARDED_BY(store_mu_);
  const int64_t start_time_ms_ = NowMs();
  std::unique_ptr<NodeServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::unique_ptr<gcs::GcsClient> gcs_;
  std::string incarnation_;  // touched by Init, then the heartbeat thread only
  std::unique_ptr<NodeLease> lease_;
  // When this node last heard from the GCS (NodeLease's clock): a heartbeat taken, or the GCS's
  // host answering a handshake. Unlike the lease, vouches do not renew it.
  std::atomic<int64_t> gcs_heard_ns_{NodeLease::NowNs()};
  std::atomic<int64_t> partition_timeout_ns_{0};  // told at registration
  // The alive nodes' addresses as the GCS last sent them (HeartbeatReply.members).
  absl::Mutex members_mu_;
  std::vector<std::string> members_ ABSL_GUARDED_BY(members_mu_);
  int64_t members_version_ ABSL_GUARDED_BY(members_mu_) = 0;
  size_t voters_ ABSL_GUARDED_BY(members_mu_) = 0;  // HeartbeatReply.voters
  // The fence thread's clients to the other members (AskPeersToVouch).
  std::map<std::string, std::unique_ptr<rpc::NodeManagerService::Stub>> peer_stubs_;
  // The store thread's clients to the nodes whose values are cached here (CheckObjectCache).
  std::map<std::string, std::unique_ptr<rpc::NodeManagerService::Stub>> cache_stubs_;
  std::atomic<int64_t> sent_bytes_{0};  // ObjectStoreUsage.sent_bytes
  std::thread heartbeat_thread_;
  std::thread fence_thread_;
  std::thread report_thread_;
  std::thread store_thread_;
  std::thread log_thread_;
  NodeMetrics metrics_;  // before the pool: the pool's exit callback counts into it
  std::unique_ptr<WorkerPool> pool_;
  std::unique_ptr<rpc::HttpServer> metrics_http_;  // after the pool: it reads the pool

  absl::Mutex mu_;
  bool stop_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool declared_dead_ ABSL_GUARDED_BY(mu_) = false;
  bool fenced_ ABSL_GUARDED_BY(mu_) = false;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<rpc::ReportActorStateRequest> reports_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<std::string, int>, rpc::ActorInfo> specs_ ABSL_GUARDED_BY(mu_);
  // (placement group id, bundle index) → the resources it holds.
  std::map<std::pair<std::string, int>, rpc::ResourceSet> bundles_ ABSL_GUARDED_BY(mu_);
};

grpc::Status NodeServiceImpl::GetNodeStats(grpc::ServerContext*, const rpc::GetNodeStatsRequest*,
                                           rpc::GetNodeStatsReply* reply) {
  node_->FillStats(reply);
  return grpc::Status::OK;
}

grpc::Status NodeServiceImpl::ShutdownNode(grpc::ServerContext*,
                                           const rpc::ShutdownNodeRequest* request,
                                           rpc::ShutdownNodeReply*) {
  spdlog::info("shutdown requested: {}", request->reason());
  node_->RequestStop();
  return grpc::Status::OK;
}

grpc::Status NodeServiceImpl::StartActor(grpc::ServerContext*,
                                         const rpc::StartActorRequest* request,
                                         rpc::StartActorReply* reply) {
  auto pid = node_->StartActor(*request);
  if (!pid.ok()) return rpc::ToGrpc(pid.status());
  reply->set_pid(*pid);
  return grpc::Status::OK;
}

grpc::Status NodeServiceImpl::KillActor(grpc::ServerContext*, const rpc::KillActorRequest* request,
                                        rpc::KillActorReply* reply) {
  reply->set_found(node_->KillActor(*request));
  return grpc::Status::OK;
}

grpc::Status NodeServiceImpl::WorkerStarted(grpc::ServerContext*,
                                            const rpc::WorkerStartedRequest* request,
                                            rpc::WorkerStartedReply* reply) {
  return rpc::ToGrpc(node_->WorkerStarted(*request, reply));
}

grpc::Status NodeServiceImpl::WorkerReady(grpc::ServerContext*,
                                          const rpc::WorkerReadyRequest* request,
                                          rpc::WorkerReadyReply*) {
  node_->WorkerReady(*request);
  return grpc::Status::OK;
}

grpc::Status NodeServiceImpl::ListWorkers(grpc::ServerContext*, const rpc::ListWorkersRequest*,
                                          rpc::ListWorkersReply* reply) {
  node_->ListWorkers(reply);
  return grpc::Status::OK;
}

grpc::Status NodeServiceImpl::UpdateBundles(grpc::ServerContext* context,
                                            const rpc::UpdateBundlesRequest* request,
                                            rpc::UpdateBundlesReply* reply) {
  absl::Time deadline = context->deadline() == std::chrono::system_clock::time_point::max()
                            ? absl::InfiniteFuture()
                            : absl::FromChrono(context->deadline());
  for (const rpc::BundleOp& op : request->ops()) {
    absl::Status s;
    switch (op.kind()) {
      case rpc::BundleOp::RESERVE:
        s = node_->ReserveBundle(op.bundle(), deadline);
        break;
      case rpc::BundleOp::CANCEL:
        node_->CancelBundle(op.bundle());
        break;
      default:
        s = absl::InvalidArgumentError(absl::StrCat("unknown bundle op ", op.kind()));
    }
    rpc::BundleOpResult* result = reply->add_results();
    result->set_code(static_cast<int>(s.code()));
    result->set_message(std::string(s.message()));
  }
  return grpc::Status::OK;
}

grpc::Status NodeServiceImpl::ReadObject(grpc::ServerContext*,
                                         const rpc::ReadObjectRequest* request,
                                         grpc::ServerWriter<rpc::ObjectChunk>* writer) {
  absl::Status status = StreamObject(node_->store_dirs(), request->owner(), request->object_id(),
                                     request->probe(), [&](absl::string_view chunk, int64_t size) {
                                       rpc::ObjectChunk out;
                                       out.set_data(chunk.data(), chunk.size());
                                       out.set_size(size);
                                       if (!writer->Write(out)) return false;
                                       node_->AddSentBytes(static_cast<int64_t>(chunk.size()));
                                       return true;
                                     });
  return rpc::ToGrpc(status);
}

grpc::Status NodeServiceImpl::PutSnapshot(grpc::ServerContext*,
                                          grpc::ServerReader<rpc::SnapshotChunk>* reader,
                                          rpc::PutSnapshotReply* reply) {
  return ReceiveSnapshot(node_->store_dir(), reader, reply);
}

grpc::Status NodeServiceImpl::ListSnapshots(grpc::ServerContext*,
                                            const rpc::ListSnapshotsRequest* request,
                                            rpc::ListSnapshotsReply* reply) {
  return DescribeSnapshots(node_->store_dir(), *request, reply);
}

grpc::Status NodeServiceImpl::ReadSnapshot(grpc::ServerContext*,
                                           const rpc::ReadSnapshotRequest* request,
                                           grpc::ServerWriter<rpc::ObjectChunk>* writer) {
  int64_t sent = 0;
  grpc::Status status = SendSnapshot(node_->store_dir(), *request, writer, &sent);
  node_->AddSentBytes(sent);
  return status;
}

grpc::Status NodeServiceImpl::ObjectsHeld(grpc::ServerContext*,
                                          const rpc::ObjectsHeldRequest* request,
                                          rpc::ObjectsHeldReply* reply) {
  const std::vector<std::string> dirs = node_->store_dirs();
  for (const rpc::ObjectKey& key : request->objects()) {
    reply->add_held(ObjectHeld(dirs, key.owner(), key.object_id()));
  }
  return grpc::Status::OK;
}

grpc::Status NodeServiceImpl::ProcessesAlive(grpc::ServerContext*,
                                             const rpc::ProcessesAliveRequest* request,
                                             rpc::ProcessesAliveReply* reply) {
  for (const std::string& process : request->processes()) {
    reply->add_alive(ObjectOwnerAlive(process));
  }
  return grpc::Status::OK;
}

grpc::Status NodeServiceImpl::Vouch(grpc::ServerContext*, const rpc::VouchRequest*,
                                    rpc::VouchReply* reply) {
  reply->set_node_id(node_->node_id());
  reply->set_gcs_silent_ms(absl::ToInt64Milliseconds(node_->GcsSilence()));
  return grpc::Status::OK;
}

}  // namespace

absl::StatusOr<std::unique_ptr<NodeManager>> NodeManager::Start(const NodeManagerOptions& options) {
  auto node = std::make_unique<NodeManagerImpl>(options);
  if (auto s = node->Init(); !s.ok()) return s;
  return std::unique_ptr<NodeManager>(std::move(node));
}

}  // namespace phalanx::node
