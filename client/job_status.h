// A job's record as people read it: the plain view of rpc::JobInfo that `phalanx job status`
// prints and the elastic driver API returns (elastic/elastic.h), and its text form.
// No protobuf in this header: ToStatus takes the record by forward declaration.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/typed_id.h"

namespace phalanx {
namespace rpc {
class JobInfo;
}

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
  ActorId actor_id;
  NodeId node_id;
  double memory_bytes = 0;
};

// One fault (or scale request) and how the job healed, as unix ms (0: not reached yet):
// fault → detected → resumed (the survivors' next step) → full strength (as many ranks as
// before, or as the scale request asked for).
struct RecoveryStatus {
  int64_t id = 0;
  std::string kind;  // signal, exit_code, oom, node_died, hang, straggler, lease_expired, scale
  std::string message;
  int64_t fault_ms = 0;
  int64_t detected_ms = 0;
  int64_t resumed_ms = 0;
  int64_t full_strength_ms = 0;
  int world_before = 0;
  int world_during = 0;
  std::string restored_from;  // every rank was lost: where the state came from ("": survivors)
};

struct JobStatus {
  JobId job_id;
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
  int64_t steps_per_call = 0;  // of the last agreed call (0: none yet)
  std::string results;         // rank 0's Query("results") at completion
  ActorId controller_actor_id;
  std::vector<RankStatus> ranks;
  std::vector<std::string> allowed_nodes;  // the nodes the ranks may use (empty: any)
  std::vector<JobCondition> conditions;
  std::vector<JobEvent> events;
  std::vector<RecoveryStatus> recoveries;  // oldest first
  std::vector<std::pair<std::string, int>> restarts_by_cause;
  double fault_seconds = 0;       // time lost to faults: the sum of fault → resumed
  double step_skew = 1;           // the slowest rank's compute time over the median's, last step
  double network_check_skew = 0;  // the last network check's slowest over median (0: none)
  bool Done() const { return state == "SUCCEEDED" || state == "FAILED" || state == "STOPPED"; }
};

JobStatus ToStatus(const rpc::JobInfo& job);

// "job x (name): RUNNING — world size 3, epoch 2, step 120/300, loss 0.0123", then the ranks,
// the conditions and (with_events) the events, for printing.
std::string FormatStatus(const JobStatus& status, bool with_events = true);

}  // namespace phalanx
