// The elastic job's record in the GCS, seen from outside the controller (internal: shared by
// the driver API and the CLI): reading it as a JobStatus, and writing scale/stop requests
// (GCS KV namespace "elastic", keys "<job>/scale" and "<job>/stop").
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "actors/elastic/elastic.h"
#include "gcs/gcs_client.h"

namespace phalanx::elastic {

JobStatus ToStatus(const rpc::JobInfo& job);
absl::StatusOr<JobStatus> ReadStatus(gcs::GcsClient& gcs, const std::string& job_id);
absl::Status RequestScale(gcs::GcsClient& gcs, const std::string& job_id, int replicas,
                          const std::vector<int>& ranks);
absl::Status RequestStop(gcs::GcsClient& gcs, const std::string& job_id);

}  // namespace phalanx::elastic
