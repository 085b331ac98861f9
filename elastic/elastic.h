// Running elastic training jobs from a C++ driver. A job is a spec (job_spec.h); Submit
// records it in the GCS and starts its controller actor (detached: the job outlives the
// driver); the controller does the rest. Scale/Stop requests and the status go through the
// GCS, so the CLI (`phalanx job status|scale|stop`) sees and does the same.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/job_status.h"
#include "elastic/job_spec.h"

namespace phalanx::elastic {

// A job's status is the job record's plain view (client/job_status.h).
using phalanx::FormatStatus;
using phalanx::JobCondition;
using phalanx::JobEvent;
using phalanx::JobId;
using phalanx::JobStatus;
using phalanx::RankStatus;
using phalanx::RecoveryStatus;

// Validates the spec, records the job and starts its controller. Returns the job's id.
// `code_path` empty in the spec: this program hosts the trainers (and the controller).
absl::StatusOr<JobId> Submit(JobSpec spec);
absl::StatusOr<JobId> SubmitYaml(const std::string& yaml);

absl::StatusOr<JobStatus> Status(const JobId& job_id);

// Asks for `replicas` ranks (clamped to min..max); with `ranks`, those ranks leave instead.
// Graceful: leaving ranks finish their step before their actors go.
absl::Status Scale(const JobId& job_id, int replicas, const std::vector<int>& ranks = {});
// The same, and from now on the ranks run only on `nodes` (node ids, hostnames or IP
// addresses; empty: any node): ranks elsewhere leave gracefully, new ones start there.
absl::Status Scale(const JobId& job_id, int replicas, const std::vector<int>& ranks,
                   const std::vector<std::string>& nodes);
absl::Status Stop(const JobId& job_id);

// Waits until the job ends or `timeout` passes (then DeadlineExceeded with the status in
// the message), calling `on_change` whenever a condition, event or the world size changes.
absl::StatusOr<JobStatus> Wait(const JobId& job_id, absl::Duration timeout,
                               const std::function<void(const JobStatus&)>& on_change = nullptr);

}  // namespace phalanx::elastic
