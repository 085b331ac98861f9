// The GCS's gRPC handlers (rpc::GcsService) over its managers: each RPC checks its request,
// asks the manager that owns the table, and answers. Internal to gcs/: GcsServer
// (gcs_server.cc) makes one and serves it.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/time/time.h"
#include "base/proto/gcs.grpc.pb.h"
#include "base/tls.h"
#include "gcs/actor_manager.h"
#include "gcs/job_history.h"
#include "gcs/job_manager.h"
#include "gcs/kv_manager.h"
#include "gcs/node_manager.h"
#include "gcs/placement_group_manager.h"
#include "gcs/publisher.h"
#include "gcs/record_table.h"

namespace phalanx::gcs {

inline constexpr char kGcsVersion[] = "0.1.0";

class GcsServiceHandlers : public rpc::GcsService::Service {
 public:
  // Ends the streams it serves (subscriptions, log follows) at the GCS's shutdown.
  virtual void Stop() = 0;
  // The head's HTTP port, for GetClusterInfo; set before the server starts.
  virtual void SetDashboard(int port, bool https) = 0;
};

// `ca`: the cluster CA's key and certificate (IssueCertificate signs with it); nullopt for
// a --no-tls cluster. Every pointer outlives the handlers.
class DriverLeases;

std::unique_ptr<GcsServiceHandlers> NewGcsService(
    std::string cluster_id, GcsPublisher* publisher, GcsNodeManager* nodes, GcsKvManager* kv,
    GcsActorManager* actors, RecordTable<rpc::JobInfo>* jobs,
    GcsPlacementGroupManager* placement_groups, GcsJobManager* job_manager, JobHistory* history,
    absl::Duration node_timeout, std::optional<rpc::KeyAndCert> ca,
    DriverLeases* drivers = nullptr);

}  // namespace phalanx::gcs
