// GcsServer: the control plane. Owns the store, the publisher and one manager per table, and
// serves GcsService over gRPC. Start() loads every table from the store, so a GCS restarted
// on the same Redis carries on where the last one stopped. Thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gcs/job_kind.h"
#include "gcs/store.h"

namespace phalanx::gcs {

struct GcsServerOptions {
  std::string listen_host = "0.0.0.0";
  int port = 6380;  // 0: pick a free one
  RedisOptions redis;
  bool in_memory_store = false;  // unit tests only: nothing survives a restart
  std::string token;             // every RPC must carry it
  // A node silent this long is declared dead. One silent for a quarter of it has its node
  // manager's port knocked on, and is declared dead at once if its host refuses the
  // connection (gcs/node_manager.h).
  absl::Duration node_timeout = absl::Seconds(3);
  absl::Duration restart_grace = absl::Seconds(10);
  // When more than half the alive nodes are silent at once, they are declared dead only
  // after this much longer (gcs/node_manager.h); nodes cut off together with a majority keep
  // their workers as long.
  absl::Duration partition_timeout = absl::Seconds(60);
  // A driver silent for the node timeout whose port refuses connections is gone, and what it
  // made goes at once; one silent this long goes whatever its port says (gcs/driver_leases.h).
  absl::Duration driver_lease_timeout = absl::Seconds(60);
  absl::Duration health_check_period = absl::Milliseconds(100);
  // The bound of each call the GCS makes to a node manager (start or kill an actor, reserve a
  // bundle). A start that runs out is sent again (a node starts each attempt once, however
  // often it is asked), so on a busy node this only delays the start.
  absl::Duration node_call_timeout = absl::Seconds(10);
  // Where jobs keep their working dirs and logs (the head's session dir); empty: no jobs.
  std::string session_dir;
  int64_t max_working_dir_bytes = 100ll << 20;
  // The job kinds this GCS launches besides drivers (gcs/job_kind.h); the program that runs
  // the GCS picks them (cli/gcs_main.cc: elastic training).
  std::vector<std::shared_ptr<const JobKind>> job_kinds;
  // The cluster's TLS dir (rpc/tls.h) when it holds the CA's key: IssueCertificate signs
  // joining machines' keys with it. Empty: IssueCertificate fails (a --no-tls cluster).
  std::string tls_dir;
  // The head's HTTP port (gcs/dashboard.h: /metrics, /api, the dashboard), on listen_host.
  // -1: none; 0: any free one. HTTPS with the machine's certificate from tls_dir when TLS is
  // on. `phalanx start --head` serves it on 8265, like Ray's dashboard.
  int dashboard_port = -1;
  // When dashboard_port is taken: serve on any free port (with a warning) instead of failing.
  // For the default port; a port the user asked for fails.
  bool dashboard_port_fallback = false;
  // Where the Prometheus file_sd targets of the cluster are kept current (empty: the session
  // dir's metrics/targets.json when there is a session dir).
  std::string scrape_targets_path;
  // SIGTERM's bound: phalanx-gcs exits this long after it, whatever Redis does.
  absl::Duration shutdown_timeout = absl::Seconds(5);
};

class GcsServer {
 public:
  // Connects to the store, checks it belongs to this cluster and token, loads every table and
  // starts serving. Errors name what failed (Redis unreachable, token mismatch, port in use).
  static absl::StatusOr<std::unique_ptr<GcsServer>> Start(const GcsServerOptions& options);

  virtual ~GcsServer() = default;
  GcsServer(const GcsServer&) = delete;
  GcsServer& operator=(const GcsServer&) = delete;

  virtual int port() const = 0;
  // The HTTP port (dashboard_port), or 0 when it serves none.
  virtual int dashboard_port() const = 0;
  virtual const std::string& cluster_id() const = 0;
  virtual const std::string& incarnation() const = 0;
  // Blocks until Shutdown() is called.
  virtual void Wait() = 0;
  // Ends every subscription and stops serving; idempotent. Writes not yet in Redis get
  // options.redis.shutdown_timeout, then fail (UnpersistedWrites counts them).
  virtual void Shutdown() = 0;
  // Writes Redis refused or never got (failed, or still queued).
  virtual int64_t UnpersistedWrites() = 0;

 protected:
  GcsServer() = default;
};

}  // namespace phalanx::gcs
