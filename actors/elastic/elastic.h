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
#include "actors/elastic/job_spec.h"

namespace phalanx::elastic {

struct JobCondition {
  std::string type;  // Pending, Creating, Running, Scaling, Restarting, Succeeded, Failed
  int64_t time_ms = 0;
  std::string reason;
  std::string message;
};

struct JobEvent {
  int64_t time_ms = 0;
  std::string kind;  // rank_died, epoch, scaled_in, straggler, hang, …
  std::string message;
  int world_size = 0;
  int64_t epoch = 0;
};

struct RankStatus {
  int rank = 0;
  std::string actor_id;
  std::string node_id;
  double memory_bytes = 0;
};

struct JobStatus {
  std::string job_id;
  std::string name;
  std::string state;  // PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED
  std::string message;
  int world_size = 0;
  int64_t epoch = 0;
  int64_t step = 0;
  int64_t total_steps = 0;
  double loss = 0;
  int restarts = 0;
  int64_t last_checkpoint_step = 0;
  double steps_per_second = 0;
  std::string results;  // rank 0's Query("results") at completion
  std::string controller_actor_id;
  std::vector<RankStatus> ranks;
  std::vector<JobCondition> conditions;
  std::vector<JobEvent> events;
  bool Done() const { return state == "SUCCEEDED" || state == "FAILED" || state == "STOPPED"; }
};

// Validates the spec, records the job and starts its controller. Returns the job id.
// `code_path` empty in the spec: this program hosts the trainers (and the controller).
absl::StatusOr<std::string> Submit(JobSpec spec);
absl::StatusOr<std::string> SubmitYaml(const std::string& yaml);

absl::StatusOr<JobStatus> Status(const std::string& job_id);

// Asks for `replicas` ranks (clamped to min..max); with `ranks`, those ranks leave instead.
// Graceful: leaving ranks finish their step before their actors go.
absl::Status Scale(const std::string& job_id, int replicas, const std::vector<int>& ranks = {});
absl::Status Stop(const std::string& job_id);

// Waits until the job ends or `timeout` passes (then DeadlineExceeded with the status in
// the message), calling `on_change` whenever a condition, event or the world size changes.
absl::StatusOr<JobStatus> Wait(const std::string& job_id, absl::Duration timeout,
                               const std::function<void(const JobStatus&)>& on_change = nullptr);

// "Running (world 3, step 120/300, loss 0.0123)" and the conditions/events, for printing.
std::string FormatStatus(const JobStatus& status, bool with_events = true);

}  // namespace phalanx::elastic
