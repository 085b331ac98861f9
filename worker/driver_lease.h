// A driver's lease in the GCS (gcs/driver_leases.h): renewed while the driver runs, so that
// what it made goes with it when it dies in any way, SIGKILL included.
#pragma once

#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "client/gcs_client.h"

namespace phalanx::worker {

class DriverLease {
 public:
  // Renews the lease of driver `owner_id` (its caller id) of the job job_id() names, through
  // `gcs` (which outlives this), from a thread of its own, and listens on a port of its own
  // that the GCS knocks on once the renewals stop: while this process lives its kernel
  // answers (a stopped process's too); once it is gone the host refuses the connection.
  DriverLease(gcs::GcsClient* gcs, std::string owner_id, std::function<std::string()> job_id,
              const std::string& gcs_address);
  ~DriverLease();
  DriverLease(const DriverLease&) = delete;
  DriverLease& operator=(const DriverLease&) = delete;

  // The driver shut down and released what it made: the lease ends (no release by the GCS).
  void End();

 private:
  void Run();
  rpc::RenewDriverLeaseRequest Request();

  gcs::GcsClient* const gcs_;
  const std::string owner_id_;
  const std::function<std::string()> job_id_;
  int listen_fd_ = -1;
  std::string knock_address_;
  std::string hostname_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace phalanx::worker
