#include "runtime/node/node_manager.h"

#include <unistd.h>

#include <atomic>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gcs/gcs_client.h"
#include "runtime/common/ids.h"
#include "runtime/common/logging.h"
#include "runtime/common/system.h"
#include "runtime/proto/node.grpc.pb.h"
#include "runtime/rpc/rpc.h"

namespace phalanx::node {
namespace {

rpc::ResourceSet ToProto(const Resources& r) {
  rpc::ResourceSet out;
  for (const auto& [name, amount] : r.ToMap()) (*out.mutable_amounts())[name] = amount;
  return out;
}

class NodeManagerImpl;

class NodeServiceImpl final : public rpc::NodeManagerService::Service {
 public:
  NodeServiceImpl(NodeManagerImpl* node, std::string token)
      : node_(node), token_(std::move(token)) {}

  grpc::Status GetNodeStats(grpc::ServerContext* context, const rpc::GetNodeStatsRequest*,
                            rpc::GetNodeStatsReply* reply) override;
  grpc::Status ShutdownNode(grpc::ServerContext* context, const rpc::ShutdownNodeRequest* request,
                            rpc::ShutdownNodeReply*) override;

 private:
  NodeManagerImpl* node_;
  const std::string token_;
};

class NodeManagerImpl final : public NodeManager {
 public:
  explicit NodeManagerImpl(const NodeManagerOptions& options)
      : options_(options), node_id_(options.node_id.empty() ? NewId() : options.node_id) {}

  ~NodeManagerImpl() override { Shutdown("node manager destroyed"); }

  absl::Status Init() {
    service_ = std::make_unique<NodeServiceImpl>(this, options_.token);
    auto started = rpc::StartServer(absl::StrCat("0.0.0.0:", options_.port), {service_.get()});
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
    if (auto s = Register(); !s.ok()) return s;
    heartbeat_thread_ = std::thread([this] { HeartbeatLoop(); });
    spdlog::info("node {} serving at {}:{} with {}", node_id_, options_.node_ip, port_,
                 options_.resources.ToString());
    return absl::OkStatus();
  }

  const std::string& node_id() const override { return node_id_; }
  int port() const override { return port_; }

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
    spdlog::info("node {} stopped: {}", node_id_, reason);
  }

  void RequestStop() {
    absl::MutexLock lock(&mu_);
    stop_requested_ = true;
  }

  void FillStats(rpc::GetNodeStatsReply* reply) {
    reply->set_node_id(node_id_);
    *reply->mutable_total() = ToProto(options_.resources);
    *reply->mutable_available() = ToProto(options_.resources);
    reply->set_memory_total_bytes(TotalMemoryBytes());
    reply->set_memory_used_bytes(UsedMemoryBytes());
    reply->set_num_workers(0);
  }

 private:
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
    for (const auto& [k, v] : options_.labels) (*node.mutable_labels())[k] = v;
    return node;
  }

  absl::Status Register() {
    auto reply = gcs_->RegisterNode(Info());
    if (!reply.ok()) return reply.status();
    incarnation_ = reply->incarnation();
    return absl::OkStatus();
  }

  void HeartbeatLoop() {
    absl::Time last_ok = absl::Now();
    while (true) {
      {
        absl::MutexLock lock(&mu_);
        mu_.AwaitWithTimeout(absl::Condition(&stop_requested_), options_.heartbeat_period);
        if (stop_requested_) return;
      }
      rpc::HeartbeatRequest request;
      request.set_node_id(node_id_);
      auto reply = gcs_->Heartbeat(request);
      if (!reply.ok()) {
        if (absl::Now() - last_ok > absl::Seconds(5)) {
          spdlog::warn("no heartbeat reached the GCS for {}: {}",
                       absl::FormatDuration(absl::Now() - last_ok), reply.status());
        }
        continue;
      }
      last_ok = absl::Now();
      if (reply->declared_dead()) {
        spdlog::error("the GCS declared this node dead (it missed its heartbeats); exiting");
        absl::MutexLock lock(&mu_);
        declared_dead_ = true;
        stop_requested_ = true;
        return;
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
  const int64_t start_time_ms_ = NowMs();
  std::unique_ptr<NodeServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::unique_ptr<gcs::GcsClient> gcs_;
  std::string incarnation_;  // touched by Init, then the heartbeat thread only
  std::thread heartbeat_thread_;

  absl::Mutex mu_;
  bool stop_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool declared_dead_ ABSL_GUARDED_BY(mu_) = false;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

grpc::Status NodeServiceImpl::GetNodeStats(grpc::ServerContext* context,
                                           const rpc::GetNodeStatsRequest*,
                                           rpc::GetNodeStatsReply* reply) {
  if (auto auth = rpc::CheckToken(*context, token_); !auth.ok()) return auth;
  node_->FillStats(reply);
  return grpc::Status::OK;
}

grpc::Status NodeServiceImpl::ShutdownNode(grpc::ServerContext* context,
                                           const rpc::ShutdownNodeRequest* request,
                                           rpc::ShutdownNodeReply*) {
  if (auto auth = rpc::CheckToken(*context, token_); !auth.ok()) return auth;
  spdlog::info("shutdown requested: {}", request->reason());
  node_->RequestStop();
  return grpc::Status::OK;
}

}  // namespace

absl::StatusOr<std::unique_ptr<NodeManager>> NodeManager::Start(const NodeManagerOptions& options) {
  auto node = std::make_unique<NodeManagerImpl>(options);
  if (auto s = node->Init(); !s.ok()) return s;
  return std::unique_ptr<NodeManager>(std::move(node));
}

}  // namespace phalanx::node
